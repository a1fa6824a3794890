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
#include "passes/Analysis/SizePolynomial.h"
#include "runtime/core/ModelCost.h"

#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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

/// Tokens and FLOPs of one way to reach the same final context, as numbers
/// (N = int64_t) or as formulas of the run-time sizes (N = SizePolynomial).
template <typename N> struct BasicCost {
  N tokens = 0;
  N flops = 0;
  /// True when the figure depends on a run-time choice (fraction or
  /// deviation repair): the FLOPs assume the chosen tokens sit at the mean
  /// position of the candidates.
  bool estimated = false;
  /// Tokens a deviation repair may add at run time (0 to this many, unknown
  /// at compile time), and their FLOPs if all were chosen; not included in
  /// `tokens` and `flops`, which count the deviation scan only.
  N runTimeTokens = 0;
  N runTimeFlops = 0;
};
using Cost = BasicCost<int64_t>;

/// A plan's cost next to the exact strategy and a full prefill of the final
/// context. Logits are counted for the tokens of the context's last segment in
/// all three (the answer), so the three compare like with like.
template <typename N> struct BasicEditCost { BasicCost<N> plan, exact, full; };
using EditCost = BasicEditCost<int64_t>;
using SymbolicEditCost = BasicEditCost<SizePolynomial>;

/// Prices `plan` with concrete sizes: `sizes[i]` tokens for segment i before
/// the edit and `newSize` tokens for the edited segment after it. An erratum
/// plan prefills `correctionSize` correction tokens and the answer, over the
/// old context; its exact and full figures are those of the edited context
/// (its reference), like every other plan's.
EditCost computeEditCost(const DependencyGraph &graph, const EditPlan &plan,
                         llvm::ArrayRef<int64_t> sizes, int64_t newSize,
                         const CostModel &model, int64_t correctionSize = 0);
/// computeEditCost with sizes that are formulas of the run-time sizes.
SymbolicEditCost computeEditCost(const DependencyGraph &graph,
                                 const EditPlan &plan,
                                 llvm::ArrayRef<SizePolynomial> sizes,
                                 const SizePolynomial &newSize,
                                 const CostModel &model,
                                 const SizePolynomial &correctionSize);

/// The cost of composing a block of `blockSize` tokens after a context of
/// `prefixSize` tokens, with an optional repair budget, next to prefilling
/// the block again over the context (exact and full are the same here).
EditCost computeComposeCost(int64_t prefixSize, int64_t blockSize,
                            RepairAttr repair, const CostModel &model);
SymbolicEditCost computeComposeCost(const SizePolynomial &prefixSize,
                                    const SizePolynomial &blockSize,
                                    RepairAttr repair, const CostModel &model);

/// Lengths and positions of views, and the lengths of token tensors, as
/// formulas of the dynamic token tensors they were built from: function
/// arguments (named by their kv.name, with their kv.sample_length) or the
/// results of ops. Follows views through kv ops and function calls.
class ViewSizes {
public:
  /// A dynamic token tensor a size depends on.
  struct Variable {
    Value tokens;
    /// "len(city)" for an argument with kv.name "city".
    std::string name;
    /// Its kv.sample_length, where it is an argument that has one.
    std::optional<int64_t> sample;
  };

  /// The number of tokens `cache` holds, where the IR tells it.
  std::optional<SizePolynomial> length(Value cache);
  /// The effective position of the first token of `cache` (0 for a view
  /// built from kv.empty without shifts), where the IR tells it.
  std::optional<SizePolynomial> startPosition(Value cache);
  /// The length of a 1-D token tensor: its static size, or a variable.
  SizePolynomial tokenCount(Value tokens);
  /// The length of a token tensor where it is static, else its variable's
  /// sample.
  std::optional<int64_t> sampleLength(Value tokens);
  /// The tokens that filled segment `segment` of `cache` (the prefill or
  /// edit that labelled them), or null.
  Value segmentTokens(Value cache, StringRef segment);
  /// The model of a prefill that built `cache`, or null.
  ModelType modelOf(Value cache);

  llvm::ArrayRef<Variable> variables() const { return vars; }
  /// The name of every variable, in order (for SizePolynomial::str).
  std::vector<std::string> names() const;

private:
  /// Follows `value` from a callee's argument to the caller's operand while
  /// inside a call.
  Value resolve(Value value) const;
  /// Runs `body` with `value` (a result of a call) replaced by what the
  /// callee returns, its arguments bound to the call's operands; null when
  /// the callee is unknown or returns from more than one place.
  template <typename T>
  std::optional<T>
  throughCall(Value value, llvm::function_ref<std::optional<T>(Value)> body);
  /// Calls `visit` on the op that defines `cache`, then on those of the
  /// views it was built from (its cache operands, not through calls), until
  /// it returns something.
  template <typename T>
  std::optional<T>
  findInViews(Value cache,
              llvm::function_ref<std::optional<T>(Operation *, Value)> visit);

  std::vector<Variable> vars;
  /// Callee arguments bound to the outermost values they stand for.
  llvm::DenseMap<Value, Value> bindings;
  unsigned callDepth = 0;
};

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
/// The same with formulas of the sizes named `names`.
std::string describeCost(const SymbolicEditCost &cost,
                         llvm::ArrayRef<std::string> names);

/// Emits the plan of `edit` and its cost as remarks at the edit. Where a size
/// is dynamic, the cost is a formula of the dynamic sizes, and a second
/// remark gives its value at the arguments' kv.sample_length when every one
/// has one; `dynamicSize`, when given, stands in for every dynamic size
/// instead. Fails (with a diagnostic) when the edit cannot be planned.
LogicalResult emitEditPlanRemarks(EditOp edit,
                                  std::optional<int64_t> dynamicSize);

/// Emits where `compose` places its block and its cost (as an edit's, in
/// formulas of dynamic lengths) as remarks at the compose.
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
