//===- KVOpFolders.cpp - Folders and canonicalizations of kv ops ----------===//

#include "dialects/KV/KVOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace mlir::kv;

//===----------------------------------------------------------------------===//
// RopeShiftOp
//===----------------------------------------------------------------------===//

OpFoldResult RopeShiftOp::fold(FoldAdaptor adaptor) {
  // A shift by 0 is the identity.
  if (auto delta = dyn_cast_if_present<IntegerAttr>(adaptor.getDelta()))
    if (delta.getValue().isZero())
      return getCache();
  return {};
}

namespace {
/// shift(shift(x, a), b) -> shift(x, a + b): RoPE rotations compose, and one
/// offset per run is all the attention needs.
struct ComposeRopeShifts : public OpRewritePattern<RopeShiftOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RopeShiftOp op,
                                PatternRewriter &rewriter) const override {
    auto inner = op.getCache().getDefiningOp<RopeShiftOp>();
    if (!inner)
      return rewriter.notifyMatchFailure(op, "input is not a rope_shift");
    Value sum = arith::AddIOp::create(rewriter, op.getLoc(), inner.getDelta(),
                                      op.getDelta());
    rewriter.replaceOpWithNewOp<RopeShiftOp>(op, inner.getCache(), sum);
    return success();
  }
};
} // namespace

void RopeShiftOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                              MLIRContext *context) {
  results.add<ComposeRopeShifts>(context);
}

//===----------------------------------------------------------------------===//
// ConcatOp
//===----------------------------------------------------------------------===//

OpFoldResult ConcatOp::fold(FoldAdaptor) {
  // The concatenation of one view is that view.
  if (getInputs().size() == 1 && getInputs().front().getType() == getType())
    return getInputs().front();
  return {};
}

namespace {
/// Whether `value` is a kv.empty: a view without runs.
bool isEmptyView(Value value) { return value.getDefiningOp<EmptyOp>(); }

/// concat(..., empty, ...) -> concat(...): an empty view adds no run.
struct DropEmptyConcatInputs : public OpRewritePattern<ConcatOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ConcatOp op,
                                PatternRewriter &rewriter) const override {
    SmallVector<Value> kept;
    for (Value input : op.getInputs())
      if (!isEmptyView(input))
        kept.push_back(input);
    if (kept.size() == op.getInputs().size())
      return rewriter.notifyMatchFailure(op, "no empty input");
    if (kept.empty())
      kept.push_back(op.getInputs().front());
    rewriter.modifyOpInPlace(op, [&] { op.getInputsMutable().assign(kept); });
    return success();
  }
};

/// compose(c, empty) -> c: composing nothing changes nothing.
struct ComposeOfNothing : public OpRewritePattern<ComposeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ComposeOp op,
                                PatternRewriter &rewriter) const override {
    if (!isEmptyView(op.getBlock()))
      return rewriter.notifyMatchFailure(op, "block is not empty");
    rewriter.replaceOp(op, op.getCache());
    return success();
  }
};

/// A prefill of no tokens whose logits nobody reads is its view: an empty
/// segment computes nothing.
struct PrefillOfNothing : public OpRewritePattern<PrefillOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(PrefillOp op,
                                PatternRewriter &rewriter) const override {
    RankedTensorType tokens = op.getTokens().getType();
    if (tokens.isDynamicDim(0) || tokens.getDimSize(0) != 0)
      return rewriter.notifyMatchFailure(op, "tokens are not statically empty");
    if (!op.getLogits().use_empty())
      return rewriter.notifyMatchFailure(op, "logits are used");
    if (op.getViews().size() != 1 || !op.getOffsets().empty() ||
        op.getViews().front().getType() != op.getResult().getType())
      return rewriter.notifyMatchFailure(op, "view is not a single plain view");
    rewriter.replaceAllUsesWith(op.getResult(), op.getViews().front());
    rewriter.eraseOp(op);
    return success();
  }
};

/// edit(c[@s] = tokens of c[@s]) -> c: an edit that changes nothing. Not an
/// erratum, which the program asked to append its correction regardless.
struct EditToSameTokens : public OpRewritePattern<EditOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(EditOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getCorrection())
      return rewriter.notifyMatchFailure(op, "an erratum appends a correction");
    auto tokens = op.getTokens().getDefiningOp<TokensOp>();
    auto slice = tokens ? tokens.getCache().getDefiningOp<SliceOp>() : nullptr;
    auto bounds =
        slice ? slice.getBegin().getDefiningOp<SegmentBoundsOp>() : nullptr;
    if (!bounds || slice.getCache() != op.getCache() ||
        bounds.getCache() != op.getCache() ||
        bounds.getSegmentAttr() != op.getSegmentAttr() ||
        slice.getBegin() != bounds.getBegin() ||
        slice.getEnd() != bounds.getEnd())
      return rewriter.notifyMatchFailure(
          op, "tokens are not the segment's own tokens");
    rewriter.replaceOp(op, op.getCache());
    return success();
  }
};
} // namespace

void ConcatOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                           MLIRContext *context) {
  results.add<DropEmptyConcatInputs>(context);
}

void ComposeOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                            MLIRContext *context) {
  results.add<ComposeOfNothing>(context);
}

void PrefillOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                            MLIRContext *context) {
  results.add<PrefillOfNothing>(context);
}

void EditOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                         MLIRContext *context) {
  results.add<EditToSameTokens>(context);
}
