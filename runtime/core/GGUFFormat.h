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
#include "runtime/core/ModelTensors.h"
#include "runtime/core/Support.h"
#include "runtime/core/WeightFormat.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvrt::gguf {

constexpr uint32_t kMagic = 0x46554747; // "GGUF" little-endian
constexpr uint32_t kVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;

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

/// Token types of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
enum TokenType : int32_t { kNormal = 1, kByte = 6 };

/// The GGUF name of slice `layer` of tensor `t` ("blk.N." + its name for a
/// per-layer tensor).
inline std::string tensorName(const TensorDecl &t, int32_t layer) {
  return t.scope == TensorScope::Layer ? str("blk.", layer, ".", t.gguf)
                                       : std::string(t.gguf);
}

/// One tensor of a llama model's file: its name, its shape (innermost
/// first; a vector has one dimension), and the slice of the model's tensor
/// it holds.
struct Expected {
  std::string name;
  uint64_t dims[2];
  uint32_t nDims;
  const TensorDecl *decl;
  int32_t layer;
};

/// The tensors a file of `c` has (ModelTensors.def), in order: a per-layer
/// tensor has one per layer. At most `limit` of them, so that a file cannot
/// make the reader name more tensors than it holds (plus one, the first
/// missing one).
inline std::vector<Expected> expectedTensors(const kvrt_model_config &c,
                                             size_t limit = SIZE_MAX) {
  std::vector<Expected> out;
  for (const TensorDecl &t : kTensors) {
    if (!tensorPresent(t.presence, c))
      continue;
    uint64_t dims[2] = {shapeValue(t.cols, c), shapeValue(t.rows, c)};
    uint32_t nDims = t.rows == ShapeSymbol::One ? 1 : 2;
    int32_t layers = t.scope == TensorScope::Layer ? c.n_layers : 1;
    for (int32_t l = 0; l < layers; ++l) {
      if (out.size() >= limit)
        return out;
      out.push_back({tensorName(t, l), {dims[0], dims[1]}, nDims, &t, l});
    }
  }
  return out;
}

} // namespace kvrt::gguf

#endif // KVIR_RUNTIME_CORE_GGUFFORMAT_H
