//===- RetargetModel.h - Retype a program to another model -----*- C++ -*-===//
//
// The reusable piece of kv-retarget-model: kv-run's --retarget-model calls it
// with the type of the model file it loaded.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_PASSES_TRANSFORMS_RETARGETMODEL_H
#define KVIR_PASSES_TRANSFORMS_RETARGETMODEL_H

#include "dialects/KV/KVDialect.h"

#include "mlir/IR/BuiltinOps.h"

namespace mlir::kv {

/// What retargetModel changed.
struct RetargetSummary {
  /// The model type the program was written for; null when the module
  /// names none (nothing to retarget).
  ModelType from;
  /// Values (op results and block arguments) whose type changed.
  unsigned models = 0, caches = 0, logits = 0;
};

/// Retypes `module`, written for one `!kv.model`, to `target`: every
/// `!kv.model` becomes `target`, every `!kv.cache` holds K/V of `target`'s
/// layers x KV heads x head size (element type and context kept), and every
/// logits tensor (of kv.prefill and kv.logits, through func.return and
/// func.call) gets `target`'s vocabulary as its columns. A module already of
/// `target` is left untouched. Fails, after a diagnostic at the op or value
/// concerned, where the program cannot follow: two model types, a cache of
/// another shape, logits used by an op whose type it cannot derive, a
/// kv.attention whose query shape would change, a constant token id out of
/// `target`'s vocabulary. Nothing is changed on failure.
FailureOr<RetargetSummary> retargetModel(ModuleOp module, ModelType target);

} // namespace mlir::kv

#endif // KVIR_PASSES_TRANSFORMS_RETARGETMODEL_H
