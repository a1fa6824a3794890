//===- llama-logits.cpp - Logits of a GGUF file from llama.cpp --*- C++ -*-===//
//
// Not part of the build: llama-agreement.sh compiles it against llama.cpp's
// prebuilt library (libllama, from the npm package @node-llama-cpp/linux-x64)
// and its headers (llama.h, ggml-backend.h from the llama.cpp source of the
// same release), to check that the GGUF files kv-convert writes load in
// llama.cpp and give the logits KVIR computes on them.
//
//   llama-logits MODEL.gguf "ID ID ..." OUT.f32 [THREADS]
//   llama-logits --dequantize MODEL.gguf OUT.f32
//   llama-logits --quantize IN.gguf OUT.gguf FTYPE
//
// Loads the model (mapped, as llama.cpp does by default), prefills the token
// ids verbatim (no BOS added) at positions 0..n-1 in one batch, and writes
// the logits of every position, [n][vocab] float32, as kv-run
// --dump-logits does. The K/V cache is f32 and flash attention is off, so
// that what differs from KVIR is the matmuls: llama.cpp multiplies a
// quantised weight with its activations quantised per block (Q8_0 / Q8_K),
// KVIR with them in f32.
//
// With --dequantize, ggml's own dequantisation (its type traits' to_float)
// of every weight of the file, in llama2.c's order (token_embd, then each
// per-layer tensor over all layers, output_norm, output): the weights as
// llama.cpp reads them, to compare with KVIR's (kv-convert FILE.gguf
// FILE.bin writes them as KVIR dequantises them).
//
// With --quantize, llama.cpp's llama-quantize (llama_model_quantize, no
// importance matrix) writes IN in llama.cpp's file type FTYPE (7 Q8_0, 2
// Q4_0, 15 Q4_K_M, 17 Q5_K_M, 14 Q4_K_S, 18 Q6_K): files of llama.cpp's
// for KVIR to read, and its quantisers to compare KVIR's with.
//
//===----------------------------------------------------------------------===//

#include "llama-peer.h"

#include "ggml.h"
#include "gguf.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

/// --dequantize: every weight of the file through ggml's to_float.
int dequantize(const char *path, const char *outPath) {
  ggml_context *data = nullptr;
  gguf_init_params params = {/*no_alloc=*/false, &data};
  gguf_context *gguf = gguf_init_from_file(path, params);
  if (!gguf) {
    std::fprintf(stderr, "llama-logits: ggml cannot read %s\n", path);
    return 1;
  }
  int64_t key = gguf_find_key(gguf, "llama.block_count");
  uint32_t layers = key < 0 ? 0 : gguf_get_val_u32(gguf, key);
  std::vector<std::string> names = {"token_embd.weight"};
  for (const char *t :
       {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
        "ffn_gate", "ffn_down", "ffn_up"})
    for (uint32_t l = 0; l < layers; ++l)
      names.push_back("blk." + std::to_string(l) + "." + t + ".weight");
  names.push_back("output_norm.weight");
  names.push_back("output.weight");
  std::FILE *out = std::fopen(outPath, "wb");
  if (!out)
    return 1;
  for (const std::string &name : names) {
    ggml_tensor *t = ggml_get_tensor(data, name.c_str());
    if (!t)
      continue; // output.weight of a tied classifier
    std::vector<float> values(size_t(ggml_nelements(t)));
    // (F32 has no to_float: it is what it is.)
    if (t->type == GGML_TYPE_F32)
      std::memcpy(values.data(), t->data, values.size() * sizeof(float));
    else
      ggml_get_type_traits(t->type)->to_float(t->data, values.data(),
                                              int64_t(values.size()));
    std::fwrite(values.data(), sizeof(float), values.size(), out);
  }
  std::fclose(out);
  gguf_free(gguf);
  ggml_free(data);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc == 4 && std::string(argv[1]) == "--dequantize")
    return dequantize(argv[2], argv[3]);
  if (argc == 5 && std::string(argv[1]) == "--quantize") {
    llama_backend_init();
    llama_model_quantize_params params = llama_model_quantize_default_params();
    params.ftype = static_cast<llama_ftype>(std::atoi(argv[4]));
    params.nthread = 1;
    return llama_model_quantize(argv[2], argv[3], &params) == 0 ? 0 : 1;
  }
  if (argc < 4) {
    std::fprintf(stderr, "usage: llama-logits MODEL.gguf \"ID ID ...\" "
                         "OUT.f32 [THREADS]\n");
    return 2;
  }
  std::istringstream ids(argv[2]);
  std::vector<llama_token> tokens = peer::readIds(ids);
  if (tokens.empty()) {
    std::fprintf(stderr, "llama-logits: no token ids\n");
    return 2;
  }
  int threads = argc > 4 ? std::atoi(argv[4]) : 1;
  llama_model *model = peer::loadModel("llama-logits", argv[1]);
  if (!model)
    return 1;
  int32_t n = int32_t(tokens.size());
  llama_context_params cp = peer::contextParams(n + 16, n, threads);
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context *ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "llama-logits: cannot create a context\n");
    return 1;
  }
  llama_batch batch = peer::promptBatch(tokens, /*allLogits=*/true);
  if (llama_decode(ctx, batch) != 0) {
    std::fprintf(stderr, "llama-logits: llama_decode failed\n");
    return 1;
  }
  int32_t vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  std::FILE *out = std::fopen(argv[3], "wb");
  if (!out) {
    std::fprintf(stderr, "llama-logits: cannot write %s\n", argv[3]);
    return 1;
  }
  for (int32_t i = 0; i < n; ++i)
    std::fwrite(llama_get_logits_ith(ctx, i), sizeof(float), size_t(vocab),
                out);
  std::fclose(out);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
