//===- Model.h - Model representation inside the runtime --------*- C++ -*-===//
//
// The concrete type behind the opaque kvrt_model handle, and the tensor
// layout of the llama2.c format shared by the loader, the writer and the
// synthetic generator.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_MODEL_H
#define KVIR_RUNTIME_CORE_MODEL_H

#include "runtime/core/KVRuntime.h"

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvrt {

/// What a tensor's values are, which decides how synthetic weights are drawn.
enum class TensorKind { Embedding, Norm, Matrix };

/// One tensor of the llama2.c file, in file order.
struct TensorSpec {
  const char *name;
  /// Number of floats.
  uint64_t count;
  /// Row length (the input size of a matrix; dim for norms and embeddings).
  uint64_t fanIn;
  TensorKind kind;
  /// Whether the tensor is n_layers equal slices, one per layer.
  bool perLayer;
};

/// The tensors a config has, in file order, without the legacy RoPE tables.
/// The last one is wcls when the classifier is not shared. Fails (returns
/// nullopt) when a count overflows 64 bits.
std::optional<std::vector<TensorSpec>>
tensorSpecs(const kvrt_model_config &config);

/// Number of floats of the legacy RoPE tables that llama2.c files carry
/// between rms_final and wcls.
uint64_t legacyRopeTableFloats(const kvrt_model_config &config);

/// Returns an empty string for a valid config, else what is wrong with it.
std::string describeConfigError(const kvrt_model_config &config);

/// Builds a model that owns `weights` (all tensors of tensorSpecs, in order)
/// and fills its weight pointers.
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
