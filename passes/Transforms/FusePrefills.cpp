//===- FusePrefills.cpp - Fuse chained prefills into one call ---*- C++ -*-===//
//
// A prefill over nothing but the result of another prefill, whose logits
// nobody reads, is the second half of one longer prefill: fused into a
// kv.prefill_chain, the forward runs once for both token lists, so the layer
// weights and the view's K/V are streamed once instead of once per list
// (at the few dozen rows of a recomputed thought, the matmuls are bound by
// that traffic).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/KV/KVOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"

namespace mlir::kv {
#define GEN_PASS_DEF_KVFUSEPREFILLSPASS
#include "passes/Passes.h.inc"
} // namespace mlir::kv

using namespace mlir;
using namespace mlir::kv;

namespace {

/// What a fusable producer has: a prefill or a chain, placed at the end of
/// its view (no `at` position).
struct Producer {
  Operation *op = nullptr;
  ValueRange views, offsets;
  SmallVector<Value> tokens;
  SmallVector<Attribute> segments;
  bool labelled = false;
};

/// The producer `view` comes from, when `consumer` may be fused with it: it
/// is a prefill or chain of the same block and model, at its default
/// position, labelled like `consumer` (both or neither), counted as the same
/// work (plan or setup), and nothing else reads its result or its logits.
std::optional<Producer> fusableProducer(PrefillOp consumer, Value view) {
  Operation *def = view.getDefiningOp();
  if (!isa_and_nonnull<PrefillOp, PrefillChainOp>(def) ||
      def->getBlock() != consumer->getBlock() || !view.hasOneUse() ||
      !def->getResult(1).use_empty() ||
      def->getOperand(0) != consumer.getModel() ||
      isPlanLocation(def->getLoc()) != isPlanLocation(consumer.getLoc()))
    return std::nullopt;
  Producer producer;
  producer.op = def;
  if (auto prefill = dyn_cast<PrefillOp>(def)) {
    if (prefill.getPosition())
      return std::nullopt;
    producer.views = prefill.getViews();
    producer.offsets = prefill.getOffsets();
    producer.tokens.push_back(prefill.getTokens());
    producer.labelled = static_cast<bool>(prefill.getSegmentAttr());
    if (producer.labelled)
      producer.segments.push_back(prefill.getSegmentAttr());
  } else {
    auto chain = cast<PrefillChainOp>(def);
    producer.views = chain.getViews();
    producer.offsets = chain.getOffsets();
    llvm::append_range(producer.tokens, chain.getTokens());
    producer.labelled = static_cast<bool>(chain.getSegmentsAttr());
    if (producer.labelled)
      llvm::append_range(producer.segments, chain.getSegmentsAttr());
  }
  if (producer.labelled != static_cast<bool>(consumer.getSegmentAttr()))
    return std::nullopt;
  return producer;
}

struct KVFusePrefillsPass
    : public kv::impl::KVFusePrefillsPassBase<KVFusePrefillsPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<PrefillOp> prefills;
    getOperation().walk([&](PrefillOp op) { prefills.push_back(op); });
    // In program order, a producer is already the chain of everything it
    // could be fused with when its consumer is visited: one sweep reaches
    // the fixpoint.
    uint64_t fused = 0;
    for (PrefillOp consumer : prefills) {
      // Only the whole of the producer's result, unshifted, at the end.
      if (consumer.getViews().size() != 1 || consumer.getPosition() ||
          (!consumer.getOffsets().empty() &&
           !matchPattern(consumer.getOffsets().front(), m_Zero())))
        continue;
      std::optional<Producer> producer =
          fusableProducer(consumer, consumer.getViews().front());
      if (!producer)
        continue;
      // At the consumer: its tokens are defined before it, and the
      // producer's operands before the producer, which comes first.
      OpBuilder builder(consumer);
      SmallVector<Value> tokens = producer->tokens;
      tokens.push_back(consumer.getTokens());
      ArrayAttr segments;
      if (producer->labelled) {
        producer->segments.push_back(consumer.getSegmentAttr());
        segments = builder.getArrayAttr(producer->segments);
      }
      auto chain = PrefillChainOp::create(
          builder,
          builder.getFusedLoc({producer->op->getLoc(), consumer.getLoc()}),
          consumer.getResult().getType(), consumer.getLogits().getType(),
          consumer.getModel(), producer->views, producer->offsets, tokens,
          segments, consumer.getLast());
      consumer.replaceAllUsesWith(chain);
      consumer.erase();
      producer->op->erase();
      ++fused;
    }
    numFused = fused;
    // A report, not a problem: no module dump attached.
    if (emitStatistics)
      emitRemark(getOperation().getLoc())
          << "kv-fuse-prefills: " << fused << " prefills fused into a chain";
  }
};

} // namespace
