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

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvrt {

/// One tensor a config has (ModelTensors.def), sized for it.
struct TensorSpec {
  const TensorDecl *decl;
  /// The kvrt_model_weights field.
  const char *name;
  /// Number of floats.
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

} // namespace kvrt

/// A loaded or generated model: config and weights in one buffer.
struct kvrt_model {
  std::atomic<int64_t> refs{1};
  kvrt_model_config config{};
  /// All weights in llama2.c order (without the legacy RoPE tables).
  std::vector<float> data;
  kvrt_model_weights weights{};
};

#endif // KVIR_RUNTIME_CORE_MODEL_H
