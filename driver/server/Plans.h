//===- Plans.h - The kv programs kv-serve compiles --------------*- C++ -*-===//
//
// An edit, a compose or a block of a context is run as a compiled kv
// program: the server writes the program for the context's shape, plans it
// with kv-optimize and JIT-compiles it once (PlanCache.h), then runs it on
// the context's cache for every request of that shape.
//
// The shape is canonical, so that few programs serve many contexts: an edit
// plan depends on which segments it keeps, which it recomputes and which it
// reuses shifted, not on how many there are or what they are called.
// Segments are grouped (everything before the edited one is one group kept
// as it is; consecutive recomputed segments are one group; consecutive
// reused ones are one group unless a repair budget is spent per segment;
// an erratum's answer and everything after it are one group), the groups
// get positional names (pre, s, g1, g2, ...), and the context's cache is
// relabelled to them for the run and back afterwards (view metadata only).
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_SERVER_PLANS_H
#define KVIR_DRIVER_SERVER_PLANS_H

#include "driver/server/Requests.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvir::serve {

/// A segment as a plan sees it: name, kind, dependencies, length.
struct SegmentShape {
  std::string name, kind;
  std::vector<std::string> deps;
  int64_t tokens = 0;
};

/// The canonical context of one edit.
struct EditShape {
  /// The groups, in order, as the program's kv.context declares them.
  std::vector<SegmentShape> groups;
  /// The label of the edited group.
  std::string edited;
  /// The group of each segment of the context.
  std::vector<size_t> groupOf;
  /// For an erratum: the first segment of the answer group (the correction
  /// goes before it).
  size_t answer = 0;
};

/// The canonical shape of an edit of segment `edited` of `segments` with
/// `strategy` (exact, cot_slice, erratum); `perSegmentRepair` keeps reused
/// segments apart (a repair budget is spent per segment). False with
/// `error` when the edit cannot be planned (an erratum of the last
/// segment).
bool canonicalEdit(const std::vector<SegmentShape> &segments, size_t edited,
                   const std::string &strategy, bool perSegmentRepair,
                   EditShape &out, std::string &error);

/// The segments an edit of `edited` recomputes with cot_slice: it and every
/// later one that depends on a recomputed one (docs/design.md).
std::vector<bool> dependencySlice(const std::vector<SegmentShape> &segments,
                                  size_t edited);

/// The `#kv.strategy` of an edit, e.g. `<cot_slice, first_k = 4>`.
std::string strategyText(const std::string &strategy, const Repair &repair);
/// The repair of a compose, e.g. `<first_k = 4>` ("" without one).
std::string repairText(const Repair &repair);

/// Program texts. `model` and `cache` are the printed `!kv.model<...>` of
/// the served model and the `!kv.cache<LxHxDxT` prefix of its pages (the
/// context symbol, when there is one, is added here). Every program's entry
/// is @main.
///
/// Edit: @main(model, cache, tokens[, correction]) -> cache.
std::string editProgram(const std::string &model, const std::string &cache,
                        const EditShape &shape, const std::string &strategy,
                        bool correction);
/// Compose: @main(model, cache, block) -> cache, with `repair` ("" none).
std::string composeProgram(const std::string &model, const std::string &cache,
                           const std::string &repair);
/// Block: @main(model, tokens) -> cache, a kv.load_block at position 0
/// (fetched from the block store, or prefilled and stored).
std::string blockProgram(const std::string &model, const std::string &cache);

} // namespace kvir::serve

#endif // KVIR_DRIVER_SERVER_PLANS_H
