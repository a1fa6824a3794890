//===- KVOpFolders.cpp - Folders and canonicalizations of kv ops -*- C++ -*-===//

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
