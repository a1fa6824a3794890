//===- Values.h - What crosses the entry of a compiled program --*- C++ -*-===//
//
// The values a runner passes to a compiled kv program's entry and reads back
// from it (models, token lists, logits, caches, tensors, integers), and the
// work a run counts. No MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_EXEC_VALUES_H
#define KVIR_RUNTIME_EXEC_VALUES_H

#include "runtime/core/KVRuntime.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace kvir::exec {

/// What crosses the entry boundary.
enum class ValueKind { Model, Index, Tokens, Logits, Cache, Tensor };

/// The spelling of a kind in manifests and reports.
const char *valueKindName(ValueKind kind);

/// A shared reference to a view; views are immutable values.
using ViewRef = std::shared_ptr<kvrt_view>;

/// Takes ownership of one reference (NULL gives an empty ViewRef).
ViewRef adoptView(kvrt_view *view);

/// Logits computed by one prefill, with what they were computed from.
struct Logits {
  int64_t rows = 0, vocab = 0;
  std::vector<float> data;
  /// The view the prefill attended (its view list, shifted and concatenated).
  ViewRef context;
  /// The tokens it computed, and the position of the first.
  std::vector<int32_t> tokens;
  int64_t position = 0;
  /// Whether only the last token's row was computed.
  bool lastOnly = false;
  /// The cache the prefill returned (context plus the new run).
  ViewRef result;
};

/// An f32 tensor (attention queries and outputs), row-major.
struct Tensor {
  int64_t dims[3] = {0, 0, 0};
  std::vector<float> data;
};

/// An argument or a result.
struct Value {
  ValueKind kind = ValueKind::Index;
  int64_t index = 0;
  std::vector<int32_t> tokens;
  std::shared_ptr<const Logits> logits;
  std::shared_ptr<const Tensor> tensor;
  ViewRef cache;
};

/// Work done, in the units of docs/design.md ("Costs").
struct WorkStats {
  /// Backend prefill calls and the tokens they computed (all layers).
  int64_t prefillCalls = 0, prefillTokens = 0;
  /// Rows of logits computed.
  int64_t logitsRows = 0;
  /// Tokens whose scan-layer K/V were computed for a deviation scan.
  int64_t scanTokens = 0;
  /// Model FLOPs (runtime/core/ModelCost.h) of all of the above.
  int64_t flops = 0;
  /// Bytes of K/V written to new pages.
  int64_t kvBytesWritten = 0;
  /// Wall time, in seconds.
  double seconds = 0;
};

} // namespace kvir::exec

#endif // KVIR_RUNTIME_EXEC_VALUES_H
