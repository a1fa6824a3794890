//===- Attribution.h - The entry an attribution runs ------------*- C++ -*-===//
//
// `kv-run --attribute` needs, next to the answer of an edited context, the
// operands of the edit: the old cache and the new tokens. This derives, from
// the program before planning, an auxiliary entry that computes and returns
// exactly those (a clone of the entry whose return is replaced), and reads
// from the ops which segments are edited and answered and the kinds the
// context declares. The math is runtime/exec/Attribution.h's.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_COMPILER_ATTRIBUTION_H
#define KVIR_DRIVER_COMPILER_ATTRIBUTION_H

#include "runtime/exec/Attribution.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace kvir::compiler {

/// What the auxiliary entry returns and what the attribution reads.
struct AttributionEntry {
  /// The auxiliary entry: same arguments as the entry, returns (the cache
  /// the edit was applied to, its new tokens).
  std::string entry;
  /// The edited segment and the answer's segment.
  std::string edited, answer;
  /// The index of the answer among the entry's results.
  unsigned answerResult = 0;
  /// The segments the context declares, in order, with their kinds.
  std::vector<exec::SegmentInfo> segments;
  /// Where the kv.edit is (what run-time failures are reported at).
  mlir::LocationAttr editLoc;
};

/// Finds the answer of `entryName` (its first logits result) and the
/// kv.edit it reads (`kv.logits %m, %e[@answer]` with `%e = kv.edit ...`),
/// and adds the auxiliary entry `__kv_attribution_<entry>` to `module`. Run
/// before planning (kv-optimize removes kv.edit). Failure after a
/// diagnostic that says what the program lacks.
mlir::FailureOr<AttributionEntry>
addAttributionEntry(mlir::ModuleOp module, llvm::StringRef entryName);

} // namespace kvir::compiler

#endif // KVIR_DRIVER_COMPILER_ATTRIBUTION_H
