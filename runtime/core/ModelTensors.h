//===- ModelTensors.h - The model's tensors as a table ----------*- C++ -*-===//
//
// The C++ view of ModelTensors.def: one TensorDecl per tensor a model may
// have, in llama2.c order, the evaluation of its shape and presence from a
// config, and the typed accessor of a weight's data. Every reader and writer
// of models walks this table instead of listing tensors: the llama2.c and
// GGUF readers and writers, the synthetic model, the oracle and the runtime's
// forward calls.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_MODELTENSORS_H
#define KVIR_RUNTIME_CORE_MODELTENSORS_H

#include "runtime/core/KVRuntime.h"

#include <cstddef>
#include <cstdint>
#include <iterator>

namespace kvrt {

/// The symbols a tensor's shape is written in (shapeValue).
enum class ShapeSymbol { One, Dim, KvDim, Hidden, Vocab };
/// A whole-model tensor, or n_layers equal slices, one per layer.
enum class TensorScope { Global, Layer };
/// What a tensor's values are: how the synthetic model draws them.
enum class TensorKind { Embedding, Norm, Matrix, Bias };
/// Who reads a tensor: the generated forward (a weight field of its
/// prefill), or the runtime (the embedding rows it copies in).
enum class TensorReader { Forward, Runtime };
/// When a config has a tensor (tensorPresent).
enum class TensorPresence { Always, SeparateClassifier, QkvBias };

/// The tensors of ModelTensors.def by field name, in order; `none` follows
/// the last one.
enum class TensorId : int {
#define KVRT_MODEL_TENSOR(field, ...) field,
#include "runtime/core/ModelTensors.def"
  none
};

/// One entry of ModelTensors.def.
struct TensorDecl {
  TensorId id;
  /// The member of kvrt_model_weights, as text and as a member pointer.
  const char *field;
  kvrt_weight kvrt_model_weights::*member;
  /// The GGUF name (a per-layer tensor's is "blk.N." + gguf).
  const char *gguf;
  TensorScope scope;
  /// The shape of one slice, [rows][cols].
  ShapeSymbol rows, cols;
  TensorKind kind;
  TensorReader reader;
  TensorPresence presence;
  /// The tensor this one is tied to where it is absent, or none.
  TensorId absent;
};

/// Every tensor a model may have, in llama2.c order.
inline constexpr TensorDecl kTensors[] = {
#define KVRT_MODEL_TENSOR(field, gguf, scope, rows, cols, kind, reader,        \
                          presence, absent)                                    \
  {TensorId::field,                                                            \
   #field,                                                                     \
   &kvrt_model_weights::field,                                                 \
   gguf,                                                                       \
   TensorScope::scope,                                                         \
   ShapeSymbol::rows,                                                          \
   ShapeSymbol::cols,                                                          \
   TensorKind::kind,                                                           \
   TensorReader::reader,                                                       \
   TensorPresence::presence,                                                   \
   TensorId::absent},
#include "runtime/core/ModelTensors.def"
};

constexpr size_t kNumTensors = std::size(kTensors);

/// The entry of `id`.
constexpr const TensorDecl &tensorDecl(TensorId id) {
  return kTensors[static_cast<size_t>(id)];
}

/// How many tensors the generated forward reads: the weight fields of its
/// prefill (ForwardABI.def), in kTensors order.
constexpr size_t numForwardWeights() {
  size_t n = 0;
  for (const TensorDecl &t : kTensors)
    n += t.reader == TensorReader::Forward;
  return n;
}
constexpr size_t kNumForwardWeights = numForwardWeights();

/// The value of a shape symbol for `config`.
uint64_t shapeValue(ShapeSymbol symbol, const kvrt_model_config &config);

/// Whether `config` has the tensors of `presence`.
bool tensorPresent(TensorPresence presence, const kvrt_model_config &config);

/// Sets what makes `presence` hold in `config`: a reader that finds an
/// optional tensor in a file (GGUF's output.weight) learns the config from
/// it.
void setTensorPresent(TensorPresence presence, kvrt_model_config &config);

/// The f32 data of slice `slice` of a weight (NULL for an absent one). A
/// slice of another format is a programming error: the call aborts with a
/// message naming it (a reader that takes other formats switches on the
/// slice's format first, or dequantises: Quant.h).
const float *f32Data(const kvrt_weight &weight, int64_t slice = 0);

} // namespace kvrt

#endif // KVIR_RUNTIME_CORE_MODELTENSORS_H
