//===- GGUFFormat.h - What the GGUF reader and writer share -----*- C++ -*-===//
//
// GGUF v3 (little-endian): magic "GGUF", u32 version, u64 tensor count, u64
// metadata count; metadata entries (string key, u32 value type, value);
// tensor infos (string name, u32 n_dims, u64 dims[n_dims] innermost first,
// u32 ggml type, u64 offset into the data section); the data section at the
// next multiple of general.alignment (default 32). Strings are a u64 length
// and that many bytes.
//
// Internal to runtime/core: the constants and type ids of the format and the
// tensors a llama model has in it, for GGUFReader.cpp and GGUFWriter.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_GGUFFORMAT_H
#define KVIR_RUNTIME_CORE_GGUFFORMAT_H

#include "runtime/core/GGUF.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvrt::gguf {

constexpr uint32_t kMagic = 0x46554747; // "GGUF" little-endian
constexpr uint32_t kVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;
constexpr size_t kQ8BlockBytes = 2 + kQ8Block;

/// GGUF metadata value types.
enum ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

/// ggml tensor types the reader dequantises and the writer writes.
enum TensorType : uint32_t {
  kTF32 = 0,
  kTF16 = 1,
  kTQ8_0 = 8,
  kTBF16 = 30,
};

/// Token types of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
enum TokenType : int32_t { kNormal = 1, kByte = 6 };

/// The GGUF name and expected shape (innermost first) of each tensor of
/// tensorSpecs(config), in llama2.c order; per-layer tensors have one entry
/// per layer. At most `limit` of them, so that a file cannot make the reader
/// name more tensors than it holds (plus one, the first missing one).
struct Expected {
  std::string name;
  uint64_t dims[2];
  uint32_t nDims;
};

inline std::vector<Expected> expectedTensors(const kvrt_model_config &c,
                                             size_t limit = SIZE_MAX) {
  uint64_t dim = c.dim, hidden = c.hidden_dim, vocab = c.vocab_size,
           kvDim = kvir::kvDim(c);
  std::vector<Expected> out;
  out.push_back({"token_embd.weight", {dim, vocab}, 2});
  struct PerLayer {
    const char *name;
    uint64_t in, out;
  };
  // In llama2.c order: rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3.
  PerLayer perLayer[] = {{"attn_norm", dim, 0},     {"attn_q", dim, dim},
                         {"attn_k", dim, kvDim},    {"attn_v", dim, kvDim},
                         {"attn_output", dim, dim}, {"ffn_norm", dim, 0},
                         {"ffn_gate", dim, hidden}, {"ffn_down", hidden, dim},
                         {"ffn_up", dim, hidden}};
  for (const PerLayer &t : perLayer)
    for (int32_t l = 0; l < c.n_layers; ++l) {
      if (out.size() >= limit)
        return out;
      out.push_back({str("blk.", l, ".", t.name, ".weight"),
                     {t.in, t.out},
                     t.out ? 2u : 1u});
    }
  out.push_back({"output_norm.weight", {dim, 0}, 1});
  if (!c.shared_classifier)
    out.push_back({"output.weight", {dim, vocab}, 2});
  return out;
}

} // namespace kvrt::gguf

#endif // KVIR_RUNTIME_CORE_GGUFFORMAT_H
