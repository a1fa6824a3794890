//===- Model.h - Model representation inside the runtime --------*- C++ -*-===//
//
// The concrete type behind the opaque kvrt_model handle, and the tensors of a
// config (ModelTensors.h) as the loaders, the writers and the synthetic
// generator lay them out in memory.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_MODEL_H
#define KVIR_RUNTIME_CORE_MODEL_H

#include "runtime/core/KVRuntime.h"
#include "runtime/core/ModelTensors.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kvir {
struct PackedWeights;
struct DecodeRows;
} // namespace kvir

namespace kvrt {

/// One tensor a config has (ModelTensors.def), sized for it.
struct TensorSpec {
  const TensorDecl *decl;
  /// The kvrt_model_weights field.
  const char *name;
  /// Number of elements.
  uint64_t count;
  /// Rows of all its slices (n_layers times the declared rows for a
  /// per-layer tensor).
  uint64_t rows;
  /// Row length (the input size of a matrix; dim for norms and embeddings).
  uint64_t fanIn;
  TensorKind kind;
  /// Whether the tensor is n_layers equal slices, one per layer.
  bool perLayer;
};

/// The tensors a config has, in file order (ModelTensors.def), without the
/// legacy RoPE tables. Fails (returns nullopt) when a count overflows 64
/// bits.
std::optional<std::vector<TensorSpec>>
tensorSpecs(const kvrt_model_config &config);

/// tensorSpecs of a config known to be valid (a model's), by value: a
/// range-for over `*tensorSpecs(c)` would read a destroyed temporary.
std::vector<TensorSpec> specsOf(const kvrt_model_config &config);

/// Number of floats of the legacy RoPE tables that llama2.c files carry
/// between rms_final and wcls.
uint64_t legacyRopeTableFloats(const kvrt_model_config &config);

/// kvrt_model_config_init's config with these sizes (interleaved RoPE,
/// theta 10000, eps 1e-5, a shared classifier): a synthetic model's or a
/// test's.
kvrt_model_config sizedConfig(int32_t dim, int32_t hidden, int32_t layers,
                              int32_t heads, int32_t kvHeads, int32_t vocab,
                              int32_t seqLen);

/// Returns an empty string for a valid config, else what is wrong with it.
std::string describeConfigError(const kvrt_model_config &config);

/// Builds a model that owns `weights` (all tensors of tensorSpecs, in order,
/// f32) and fills its weights: the tensors it has, and the absent ones tied
/// to another (ModelTensors.def).
kvrt_model *makeModel(const kvrt_model_config &config,
                      std::vector<float> weights);

/// Where the slices of a model's tensors are: `slices[TensorId]` holds the
/// slices of each tensor the config has (1, or n_layers for a per-layer
/// one), pointing into `storage` (a mapped file, or a copy the model owns)
/// or into `owned` (tensors converted to f32 at load).
struct ModelParts {
  std::shared_ptr<const void> storage;
  std::vector<float> owned;
  std::array<std::vector<kvrt_weight_slice>, kNumTensors> slices;
};

/// Builds a model over `parts` (their pointers stay valid: the vectors are
/// moved, not copied) and fills its weights as makeModel does.
kvrt_model *makeModel(const kvrt_model_config &config, ModelParts parts);

/// Every weight of the model as f32, in tensorSpecs order (the layout of
/// makeModel's `weights`): the model's own data for an f32 model, else a
/// dequantised copy made on the first call and kept with the model (the
/// oracle and the writers read it).
const std::vector<float> &f32Weights(const kvrt_model &model);

/// Calls `fn(bytes, size, index)` on consecutive chunks of `chunk` bytes
/// (the last one shorter) of the concatenation of every slice of every
/// tensor the model has, in tensorSpecs order: the bytes that identify its
/// weights (the block store's model fingerprint). For an f32 model those are
/// its f32Weights.
void forEachWeightChunk(
    const kvrt_model &model, size_t chunk,
    const std::function<void(const void *, size_t, size_t)> &fn);

/// Bytes of every slice of every tensor the model has (tied ones once).
uint64_t weightBytes(const kvrt_model &model);

} // namespace kvrt

/// A loaded or generated model: its config, and its weights where they are
/// (kvrt::ModelParts): f32 memory it owns (llama2.c checkpoints, synthetic
/// models), or a GGUF file's mapping.
struct kvrt_model {
  std::atomic<int64_t> refs{1};
  kvrt_model_config config{};
  kvrt::ModelParts parts;
  kvrt_model_weights weights{};
  /// kvrt::f32Weights of a model whose weights are not all f32 in `owned`.
  mutable std::once_flag f32Once;
  mutable bool f32Owned = false;
  mutable std::vector<float> f32Copy;
  /// kvir::packedWeights (ForwardCall.h): the layers' f32 matrices packed
  /// for the CPU forward on first use.
  mutable std::once_flag packedOnce;
  mutable std::shared_ptr<const kvir::PackedWeights> packed;
  /// kvir::decodeRows (ForwardCall.h): the Q8_0 and Q4_K matrices repacked for
  /// the CPU forward's decode steps on first use: as the host decides (not
  /// on one that keeps the file's rows), never (KVRT_LOAD_NO_REPACK) or on
  /// every host (KVRT_LOAD_REPACK).
  enum class Repack { ByHost, Never, Always };
  Repack repack = Repack::ByHost;
  /// The mapping of the model's file its weights lie in (a GGUF file loaded
  /// without KVRT_LOAD_READ; null otherwise): pages of it the runtime may
  /// give back where it holds a copy the forward reads instead. A slice
  /// outside it (one a caller pointed elsewhere) is never given back.
  const void *mappedBegin = nullptr;
  size_t mappedBytes = 0;
  mutable std::once_flag decodeRowsOnce;
  mutable std::shared_ptr<const kvir::DecodeRows> decodeRows;
};

#endif // KVIR_RUNTIME_CORE_MODEL_H
