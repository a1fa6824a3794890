//===- DeriveCotSlices.cpp - Plan edits and composes into primitives ------===//
//
// Rewrites kv.edit, kv.compose and kv.logits into prefill, slice, rope_shift
// and concat ops, following the dependency slice of each edit.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/KV/KVOps.h"
#include "passes/Analysis/DependencySlice.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

namespace mlir::kv {
#define GEN_PASS_DEF_KVDERIVECOTSLICESPASS
#include "passes/Passes.h.inc"
} // namespace mlir::kv

using namespace mlir;
using namespace mlir::kv;

namespace {

/// Builds the primitive ops of one plan at one insertion point.
class PlanBuilder {
public:
  PlanBuilder(OpBuilder &builder, Location loc, Value model)
      : b(builder), loc(loc), model(model),
        vocab(cast<ModelType>(model.getType()).getVocab()) {}

  Value index(int64_t value) {
    return arith::ConstantIndexOp::create(b, loc, value);
  }
  Value add(Value lhs, Value rhs) {
    return arith::AddIOp::create(b, loc, lhs, rhs);
  }
  Value sub(Value lhs, Value rhs) {
    return arith::SubIOp::create(b, loc, lhs, rhs);
  }
  Value min(Value lhs, Value rhs) {
    return arith::MinSIOp::create(b, loc, lhs, rhs);
  }

  std::pair<Value, Value> bounds(Value cache, StringRef segment) {
    auto op = SegmentBoundsOp::create(
        b, loc, cache, FlatSymbolRefAttr::get(b.getContext(), segment));
    return {op.getBegin(), op.getEnd()};
  }
  Value slice(Value cache, Value begin, Value end) {
    return SliceOp::create(b, loc, cache, begin, end);
  }
  Value tokens(Value cache) {
    auto type = RankedTensorType::get({ShapedType::kDynamic}, b.getI32Type());
    return TokensOp::create(b, loc, type, cache);
  }
  Value length(Value cache) { return LengthOp::create(b, loc, cache); }
  Value shift(Value cache, Value delta) {
    return RopeShiftOp::create(b, loc, cache, delta);
  }
  Value concat(Value lhs, Value rhs) {
    return ConcatOp::create(b, loc, lhs.getType(), ValueRange{lhs, rhs});
  }

  /// Prefills `tokens` over `view` (at `position`, when given); returns the new
  /// cache and the logits (of every token with `allLogits`, else the last).
  std::pair<Value, Value> prefill(Value view, Value tokens, StringRef segment,
                                  bool allLogits, Value position = {}) {
    int64_t rows = allLogits ? ShapedType::kDynamic : 1;
    auto logitsType = RankedTensorType::get({rows, vocab}, b.getF32Type());
    FlatSymbolRefAttr label =
        segment.empty() ? nullptr
                        : FlatSymbolRefAttr::get(b.getContext(), segment);
    auto op = PrefillOp::create(b, loc, view.getType(), logitsType, model,
                                ValueRange{view}, ValueRange{}, tokens,
                                position, label, !allLogits);
    return {op.getResult(), op.getLogits()};
  }

  /// Appends the reused range [begin, end) of `source`, shifted by `delta`,
  /// to `view`, spending `repair` on it. Returns the new view.
  Value reuse(Value view, Value source, Value begin, Value end, Value delta,
              RepairAttr repair, StringRef segment) {
    if (repair && repair.getKind() == RepairKind::FirstK &&
        repair.getFirstK() > 0) {
      // Prefill the first k tokens again over the new prefix; reuse the rest.
      Value mid = add(begin, min(index(repair.getFirstK()), sub(end, begin)));
      view = prefill(view, tokens(slice(source, begin, mid)), segment,
                     /*allLogits=*/false)
                 .first;
      begin = mid;
    }
    Value start = length(view);
    view = concat(view, shift(slice(source, begin, end), delta));
    return selectiveRecompute(view, start, repair);
  }

  /// Spends a `fraction` or `deviation` budget on the tokens from `start` to
  /// the end of `view` (a kv.selective_recompute); other budgets return
  /// `view`.
  Value selectiveRecompute(Value view, Value start, RepairAttr repair) {
    if (!repair || !repair.isSelective())
      return view;
    FloatAttr fraction, deviation;
    if (repair.getKind() == RepairKind::Fraction)
      fraction = b.getF64FloatAttr(repair.getFractionValue());
    else
      deviation = b.getF64FloatAttr(repair.getDeviationValue());
    return SelectiveRecomputeOp::create(b, loc, model, view, start,
                                        length(view), fraction, deviation);
  }

private:
  OpBuilder &b;
  Location loc;
  Value model;
  int64_t vocab;
};

/// The prefills of one edit plan whose logits cover a whole segment, so a
/// kv.logits of that segment of the plan's result can use them.
using RecomputedLogits = llvm::StringMap<Value>;

struct KVDeriveCotSlicesPass
    : public kv::impl::KVDeriveCotSlicesPassBase<KVDeriveCotSlicesPass> {
  using Base::Base;

  void runOnOperation() override;

private:
  /// What the pass did (see the fuse pass on why it counts by itself).
  struct {
    uint64_t edits = 0, composes = 0, segmentsRecomputed = 0,
             segmentsReused = 0, logitsReused = 0, corrections = 0,
             blockLoads = 0;
  } counts;
  /// Results of erratum plans: their correction belongs to no declared
  /// segment, so an edit of one cannot be planned (it would drop it).
  DenseSet<Value> erratumResults;

  LogicalResult deriveEdit(EditOp edit,
                           DenseMap<Value, RecomputedLogits> &logitsOf);
  void deriveCompose(ComposeOp compose);
  void deriveLogits(LogitsOp logits,
                    const DenseMap<Value, RecomputedLogits> &logitsOf);
};

} // namespace

LogicalResult
KVDeriveCotSlicesPass::deriveEdit(EditOp edit,
                                  DenseMap<Value, RecomputedLogits> &logitsOf) {
  FailureOr<EditTarget> target = getEditTarget(edit);
  if (failed(target))
    return failure();
  if (emitPlan && failed(emitEditPlanRemarks(edit, std::nullopt)))
    return failure();
  if (erratumResults.contains(edit.getCache()))
    return edit.emitOpError()
           << "cannot plan an edit of the result of an erratum edit: its "
              "correction belongs to no segment of the context, and the plan "
              "would drop it";
  const DependencyGraph &graph = target->graph;
  EditPlan plan = EditPlan::build(graph, target->edited, edit.getStrategy());

  // Segments whose logits a kv.logits of the result asks for: their prefill
  // computes every row, so the kv.logits can use it.
  llvm::StringSet<> wanted;
  for (Operation *user : edit.getResult().getUsers())
    if (auto logits = dyn_cast<LogitsOp>(user))
      wanted.insert(logits.getSegment());

  OpBuilder builder(edit);
  PlanBuilder pb(builder, edit.getLoc(), edit.getModel());
  Value source = edit.getCache();
  StringRef editedName = graph.segment(plan.edited).name;

  RecomputedLogits recomputed;
  auto recompute = [&](Value view, Value tokens, StringRef name) {
    bool all = wanted.contains(name);
    auto [next, logits] = pb.prefill(view, tokens, name, all);
    if (all)
      recomputed[name] = logits;
    ++counts.segmentsRecomputed;
    return next;
  };

  // The view up to the first later segment the loop below handles, and the
  // end of the source's tokens it covers.
  Value view, end, delta;
  unsigned first;
  if (plan.correctionBefore) {
    // Erratum: the old cache up to the answer as it is, then the correction;
    // the answer and what follows it are prefilled again below.
    first = *plan.correctionBefore;
    end = pb.bounds(source, graph.segment(first).name).first;
    view = pb.slice(source, pb.index(0), end);
    view = pb.prefill(view, edit.getCorrection(), correctionLabel(editedName),
                      /*allLogits=*/false)
               .first;
    ++counts.corrections;
  } else {
    first = plan.edited + 1;
    auto [editedBegin, editedEnd] = pb.bounds(source, editedName);
    view = pb.slice(source, pb.index(0), editedBegin);
    view = recompute(view, edit.getTokens(), editedName);
    if (!plan.segmentsWith(SegmentAction::Reuse).empty()) {
      Value newLength =
          tensor::DimOp::create(builder, edit.getLoc(), edit.getTokens(), 0);
      delta = pb.sub(newLength, pb.sub(editedEnd, editedBegin));
    }
    end = editedEnd;
  }

  for (unsigned i = first; i < graph.size(); ++i) {
    StringRef name = graph.segment(i).name;
    auto [begin, segmentEnd] = pb.bounds(source, name);
    if (plan.actions[i] == SegmentAction::Recompute) {
      view =
          recompute(view, pb.tokens(pb.slice(source, begin, segmentEnd)), name);
    } else {
      view =
          pb.reuse(view, source, begin, segmentEnd, delta, plan.repair, name);
      ++counts.segmentsReused;
    }
    end = segmentEnd;
  }
  // Tokens after the last declared segment (a generated continuation, say)
  // may depend on anything: prefill them again.
  Value rest = pb.slice(source, end, pb.length(source));
  view = pb.prefill(view, pb.tokens(rest), "", /*allLogits=*/true).first;

  logitsOf[view] = std::move(recomputed);
  if (plan.correctionBefore)
    erratumResults.insert(view);
  edit.replaceAllUsesWith(view);
  edit.erase();
  ++counts.edits;
  return success();
}

void KVDeriveCotSlicesPass::deriveCompose(ComposeOp compose) {
  if (emitPlan)
    emitComposePlanRemarks(compose, std::nullopt);
  OpBuilder builder(compose);
  Location loc = compose.getLoc();
  Value cache = compose.getCache(), block = compose.getBlock();
  Value position = compose.getPosition();
  if (!position)
    position = EndPositionOp::create(builder, loc, cache);
  Value delta = arith::SubIOp::create(
      builder, loc, position, StartPositionOp::create(builder, loc, block));

  Value result;
  if (RepairAttr repair = compose.getRepairAttr()) {
    PlanBuilder pb(builder, loc, compose.getModel());
    Value view = cache;
    Value begin = pb.index(0);
    if (repair.getKind() == RepairKind::FirstK && repair.getFirstK() > 0) {
      // The block's first tokens are prefilled again at their new positions.
      Value mid = pb.min(pb.index(repair.getFirstK()), pb.length(block));
      view = pb.prefill(view, pb.tokens(pb.slice(block, begin, mid)), "",
                        /*allLogits=*/false, position)
                 .first;
      begin = mid;
    }
    Value start = pb.length(view);
    view = pb.concat(view,
                     pb.shift(pb.slice(block, begin, pb.length(block)), delta));
    result = pb.selectiveRecompute(view, start, repair);
  } else {
    Value shifted = RopeShiftOp::create(builder, loc, block, delta);
    result = ConcatOp::create(builder, loc, cache.getType(),
                              ValueRange{cache, shifted});
  }
  compose.replaceAllUsesWith(result);
  compose.erase();
  ++counts.composes;
}

void KVDeriveCotSlicesPass::deriveLogits(
    LogitsOp logits, const DenseMap<Value, RecomputedLogits> &logitsOf) {
  OpBuilder builder(logits);
  Location loc = logits.getLoc();
  Value result;
  auto plan = logitsOf.find(logits.getCache());
  if (plan != logitsOf.end())
    if (Value reused = plan->second.lookup(logits.getSegment())) {
      result = reused;
      ++counts.logitsReused;
    }
  if (!result) {
    // Prefill the segment's tokens again over the view before it, at the
    // segment's own positions.
    PlanBuilder pb(builder, loc, logits.getModel());
    Value cache = logits.getCache();
    auto [begin, end] = pb.bounds(cache, logits.getSegment());
    Value segment = pb.slice(cache, begin, end);
    Value position = StartPositionOp::create(builder, loc, segment);
    result = pb.prefill(pb.slice(cache, pb.index(0), begin), pb.tokens(segment),
                        "", /*allLogits=*/true, position)
                 .second;
  }
  if (result.getType() != logits.getType())
    result = tensor::CastOp::create(builder, loc, logits.getType(), result);
  logits.replaceAllUsesWith(result);
  logits.erase();
}

void KVDeriveCotSlicesPass::runOnOperation() {
  counts = {};
  erratumResults.clear();
  SmallVector<Operation *> work;
  getOperation().walk([&](Operation *op) {
    if (isa<EditOp, ComposeOp>(op))
      work.push_back(op);
  });
  // A kv.load_block stays: whether it prefills is known at run time only
  // (a hit fetches the block, a miss prefills and stores it). A compose of
  // its result is planned like any other.
  getOperation().walk([&](LoadBlockOp op) {
    ++counts.blockLoads;
    if (emitPlan)
      emitLoadBlockPlanRemarks(op, std::nullopt);
  });
  DenseMap<Value, RecomputedLogits> logitsOf;
  for (Operation *op : work) {
    if (auto edit = dyn_cast<EditOp>(op)) {
      if (failed(deriveEdit(edit, logitsOf)))
        return signalPassFailure();
    } else {
      deriveCompose(cast<ComposeOp>(op));
    }
  }
  SmallVector<LogitsOp> logitsOps;
  getOperation().walk([&](LogitsOp op) { logitsOps.push_back(op); });
  for (LogitsOp op : logitsOps)
    deriveLogits(op, logitsOf);

  numEdits = counts.edits;
  numComposes = counts.composes;
  numSegmentsRecomputed = counts.segmentsRecomputed;
  numSegmentsReused = counts.segmentsReused;
  numLogitsReused = counts.logitsReused;
  numCorrections = counts.corrections;
  numBlockLoads = counts.blockLoads;
  // A report, not a problem: no module dump attached (emitRemark on the
  // module would print it whole under -mlir-print-op-on-diagnostic).
  if (emitStatistics)
    emitRemark(getOperation().getLoc())
        << "kv-derive-cot-slices: " << counts.edits << " edits, "
        << counts.composes << " composes, " << counts.segmentsRecomputed
        << " segments recomputed, " << counts.segmentsReused
        << " segments reused, " << counts.logitsReused << " logits reused, "
        << counts.corrections << " corrections, " << counts.blockLoads
        << " block loads";
}
