//===- llama-speed.cpp - Prefill and decode times of llama.cpp --*- C++ -*-===//
//
// Not part of the build: side-by-side.sh compiles it against llama.cpp's
// prebuilt library (libllama, from the npm package @node-llama-cpp/linux-x64)
// and its headers (llama.h, ggml-backend.h from the llama.cpp source of the
// same release), to time llama.cpp on the GGUF files KVIR is timed on.
//
//   llama-speed MODEL.gguf PROMPT-FILE DECODE THREADS
//
// Loads the model (mapped, as llama.cpp does by default; its default context
// parameters otherwise: f16 K/V cache, flash attention as it decides),
// prefills the whitespace-separated token ids of PROMPT-FILE verbatim at
// positions 0..n-1 in one batch (logits of the last position only), then
// generates DECODE tokens greedily (the argmax of each step's logits, one
// llama_decode of one token per token after the first), as kv-run --greedy
// does. Prints one line:
//
//   prefill_ms P decode_ms_per_token D decode_steps S greedy ID ID ...
//
//===----------------------------------------------------------------------===//

#include "llama-peer.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

namespace {

double msSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
      .count();
}

/// The argmax of the last computed logits (ties to the lower id, as kv-run).
llama_token argmax(llama_context *ctx, int32_t vocab) {
  const float *logits = llama_get_logits_ith(ctx, -1);
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best])
      best = i;
  return llama_token(best);
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: llama-speed MODEL.gguf PROMPT-FILE DECODE THREADS\n");
    return 2;
  }
  std::ifstream ids(argv[2]);
  std::vector<llama_token> prompt = peer::readIds(ids);
  int decode = std::atoi(argv[3]), threads = std::atoi(argv[4]);
  if (prompt.empty() || decode < 1 || threads < 1) {
    std::fprintf(stderr, "llama-speed: no prompt, or DECODE/THREADS < 1\n");
    return 2;
  }
  llama_model *model = peer::loadModel("llama-speed", argv[1]);
  if (!model)
    return 1;
  int32_t n = int32_t(prompt.size());
  llama_context *ctx = llama_init_from_model(
      model, peer::contextParams(n + decode + 16, n, threads));
  if (!ctx) {
    std::fprintf(stderr, "llama-speed: cannot create a context\n");
    return 1;
  }
  int32_t vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  llama_batch batch = peer::promptBatch(prompt, /*allLogits=*/false);
  auto start = std::chrono::steady_clock::now();
  if (llama_decode(ctx, batch) != 0) {
    std::fprintf(stderr, "llama-speed: llama_decode failed\n");
    return 1;
  }
  double prefillMs = msSince(start);
  std::vector<llama_token> generated{argmax(ctx, vocab)};
  start = std::chrono::steady_clock::now();
  for (int step = 1; step < decode; ++step) {
    llama_token next = generated.back();
    llama_batch one = llama_batch_get_one(&next, 1);
    if (llama_decode(ctx, one) != 0) {
      std::fprintf(stderr, "llama-speed: llama_decode failed\n");
      return 1;
    }
    generated.push_back(argmax(ctx, vocab));
  }
  double decodeMs = msSince(start);
  std::printf("prefill_ms %.3f decode_ms_per_token %.3f decode_steps %d "
              "greedy",
              prefillMs, decode > 1 ? decodeMs / (decode - 1) : 0.0,
              decode - 1);
  for (llama_token t : generated)
    std::printf(" %d", t);
  std::printf("\n");
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
