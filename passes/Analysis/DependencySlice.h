//===- DependencySlice.h - Dependency slices of a context -------*- C++ -*-===//
//
// The dependency DAG of a kv.context, the plan of an edit (what is kept,
// recomputed and reused, and by which offset), and the cost of a plan in
// tokens and model FLOPs next to the exact strategy and a full prefill.
//
// Plain C++ over the verified IR, so kv-run can price a plan with the sizes it
// sees at run time and the passes can price it with the sizes they know.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_PASSES_ANALYSIS_DEPENDENCYSLICE_H
#define KVIR_PASSES_ANALYSIS_DEPENDENCYSLICE_H

#include "dialects/KV/KVOps.h"
#include "runtime/core/ModelCost.h"

#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>

namespace mlir::kv {

/// One segment of a context, as the analysis sees it.
struct SegmentInfo {
  std::string name;
  SegmentKind kind;
  /// The declared token count; empty for a dynamic segment.
  std::optional<int64_t> size;
  /// Indices of the segments it depends on (all earlier).
  llvm::SmallVector<unsigned> deps;
};

/// The dependency DAG of a kv.context, segments indexed in declaration order.
class DependencyGraph {
public:
  /// Builds the graph of `context`. Fails with a diagnostic on `context` when a
  /// dependency is unknown or points forward (a cycle); the verifier rejects
  /// both, this keeps passes safe on IR built without verification.
  static FailureOr<DependencyGraph> build(ContextOp context);

  /// Builds a graph directly (for tests and run-time callers).
  explicit DependencyGraph(llvm::SmallVector<SegmentInfo> segments)
      : segments(std::move(segments)) {}

  unsigned size() const { return segments.size(); }
  const SegmentInfo &segment(unsigned i) const { return segments[i]; }
  std::optional<unsigned> lookup(llvm::StringRef name) const;

  /// Whether segment `from` depends on segment `to`, directly or transitively.
  bool reaches(unsigned from, unsigned to) const;

  /// The dependency slice of an edit of segment `edited`: that segment and
  /// every later segment that reaches it.
  llvm::BitVector slice(unsigned edited) const;

  /// The answer an erratum edit of `edited` recomputes (getErratumAnswer).
  std::optional<unsigned> erratumAnswer(unsigned edited) const;

private:
  llvm::SmallVector<SegmentInfo> segments;
};

/// What a plan does with one segment of the context.
enum class SegmentAction {
  /// Before the edit: kept as it is (causal attention cannot see the edit).
  Keep,
  /// Prefilled again over the new context.
  Recompute,
  /// Reused, relocated by Δ = len(new) - len(old) positions.
  Reuse,
};

llvm::StringRef stringifySegmentAction(SegmentAction action);

/// The plan of one kv.edit.
struct EditPlan {
  unsigned edited = 0;
  StrategyKind strategy = StrategyKind::Exact;
  /// The repair budget of a cot_slice plan, or null.
  RepairAttr repair;
  llvm::SmallVector<SegmentAction> actions;
  /// An erratum plan: the index of the answer (getErratumAnswer), before which
  /// the correction is prefilled. Every segment before it is kept (the edited
  /// one with its old tokens), it and every later one recomputed.
  std::optional<unsigned> correctionBefore;

  /// The plan of an edit of `edited` with `strategy`. An erratum whose
  /// answer is missing (getErratumAnswer fails: callers check it first) keeps
  /// every segment and has no correctionBefore.
  static EditPlan build(const DependencyGraph &graph, unsigned edited,
                        StrategyAttr strategy);

  /// Indices of the segments with `action`, in order.
  llvm::SmallVector<unsigned> segmentsWith(SegmentAction action) const;
};

/// The model FLOPs of docs/design.md (runtime/core/ModelCost.h), built from a
/// !kv.model type.
struct CostModel : kvir::ModelCost {
  static CostModel get(ModelType model);
};

/// Tokens and FLOPs of one way to reach the same final context.
struct Cost {
  int64_t tokens = 0;
  int64_t flops = 0;
  /// True when the figure depends on a run-time choice (fraction or
  /// deviation repair): the FLOPs assume the chosen tokens sit at the mean
  /// position of the candidates.
  bool estimated = false;
  /// Tokens a deviation repair may add at run time (0 to this many, unknown
  /// at compile time), and their FLOPs if all were chosen; not included in
  /// `tokens` and `flops`, which count the deviation scan only.
  int64_t runTimeTokens = 0;
  int64_t runTimeFlops = 0;
};

/// A plan's cost next to the exact strategy and a full prefill of the final
/// context. Logits are counted for the tokens of the context's last segment in
/// all three (the answer), so the three compare like with like.
struct EditCost {
  Cost plan, exact, full;
};

/// Prices `plan` with concrete sizes: `sizes[i]` tokens for segment i before
/// the edit and `newSize` tokens for the edited segment after it. An erratum
/// plan prefills `correctionSize` correction tokens and the answer, over the
/// old context; its exact and full figures are those of the edited context
/// (its reference), like every other plan's.
EditCost computeEditCost(const DependencyGraph &graph, const EditPlan &plan,
                         llvm::ArrayRef<int64_t> sizes, int64_t newSize,
                         const CostModel &model, int64_t correctionSize = 0);

/// The cost of composing a block of `blockSize` tokens after a context of
/// `prefixSize` tokens, with an optional repair budget, next to prefilling
/// the block again over the context (exact and full are the same here).
EditCost computeComposeCost(int64_t prefixSize, int64_t blockSize,
                            RepairAttr repair, const CostModel &model);

/// The number of tokens a view holds when it can be known from the IR alone
/// (built from kv.empty by prefills of static token tensors, composes,
/// concats and shifts), or nothing.
std::optional<int64_t> getStaticLength(Value cache);

/// The effective position of the first token of a view when it can be known
/// from the IR alone (0 for a view built from kv.empty without shifts).
std::optional<int64_t> getStaticStartPosition(Value cache);

/// Describes a plan in one line: what is kept, recomputed and reused.
std::string describeEditPlan(const DependencyGraph &graph,
                             const EditPlan &plan);

/// Describes a cost in one line: tokens and FLOPs of the plan, the exact
/// strategy and a full prefill.
std::string describeCost(const EditCost &cost);

/// Emits the plan of `edit` and, when every size it needs is known (or
/// `dynamicSize` stands in for the unknown ones), its cost, as remarks on the
/// edit. Fails (with a diagnostic) when the edit cannot be planned.
LogicalResult emitEditPlanRemarks(EditOp edit,
                                  std::optional<int64_t> dynamicSize);

/// Emits where `compose` places its block and, when the lengths are known,
/// its cost, as remarks on the compose.
void emitComposePlanRemarks(ComposeOp compose,
                            std::optional<int64_t> dynamicSize);

/// Emits what `load` costs on a hit (a fetch of the blob, no prefill) and on
/// a miss (a prefill of its tokens, then a store), as a remark.
void emitLoadBlockPlanRemarks(LoadBlockOp load,
                              std::optional<int64_t> dynamicSize);

/// The context that the cache type of `edit` names, with its graph and the
/// index of the edited segment; a diagnostic on `edit` when it cannot be
/// planned (no context, unknown segment, broken graph).
struct EditTarget {
  ContextOp context;
  DependencyGraph graph;
  unsigned edited;
};
FailureOr<EditTarget> getEditTarget(EditOp edit);

} // namespace mlir::kv

#endif // KVIR_PASSES_ANALYSIS_DEPENDENCYSLICE_H
