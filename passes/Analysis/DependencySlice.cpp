//===- DependencySlice.cpp - Dependency slices of a context -----*- C++ -*-===//

#include "passes/Analysis/DependencySlice.h"

#include "dialects/KV/KVAsmUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace mlir::kv;

//===----------------------------------------------------------------------===//
// DependencyGraph
//===----------------------------------------------------------------------===//

FailureOr<DependencyGraph> DependencyGraph::build(ContextOp context) {
  llvm::SmallVector<SegmentInfo> segments;
  llvm::StringMap<unsigned> index;
  for (SegmentOp op : context.getSegments()) {
    SegmentInfo info;
    info.name = op.getSymName().str();
    info.kind = op.getKind();
    info.size = op.getTokens();
    for (auto ref : op.getDeps().getAsRange<FlatSymbolRefAttr>()) {
      auto it = index.find(ref.getValue());
      if (it == index.end())
        return op.emitOpError()
               << "cannot plan: dependency " << ref << " of segment @"
               << info.name
               << " is not an earlier segment (dangling or cyclic)";
      info.deps.push_back(it->second);
    }
    index[info.name] = segments.size();
    segments.push_back(std::move(info));
  }
  return DependencyGraph(std::move(segments));
}

std::optional<unsigned> DependencyGraph::lookup(StringRef name) const {
  for (auto [i, segment] : llvm::enumerate(segments))
    if (segment.name == name)
      return i;
  return std::nullopt;
}

bool DependencyGraph::reaches(unsigned from, unsigned to) const {
  // Dependencies point backwards, so one sweep from `to` upwards suffices.
  if (from < to)
    return false;
  llvm::BitVector reaching(size());
  reaching.set(to);
  for (unsigned i = to + 1; i <= from; ++i)
    for (unsigned dep : segments[i].deps)
      if (reaching.test(dep)) {
        reaching.set(i);
        break;
      }
  return reaching.test(from);
}

llvm::BitVector DependencyGraph::slice(unsigned edited) const {
  llvm::BitVector inSlice(size());
  inSlice.set(edited);
  for (unsigned i = edited + 1; i < size(); ++i)
    for (unsigned dep : segments[i].deps)
      if (inSlice.test(dep)) {
        inSlice.set(i);
        break;
      }
  return inSlice;
}

std::optional<unsigned> DependencyGraph::erratumAnswer(unsigned edited) const {
  SmallVector<SegmentKind> kinds;
  for (const SegmentInfo &segment : segments)
    kinds.push_back(segment.kind);
  return getErratumAnswer(kinds, edited);
}

//===----------------------------------------------------------------------===//
// EditPlan
//===----------------------------------------------------------------------===//

StringRef mlir::kv::stringifySegmentAction(SegmentAction action) {
  switch (action) {
  case SegmentAction::Keep:
    return "keep";
  case SegmentAction::Recompute:
    return "recompute";
  case SegmentAction::Reuse:
    return "reuse";
  }
  llvm_unreachable("unknown segment action");
}

EditPlan EditPlan::build(const DependencyGraph &graph, unsigned edited,
                         StrategyAttr strategy) {
  EditPlan plan;
  plan.edited = edited;
  plan.strategy = strategy.getKind();
  plan.repair = strategy.getRepair();
  if (plan.strategy == StrategyKind::Erratum) {
    plan.correctionBefore = graph.erratumAnswer(edited);
    unsigned answer = plan.correctionBefore.value_or(graph.size());
    for (unsigned i = 0; i < graph.size(); ++i)
      plan.actions.push_back(i < answer ? SegmentAction::Keep
                                        : SegmentAction::Recompute);
    return plan;
  }
  llvm::BitVector inSlice = graph.slice(edited);
  for (unsigned i = 0; i < graph.size(); ++i) {
    if (i < edited)
      plan.actions.push_back(SegmentAction::Keep);
    else if (plan.strategy == StrategyKind::Exact || inSlice.test(i))
      plan.actions.push_back(SegmentAction::Recompute);
    else
      plan.actions.push_back(SegmentAction::Reuse);
  }
  return plan;
}

SmallVector<unsigned> EditPlan::segmentsWith(SegmentAction action) const {
  SmallVector<unsigned> result;
  for (auto [i, a] : llvm::enumerate(actions))
    if (a == action)
      result.push_back(i);
  return result;
}

//===----------------------------------------------------------------------===//
// Costs
//===----------------------------------------------------------------------===//

CostModel CostModel::get(ModelType model) {
  CostModel cost;
  cost.dim = model.getDim();
  cost.hidden = model.getHidden();
  cost.layers = model.getLayers();
  cost.kvDim = model.getKVDim();
  cost.vocab = model.getVocab();
  return cost;
}

/// Adds the cost of recomputing the tokens [begin, end) of the final context.
static void addRange(Cost &cost, const CostModel &model, int64_t begin,
                     int64_t end) {
  if (end <= begin)
    return;
  cost.tokens += end - begin;
  cost.flops += model.rangeFlops(begin, end);
}

/// Adds the cost of a repair budget spent on a reused range [begin, end) of
/// the final context.
static void addRepair(Cost &cost, const CostModel &model, RepairAttr repair,
                      int64_t begin, int64_t end) {
  if (!repair || end <= begin)
    return;
  int64_t n = end - begin;
  if (repair.getKind() == RepairKind::FirstK) {
    addRange(cost, model, begin, begin + std::min(n, repair.getFirstK()));
    return;
  }
  // Fraction and deviation: layers 0 and 1 of every candidate are recomputed
  // to find the deviating tokens; the chosen ones are recomputed fully. Which
  // ones is a run-time choice: price them at the candidates' mean position.
  cost.flops += model.scanRangeFlops(begin, end);
  int64_t meanKeys = (begin + 1 + end) / 2;
  cost.estimated = true;
  if (repair.getKind() == RepairKind::Deviation) {
    // How many exceed the threshold is unknown until run time: 0 to n.
    cost.runTimeTokens += n;
    cost.runTimeFlops += n * model.tokenFlops(meanKeys);
    return;
  }
  auto chosen = static_cast<int64_t>(
      std::ceil(repair.getFractionValue() * static_cast<double>(n)));
  cost.tokens += chosen;
  cost.flops += chosen * model.tokenFlops(meanKeys);
}

EditCost mlir::kv::computeEditCost(const DependencyGraph &graph,
                                   const EditPlan &plan,
                                   ArrayRef<int64_t> sizes, int64_t newSize,
                                   const CostModel &model,
                                   int64_t correctionSize) {
  EditCost result;
  if (plan.correctionBefore) {
    // Erratum: the old context up to the answer is kept; the correction and
    // everything from the answer on are prefilled after it.
    int64_t position = 0;
    for (unsigned i = 0; i < graph.size(); ++i) {
      if (i == *plan.correctionBefore) {
        addRange(result.plan, model, position, position + correctionSize);
        position += correctionSize;
      }
      if (plan.actions[i] == SegmentAction::Recompute)
        addRange(result.plan, model, position, position + sizes[i]);
      position += sizes[i];
    }
  }
  // Walk the final context, segment by segment (for an erratum: the edited
  // context, its reference).
  int64_t position = 0, editedBegin = 0;
  for (unsigned i = 0; i < graph.size(); ++i) {
    int64_t size = i == plan.edited ? newSize : sizes[i];
    int64_t begin = position, end = position + size;
    if (i == plan.edited)
      editedBegin = begin;
    position = end;
    if (plan.correctionBefore)
      continue;
    switch (plan.actions[i]) {
    case SegmentAction::Keep:
      break;
    case SegmentAction::Recompute:
      addRange(result.plan, model, begin, end);
      break;
    case SegmentAction::Reuse:
      addRepair(result.plan, model, plan.repair, begin, end);
      break;
    }
  }
  addRange(result.exact, model, editedBegin, position);
  addRange(result.full, model, 0, position);
  // Answer logits: the rows of the last segment, in all three.
  int64_t answerRows =
      graph.size() == 0
          ? 0
          : (graph.size() - 1 == plan.edited ? newSize : sizes.back());
  for (Cost *cost : {&result.plan, &result.exact, &result.full})
    cost->flops += model.logitsFlops(answerRows);
  return result;
}

EditCost mlir::kv::computeComposeCost(int64_t prefixSize, int64_t blockSize,
                                      RepairAttr repair,
                                      const CostModel &model) {
  EditCost result;
  addRepair(result.plan, model, repair, prefixSize, prefixSize + blockSize);
  addRange(result.exact, model, prefixSize, prefixSize + blockSize);
  addRange(result.full, model, 0, prefixSize + blockSize);
  return result;
}

//===----------------------------------------------------------------------===//
// Static lengths and positions
//===----------------------------------------------------------------------===//

static std::optional<int64_t> getConstantIndex(Value value) {
  APInt constant;
  if (value && matchPattern(value, m_ConstantInt(&constant)))
    return constant.getSExtValue();
  return std::nullopt;
}

std::optional<int64_t> mlir::kv::getStaticLength(Value cache) {
  Operation *def = cache.getDefiningOp();
  if (!def)
    return std::nullopt;
  auto sumOf = [](ValueRange views) -> std::optional<int64_t> {
    int64_t total = 0;
    for (Value view : views) {
      std::optional<int64_t> length = getStaticLength(view);
      if (!length)
        return std::nullopt;
      total += *length;
    }
    return total;
  };
  return llvm::TypeSwitch<Operation *, std::optional<int64_t>>(def)
      .Case([](EmptyOp) { return 0; })
      .Case([&](PrefillOp op) -> std::optional<int64_t> {
        auto tokens = op.getTokens().getType();
        std::optional<int64_t> before = sumOf(op.getViews());
        if (!before || tokens.isDynamicDim(0))
          return std::nullopt;
        return *before + tokens.getDimSize(0);
      })
      .Case([&](ComposeOp op) {
        return sumOf({op.getCache(), op.getBlock()});
      })
      .Case([](LoadBlockOp op) -> std::optional<int64_t> {
        auto tokens = op.getTokens().getType();
        if (tokens.isDynamicDim(0))
          return std::nullopt;
        return tokens.getDimSize(0);
      })
      .Case([&](ConcatOp op) { return sumOf(op.getInputs()); })
      .Case([](RopeShiftOp op) { return getStaticLength(op.getCache()); })
      .Case([](MaterializeOp op) { return getStaticLength(op.getCache()); })
      .Case([](SelectiveRecomputeOp op) {
        return getStaticLength(op.getCache());
      })
      .Default([](Operation *) { return std::nullopt; });
}

std::optional<int64_t> mlir::kv::getStaticStartPosition(Value cache) {
  Operation *def = cache.getDefiningOp();
  if (!def)
    return std::nullopt;
  return llvm::TypeSwitch<Operation *, std::optional<int64_t>>(def)
      .Case([](EmptyOp) { return 0; })
      .Case([](PrefillOp op) -> std::optional<int64_t> {
        // A prefill over an empty view starts where it places its tokens.
        if (getStaticLength(op.getViews().front()) == 0 &&
            op.getViews().size() == 1) {
          if (!op.getPosition())
            return 0;
          return getConstantIndex(op.getPosition());
        }
        return getStaticStartPosition(op.getViews().front());
      })
      .Case([](LoadBlockOp op) -> std::optional<int64_t> {
        if (!op.getPosition())
          return 0;
        return getConstantIndex(op.getPosition());
      })
      .Case([](RopeShiftOp op) -> std::optional<int64_t> {
        std::optional<int64_t> start = getStaticStartPosition(op.getCache());
        std::optional<int64_t> delta = getConstantIndex(op.getDelta());
        if (!start || !delta)
          return std::nullopt;
        return *start + *delta;
      })
      .Case([](ComposeOp op) -> std::optional<int64_t> {
        if (getStaticLength(op.getCache()) != 0)
          return getStaticStartPosition(op.getCache());
        // Composed into an empty cache: the block starts where it is placed.
        if (!op.getPosition())
          return 0;
        return getConstantIndex(op.getPosition());
      })
      .Case([](ConcatOp op) {
        return getStaticStartPosition(op.getInputs().front());
      })
      .Default([](Operation *) { return std::nullopt; });
}

//===----------------------------------------------------------------------===//
// Remarks
//===----------------------------------------------------------------------===//

std::string mlir::kv::describeEditPlan(const DependencyGraph &graph,
                                       const EditPlan &plan) {
  std::string text;
  llvm::raw_string_ostream os(text);
  StringRef edited = graph.segment(plan.edited).name;
  os << "edit of @" << edited << " (" << stringifyStrategyKind(plan.strategy);
  if (plan.repair) {
    os << ", " << stringifyRepairKind(plan.repair.getKind()) << " = ";
    switch (plan.repair.getKind()) {
    case RepairKind::FirstK:
      os << plan.repair.getFirstK();
      break;
    case RepairKind::Fraction:
      os << formatShortestFloat(plan.repair.getFractionValue());
      break;
    case RepairKind::Deviation:
      os << formatShortestFloat(plan.repair.getDeviationValue());
      break;
    }
  }
  os << ")";
  for (SegmentAction action :
       {SegmentAction::Keep, SegmentAction::Recompute, SegmentAction::Reuse}) {
    SmallVector<unsigned> segments = plan.segmentsWith(action);
    os << "; " << stringifySegmentAction(action) << ":";
    if (segments.empty())
      os << " none";
    for (auto [i, segment] : llvm::enumerate(segments))
      os << (i ? ", @" : " @") << graph.segment(segment).name;
    if (action == SegmentAction::Keep && plan.correctionBefore)
      os << " (@" << edited << " with its old tokens); correction @"
         << correctionLabel(edited) << " prefilled before @"
         << graph.segment(*plan.correctionBefore).name;
  }
  if (plan.segmentsWith(SegmentAction::Reuse).empty())
    return text;
  os << "; reused segments shift by len(@" << edited << "') - len(@" << edited
     << ")";
  if (plan.repair && plan.repair.getKind() == RepairKind::Deviation)
    os << "; their tokens whose relative layer-1 value deviation exceeds "
       << formatShortestFloat(plan.repair.getDeviationValue())
       << " are recomputed (how many is known at run time only)";
  return text;
}

std::string mlir::kv::describeCost(const EditCost &cost) {
  std::string text;
  llvm::raw_string_ostream os(text);
  auto describe = [&](StringRef name, const Cost &c) {
    os << name << " " << c.tokens << " tokens " << c.flops << " FLOPs";
    if (c.runTimeTokens)
      os << " + 0 to " << c.runTimeTokens << " tokens (up to " << c.runTimeFlops
         << " FLOPs) chosen at run time, unknown at compile "
         << "time";
    if (c.estimated)
      os << " (estimated)";
  };
  os << "cost: ";
  describe("plan", cost.plan);
  os << "; ";
  describe("exact", cost.exact);
  os << "; ";
  describe("full", cost.full);
  return text;
}

FailureOr<EditTarget> mlir::kv::getEditTarget(EditOp edit) {
  FlatSymbolRefAttr contextName = edit.getCache().getType().getContextName();
  if (!contextName)
    return edit.emitOpError("cannot plan: the cache type names no kv.context");
  auto context = SymbolTable::lookupNearestSymbolFrom<ContextOp>(
      edit.getOperation(), contextName.getAttr());
  if (!context)
    return edit.emitOpError()
           << "cannot plan: context " << contextName << " is not defined";
  FailureOr<DependencyGraph> graph = DependencyGraph::build(context);
  if (failed(graph))
    return failure();
  std::optional<unsigned> edited = graph->lookup(edit.getSegment());
  if (!edited)
    return edit.emitOpError() << "cannot plan: context " << contextName
                              << " declares no segment @" << edit.getSegment();
  if (edit.getStrategy().getKind() == StrategyKind::Erratum) {
    if (!edit.getCorrection())
      return edit.emitOpError(
          "cannot plan: an erratum needs its correction tokens");
    if (!graph->erratumAnswer(*edited))
      return edit.emitOpError()
             << "cannot plan: erratum of @" << edit.getSegment()
             << ", the last segment of context " << contextName
             << ", leaves no answer to recompute after the correction";
  }
  return EditTarget{context, std::move(*graph), *edited};
}

LogicalResult
mlir::kv::emitEditPlanRemarks(EditOp edit, std::optional<int64_t> dynamicSize) {
  FailureOr<EditTarget> target = getEditTarget(edit);
  if (failed(target))
    return failure();
  const DependencyGraph &graph = target->graph;
  EditPlan plan = EditPlan::build(graph, target->edited, edit.getStrategy());
  edit.emitRemark() << describeEditPlan(graph, plan);

  SmallVector<int64_t> sizes;
  SmallVector<std::string> unknown;
  for (unsigned i = 0; i < graph.size(); ++i) {
    std::optional<int64_t> size = graph.segment(i).size;
    if (!size)
      size = dynamicSize;
    if (!size)
      unknown.push_back("@" + graph.segment(i).name);
    sizes.push_back(size.value_or(0));
  }
  RankedTensorType tokens = edit.getTokens().getType();
  std::optional<int64_t> newSize =
      tokens.isDynamicDim(0) ? dynamicSize
                             : std::optional<int64_t>(tokens.getDimSize(0));
  if (!newSize)
    unknown.push_back("the new @" + graph.segment(target->edited).name);
  std::optional<int64_t> correctionSize = 0;
  if (TypedValue<RankedTensorType> correction = edit.getCorrection()) {
    RankedTensorType type = correction.getType();
    correctionSize = type.isDynamicDim(0)
                         ? dynamicSize
                         : std::optional<int64_t>(type.getDimSize(0));
    if (!correctionSize)
      unknown.push_back("the correction");
  }
  if (!unknown.empty()) {
    edit.emitRemark() << "cost: depends on the run-time sizes of "
                      << llvm::join(unknown, ", ");
    return success();
  }
  CostModel model = CostModel::get(edit.getModel().getType());
  edit.emitRemark() << describeCost(
      computeEditCost(graph, plan, sizes, *newSize, model, *correctionSize));
  return success();
}

void mlir::kv::emitComposePlanRemarks(ComposeOp compose,
                                      std::optional<int64_t> dynamicSize) {
  std::optional<int64_t> prefix = getStaticLength(compose.getCache());
  std::optional<int64_t> block = getStaticLength(compose.getBlock());
  std::optional<int64_t> start = getStaticStartPosition(compose.getBlock());
  std::optional<int64_t> position =
      compose.getPosition() ? getConstantIndex(compose.getPosition()) : prefix;
  if (!prefix)
    prefix = dynamicSize;
  if (!block)
    block = dynamicSize;
  {
    InFlightDiagnostic remark = compose.emitRemark() << "compose: ";
    if (block)
      remark << "block of " << *block << " tokens";
    else
      remark << "block of run-time length";
    if (position && start)
      remark << " at position " << *position << ", shift "
             << *position - *start;
    else
      remark << " shifted by position - start_position(block) at run time";
  }
  if (!prefix || !block)
    return;
  TypedValue<ModelType> model = compose.getModel();
  if (!model) {
    // No model operand (no repair budget): composing computes nothing; say
    // what prefilling the block again would have computed, in tokens.
    compose.emitRemark() << "cost: plan 0 tokens; exact " << *block
                         << " tokens; full " << *prefix + *block << " tokens";
    return;
  }
  compose.emitRemark() << describeCost(
      computeComposeCost(*prefix, *block, compose.getRepairAttr(),
                         CostModel::get(model.getType())));
}

void mlir::kv::emitLoadBlockPlanRemarks(LoadBlockOp load,
                                        std::optional<int64_t> dynamicSize) {
  std::optional<int64_t> n = getStaticLength(load.getResult());
  if (!n)
    n = dynamicSize;
  std::optional<int64_t> base = getStaticStartPosition(load.getResult());
  InFlightDiagnostic remark = load.emitRemark() << "load_block: block of ";
  if (n)
    remark << *n << " tokens";
  else
    remark << "run-time length";
  if (base)
    remark << " at position " << *base;
  else
    remark << " at a run-time position";
  remark << ", keyed by the model's fingerprint and configuration, the K/V "
            "element type and layout version, the base position and the "
            "token ids; decided at run time: a hit fetches it (no prefill";
  if (n) {
    ModelType model = load.getModel().getType();
    CacheType cache = load.getResult().getType();
    int64_t elementBytes = cache.getElementType().getIntOrFloatBitWidth() / 8;
    // The blob: a 128-byte header, the token ids and the K/V.
    int64_t bytes = 128 + *n * 4 +
                    int64_t(model.getLayers()) * model.getKvHeads() * 2 * *n *
                        model.getHeadSize() * elementBytes;
    CostModel cost = CostModel::get(model);
    remark << ", " << bytes << " bytes moved), a miss prefills " << *n
           << " tokens (" << cost.prefillFlops(0, *n, 1)
           << " FLOPs) and stores them";
  } else {
    remark << "), a miss prefills it and stores it";
  }
}
