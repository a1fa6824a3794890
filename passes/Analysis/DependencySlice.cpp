//===- DependencySlice.cpp - Dependency slices of a context -----*- C++ -*-===//

#include "passes/Analysis/DependencySlice.h"

#include "dialects/KV/KVAsmUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/CallInterfaces.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cassert>
#include <cmath>
#include <type_traits>

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

// The arithmetic of a cost over numbers and over formulas of the sizes: where
// a formula has no polynomial result, it says why.
static bool isEmptyRange(int64_t n) { return n <= 0; }
static bool isEmptyRange(const SizePolynomial &n) {
  std::optional<int64_t> constant = n.getConstant();
  return constant && *constant <= 0;
}
static int64_t minWith(int64_t n, int64_t k) { return std::min(n, k); }
static SizePolynomial minWith(const SizePolynomial &n, int64_t k) {
  if (std::optional<int64_t> constant = n.getConstant())
    return std::min(*constant, k);
  return SizePolynomial(k).inexact(
      "a first_k budget over a segment of dynamic length");
}
static int64_t halve(int64_t n) { return n / 2; }
static SizePolynomial halve(const SizePolynomial &n) { return n.halve(); }
static int64_t ceilFraction(double fraction, int64_t n) {
  return static_cast<int64_t>(std::ceil(fraction * static_cast<double>(n)));
}
static SizePolynomial ceilFraction(double fraction, const SizePolynomial &n) {
  if (std::optional<int64_t> constant = n.getConstant())
    return ceilFraction(fraction, *constant);
  return n.inexact("a fraction budget over a segment of dynamic length");
}

/// ModelCost's FLOPs over numbers or formulas (the same formula; checked
/// against ModelCost's in the numeric case).
/// FLOPs of layers [0, layers) for the tokens [begin, end) of a contiguous
/// context, each attending every earlier token and itself.
template <typename N>
static N rangeFlops(const CostModel &model, const N &begin, const N &end,
                    int64_t layers) {
  int64_t perLayer = model.layers ? model.tokenFlops(0) / model.layers : 0;
  N n = end - begin;
  // 4·dim FLOPs per key and layer; the keys sum to (begin + 1 + end)·n / 2.
  N flops = n * (layers * perLayer) +
            (begin + 1 + end) * n * (2 * layers * model.dim);
  if constexpr (std::is_same_v<N, int64_t>)
    assert(layers != model.layers || flops == model.rangeFlops(begin, end));
  return flops;
}
/// FLOPs of one token that attends `ctx` keys, without logits.
template <typename N>
static N tokenFlops(const CostModel &model, const N &ctx) {
  return ctx * (4 * model.layers * model.dim) + model.tokenFlops(0);
}

/// Adds the cost of recomputing the tokens [begin, end) of the final context.
template <typename N>
static void addRange(BasicCost<N> &cost, const CostModel &model, const N &begin,
                     const N &end) {
  if (isEmptyRange(end - begin))
    return;
  cost.tokens += end - begin;
  cost.flops += rangeFlops(model, begin, end, model.layers);
}

/// Adds the cost of a repair budget spent on a reused range [begin, end) of
/// the final context.
template <typename N>
static void addRepair(BasicCost<N> &cost, const CostModel &model,
                      RepairAttr repair, const N &begin, const N &end) {
  if (!repair || isEmptyRange(end - begin))
    return;
  N n = end - begin;
  if (repair.getKind() == RepairKind::FirstK) {
    addRange(cost, model, begin, begin + minWith(n, repair.getFirstK()));
    return;
  }
  // Fraction and deviation: layers 0 and 1 of every candidate are recomputed
  // to find the deviating tokens (ModelCost::scanRangeFlops); the chosen ones
  // are recomputed fully. Which ones is a run-time choice: price them at the
  // candidates' mean position.
  cost.flops +=
      rangeFlops(model, begin, end, std::min<int64_t>(model.layers, 2));
  N meanKeys = halve(begin + 1 + end);
  cost.estimated = true;
  if (repair.getKind() == RepairKind::Deviation) {
    // How many exceed the threshold is unknown until run time: 0 to n.
    cost.runTimeTokens += n;
    cost.runTimeFlops += n * tokenFlops(model, meanKeys);
    return;
  }
  N chosen = ceilFraction(repair.getFractionValue(), n);
  cost.tokens += chosen;
  cost.flops += chosen * tokenFlops(model, meanKeys);
}

template <typename N>
static BasicEditCost<N>
editCost(const DependencyGraph &graph, const EditPlan &plan, ArrayRef<N> sizes,
         const N &newSize, const CostModel &model, const N &correctionSize) {
  BasicEditCost<N> result;
  if (plan.correctionBefore) {
    // Erratum: the old context up to the answer is kept; the correction and
    // everything from the answer on are prefilled after it.
    N position = 0;
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
  N position = 0, editedBegin = 0;
  for (unsigned i = 0; i < graph.size(); ++i) {
    N size = i == plan.edited ? newSize : sizes[i];
    N begin = position, end = position + size;
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
  addRange(result.full, model, N(0), position);
  // Answer logits: the rows of the last segment, in all three.
  N answerRows = graph.size() == 0                 ? N(0)
                 : graph.size() - 1 == plan.edited ? newSize
                                                   : sizes.back();
  for (BasicCost<N> *cost : {&result.plan, &result.exact, &result.full})
    cost->flops += answerRows * model.logitsFlops(1);
  return result;
}

EditCost mlir::kv::computeEditCost(const DependencyGraph &graph,
                                   const EditPlan &plan,
                                   ArrayRef<int64_t> sizes, int64_t newSize,
                                   const CostModel &model,
                                   int64_t correctionSize) {
  return editCost(graph, plan, sizes, newSize, model, correctionSize);
}

SymbolicEditCost
mlir::kv::computeEditCost(const DependencyGraph &graph, const EditPlan &plan,
                          ArrayRef<SizePolynomial> sizes,
                          const SizePolynomial &newSize, const CostModel &model,
                          const SizePolynomial &correctionSize) {
  return editCost(graph, plan, sizes, newSize, model, correctionSize);
}

template <typename N>
static BasicEditCost<N> composeCost(const N &prefixSize, const N &blockSize,
                                    RepairAttr repair, const CostModel &model) {
  BasicEditCost<N> result;
  addRepair(result.plan, model, repair, prefixSize, prefixSize + blockSize);
  addRange(result.exact, model, prefixSize, prefixSize + blockSize);
  addRange(result.full, model, N(0), prefixSize + blockSize);
  return result;
}

EditCost mlir::kv::computeComposeCost(int64_t prefixSize, int64_t blockSize,
                                      RepairAttr repair,
                                      const CostModel &model) {
  return composeCost(prefixSize, blockSize, repair, model);
}

SymbolicEditCost mlir::kv::computeComposeCost(const SizePolynomial &prefixSize,
                                              const SizePolynomial &blockSize,
                                              RepairAttr repair,
                                              const CostModel &model) {
  return composeCost(prefixSize, blockSize, repair, model);
}

//===----------------------------------------------------------------------===//
// Lengths and positions of views
//===----------------------------------------------------------------------===//

static std::optional<int64_t> getConstantIndex(Value value) {
  APInt constant;
  if (value && matchPattern(value, m_ConstantInt(&constant)))
    return constant.getSExtValue();
  return std::nullopt;
}

/// The sum of the lengths of `views`, where each is known.
static std::optional<SizePolynomial> sumOf(ViewSizes &sizes, ValueRange views) {
  SizePolynomial total;
  for (Value view : views) {
    std::optional<SizePolynomial> length = sizes.length(view);
    if (!length)
      return std::nullopt;
    total += *length;
  }
  return total;
}

/// A position operand, where it is a constant.
static std::optional<SizePolynomial> positionOf(Value position) {
  if (std::optional<int64_t> constant = getConstantIndex(position))
    return SizePolynomial(*constant);
  return std::nullopt;
}

/// Whether `size` is known to be 0.
static bool isZero(const std::optional<SizePolynomial> &size) {
  return size && size->getConstant() == 0;
}

Value ViewSizes::resolve(Value value) const {
  auto bound = bindings.find(value);
  return bound == bindings.end() ? value : bound->second;
}

template <typename T>
std::optional<T>
ViewSizes::throughCall(Value value,
                       function_ref<std::optional<T>(Value)> body) {
  auto result = dyn_cast<OpResult>(value);
  auto call = result ? dyn_cast<CallOpInterface>(result.getOwner()) : nullptr;
  // Calls nest only so deep here: a recursive program is not followed.
  constexpr unsigned kMaxCallDepth = 16;
  if (!call || callDepth >= kMaxCallDepth)
    return std::nullopt;
  auto callee = dyn_cast_or_null<FunctionOpInterface>(call.resolveCallable());
  if (!callee || callee.isExternal() || !callee.getFunctionBody().hasOneBlock())
    return std::nullopt;
  Block &entry = callee.getFunctionBody().front();
  Operation *terminator = entry.getTerminator();
  if (result.getResultNumber() >= terminator->getNumOperands() ||
      entry.getNumArguments() != call.getArgOperands().size())
    return std::nullopt;
  llvm::DenseMap<Value, Value> inner;
  for (auto [argument, operand] :
       llvm::zip(entry.getArguments(), call.getArgOperands()))
    inner[argument] = resolve(operand);
  std::swap(bindings, inner);
  ++callDepth;
  std::optional<T> out = body(terminator->getOperand(result.getResultNumber()));
  --callDepth;
  std::swap(bindings, inner);
  return out;
}

SizePolynomial ViewSizes::tokenCount(Value tokens) {
  tokens = resolve(tokens);
  auto type = dyn_cast<RankedTensorType>(tokens.getType());
  if (type && type.getRank() == 1 && !type.isDynamicDim(0))
    return type.getDimSize(0);
  for (auto [i, variable] : llvm::enumerate(vars))
    if (variable.tokens == tokens)
      return SizePolynomial::variable(i);
  Variable variable{tokens, "", std::nullopt};
  if (auto argument = dyn_cast<BlockArgument>(tokens)) {
    unsigned index = argument.getArgNumber();
    variable.name = "len(arg" + std::to_string(index) + ")";
    auto function =
        dyn_cast<FunctionOpInterface>(argument.getOwner()->getParentOp());
    if (function && argument.getOwner()->isEntryBlock()) {
      if (auto name = function.getArgAttrOfType<StringAttr>(index, "kv.name"))
        variable.name = ("len(" + name.getValue() + ")").str();
      if (auto sample =
              function.getArgAttrOfType<IntegerAttr>(index, "kv.sample_length");
          sample && sample.getInt() > 0)
        variable.sample = sample.getInt();
    }
  } else {
    std::string where;
    if (auto file = dyn_cast<FileLineColLoc>(tokens.getLoc()))
      where = " at line " + std::to_string(file.getLine());
    variable.name = ("len(" + tokens.getDefiningOp()->getName().getStringRef() +
                     where + ")")
                        .str();
  }
  vars.push_back(std::move(variable));
  return SizePolynomial::variable(vars.size() - 1);
}

std::optional<int64_t> ViewSizes::sampleLength(Value tokens) {
  SizePolynomial count = tokenCount(tokens);
  if (std::optional<int64_t> constant = count.getConstant())
    return constant;
  Value resolved = resolve(tokens);
  for (const Variable &variable : vars)
    if (variable.tokens == resolved)
      return variable.sample;
  return std::nullopt;
}

std::optional<SizePolynomial> ViewSizes::length(Value cache) {
  cache = resolve(cache);
  Operation *def = cache.getDefiningOp();
  if (!def)
    return std::nullopt;
  using Result = std::optional<SizePolynomial>;
  return llvm::TypeSwitch<Operation *, Result>(def)
      .Case([](EmptyOp) { return SizePolynomial(0); })
      .Case([&](PrefillOp op) -> Result {
        Result before = sumOf(*this, op.getViews());
        if (!before)
          return std::nullopt;
        return *before + tokenCount(op.getTokens());
      })
      .Case([&](PrefillChainOp op) -> Result {
        Result total = sumOf(*this, op.getViews());
        for (Value tokens : op.getTokens())
          if (total)
            *total += tokenCount(tokens);
        return total;
      })
      .Case([&](ComposeOp op) {
        return sumOf(*this, {op.getCache(), op.getBlock()});
      })
      .Case([&](LoadBlockOp op) { return tokenCount(op.getTokens()); })
      .Case([&](ConcatOp op) { return sumOf(*this, op.getInputs()); })
      .Case<RopeShiftOp, MaterializeOp, SelectiveRecomputeOp>(
          [&](auto op) { return length(op.getCache()); })
      .Case([&](CallOpInterface) {
        return throughCall<SizePolynomial>(cache,
                                           [&](Value v) { return length(v); });
      })
      .Default([](Operation *) { return std::nullopt; });
}

std::optional<SizePolynomial> ViewSizes::startPosition(Value cache) {
  cache = resolve(cache);
  Operation *def = cache.getDefiningOp();
  if (!def)
    return std::nullopt;
  using Result = std::optional<SizePolynomial>;
  // A block placed on an empty view starts where it is placed.
  auto placed = [](Value position) -> Result {
    return position ? positionOf(position) : SizePolynomial(0);
  };
  return llvm::TypeSwitch<Operation *, Result>(def)
      .Case([](EmptyOp) { return SizePolynomial(0); })
      .Case([&](PrefillOp op) -> Result {
        if (op.getViews().size() == 1 && isZero(length(op.getViews().front())))
          return placed(op.getPosition());
        return startPosition(op.getViews().front());
      })
      .Case([&](PrefillChainOp op) -> Result {
        if (op.getViews().size() == 1 && isZero(length(op.getViews().front())))
          return SizePolynomial(0);
        return startPosition(op.getViews().front());
      })
      .Case([&](LoadBlockOp op) { return placed(op.getPosition()); })
      .Case([&](RopeShiftOp op) -> Result {
        Result start = startPosition(op.getCache());
        Result delta = positionOf(op.getDelta());
        if (!start || !delta)
          return std::nullopt;
        return *start + *delta;
      })
      .Case([&](ComposeOp op) -> Result {
        if (!isZero(length(op.getCache())))
          return startPosition(op.getCache());
        return placed(op.getPosition());
      })
      .Case([&](ConcatOp op) { return startPosition(op.getInputs().front()); })
      .Case([&](CallOpInterface) {
        return throughCall<SizePolynomial>(
            cache, [&](Value v) { return startPosition(v); });
      })
      .Default([](Operation *) { return std::nullopt; });
}

template <typename T>
std::optional<T> ViewSizes::findInViews(
    Value cache, function_ref<std::optional<T>(Operation *, Value)> visit) {
  SmallVector<Value> work = {cache};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value view = resolve(work.pop_back_val());
    Operation *def = view.getDefiningOp();
    if (!def || !seen.insert(view).second)
      continue;
    if (std::optional<T> found = visit(def, view))
      return found;
    for (Value operand : def->getOperands())
      if (isa<CacheType>(operand.getType()))
        work.push_back(operand);
  }
  return std::nullopt;
}

Value ViewSizes::segmentTokens(Value cache, StringRef segment) {
  std::optional<Value> tokens = findInViews<Value>(
      cache, [&](Operation *def, Value) -> std::optional<Value> {
        if (auto prefill = dyn_cast<PrefillOp>(def);
            prefill && prefill.getSegment() == segment)
          return prefill.getTokens();
        if (auto chain = dyn_cast<PrefillChainOp>(def))
          for (auto [i, tokens] : llvm::enumerate(chain.getTokens()))
            if (FlatSymbolRefAttr label = chain.getSegmentOf(i);
                label && label.getValue() == segment)
              return tokens;
        if (auto edit = dyn_cast<EditOp>(def);
            edit && edit.getSegment() == segment)
          return edit.getTokens();
        return std::nullopt;
      });
  return tokens.value_or(nullptr);
}

ModelType ViewSizes::modelOf(Value cache) {
  std::optional<ModelType> model = findInViews<ModelType>(
      cache, [&](Operation *def, Value view) -> std::optional<ModelType> {
        if (isa<PrefillOp, PrefillChainOp>(def))
          return cast<ModelType>(def->getOperand(0).getType());
        if (!isa<CallOpInterface>(def))
          return std::nullopt;
        return throughCall<ModelType>(view,
                                      [&](Value v) -> std::optional<ModelType> {
                                        if (ModelType type = modelOf(v))
                                          return type;
                                        return std::nullopt;
                                      });
      });
  return model.value_or(nullptr);
}

std::vector<std::string> ViewSizes::names() const {
  std::vector<std::string> out;
  for (const Variable &variable : vars)
    out.push_back(variable.name);
  return out;
}

std::optional<int64_t> mlir::kv::getStaticLength(Value cache) {
  ViewSizes sizes;
  std::optional<SizePolynomial> length = sizes.length(cache);
  return length ? length->getConstant() : std::nullopt;
}

std::optional<int64_t> mlir::kv::getStaticStartPosition(Value cache) {
  ViewSizes sizes;
  std::optional<SizePolynomial> start = sizes.startPosition(cache);
  return start ? start->getConstant() : std::nullopt;
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

/// A figure as a number, or as a formula of the sizes `names` (in
/// parentheses, so that "(48 + len(x)) tokens" reads as one figure).
static std::string formatFigure(int64_t n, ArrayRef<std::string>) {
  return std::to_string(n);
}
static std::string formatFigure(const SizePolynomial &p,
                                ArrayRef<std::string> names) {
  if (std::optional<int64_t> constant = p.getConstant())
    return std::to_string(*constant);
  return "(" + p.str(names) + ")";
}
static bool isZeroFigure(int64_t n) { return n == 0; }
static bool isZeroFigure(const SizePolynomial &p) {
  return p.getConstant() == 0;
}
static StringRef inexactReason(int64_t) { return ""; }
static StringRef inexactReason(const SizePolynomial &p) {
  return p.inexactReason();
}

/// "plan 5 tokens 7680 FLOPs; exact ...; full ...", with `names` for the
/// sizes of formulas.
template <typename N>
static std::string describeFigures(const BasicEditCost<N> &cost,
                                   ArrayRef<std::string> names) {
  std::string text;
  llvm::raw_string_ostream os(text);
  auto describe = [&](StringRef name, const BasicCost<N> &c) {
    for (const N *figure :
         {&c.tokens, &c.flops, &c.runTimeTokens, &c.runTimeFlops})
      if (!inexactReason(*figure).empty()) {
        os << name << " not a polynomial of the sizes ("
           << inexactReason(*figure) << ")";
        return;
      }
    os << name << " " << formatFigure(c.tokens, names) << " tokens "
       << formatFigure(c.flops, names) << " FLOPs";
    if (!isZeroFigure(c.runTimeTokens))
      os << " + 0 to " << formatFigure(c.runTimeTokens, names)
         << " tokens (up to " << formatFigure(c.runTimeFlops, names)
         << " FLOPs) chosen at run time, unknown at compile time";
    if (c.estimated)
      os << " (estimated)";
  };
  describe("plan", cost.plan);
  os << "; ";
  describe("exact", cost.exact);
  os << "; ";
  describe("full", cost.full);
  return text;
}

std::string mlir::kv::describeCost(const EditCost &cost) {
  return "cost: " + describeFigures(cost, {});
}

std::string mlir::kv::describeCost(const SymbolicEditCost &cost,
                                   ArrayRef<std::string> names) {
  return "cost: " + describeFigures(cost, names);
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

namespace {
/// The sizes a cost depends on: each a number where the IR or `dynamicSize`
/// gives it, else a variable of its own, with its value at the arguments'
/// kv.sample_length where there is one.
struct CostSizes {
  std::optional<int64_t> dynamicSize;
  std::vector<std::string> names;
  SmallVector<std::optional<int64_t>> samples;

  /// `size` as a number where it is known (or stands for `dynamicSize`),
  /// else a new variable `name` with `sample`.
  SizePolynomial get(const std::optional<SizePolynomial> &size,
                     const std::string &name, std::optional<int64_t> sample) {
    if (size && size->getConstant())
      return *size;
    if (dynamicSize)
      return *dynamicSize;
    names.push_back(name);
    samples.push_back(sample);
    return SizePolynomial::variable(names.size() - 1);
  }

  /// The sizes of `views` become variables of their own, in order.
  void adopt(const ViewSizes &views) {
    for (const ViewSizes::Variable &variable : views.variables()) {
      names.push_back(variable.name);
      samples.push_back(dynamicSize ? dynamicSize : variable.sample);
    }
  }

  /// The value of `size` with every variable at its sample (or at
  /// `dynamicSize`), where each has one.
  std::optional<int64_t> atSamples(const SizePolynomial &size) const {
    SmallVector<int64_t> values;
    for (std::optional<int64_t> sample : samples) {
      if (!sample)
        return std::nullopt;
      values.push_back(*sample);
    }
    return size.evaluate(values);
  }

  /// "len(@city) = 12, len(@city') = 16".
  std::string describeSamples() const {
    std::string text;
    for (auto [name, sample] : llvm::zip(names, samples))
      text += (text.empty() ? "" : ", ") + name + " = " +
              std::to_string(sample.value_or(0));
    return text;
  }
};
} // namespace

/// Emits a cost at `loc`: as numbers where it depends on no dynamic size
/// (`numeric` of no values), else as formulas and, where every size has a
/// sample, `numeric` of the sizes at their samples (exact where a formula
/// has no polynomial form).
static void
emitCostRemarks(Location loc, const SymbolicEditCost &cost,
                const CostSizes &sizes,
                function_ref<std::optional<EditCost>(bool atSamples)> numeric) {
  if (sizes.names.empty() || sizes.dynamicSize) {
    if (std::optional<EditCost> figures = numeric(false))
      emitRemark(loc) << describeCost(*figures);
    return;
  }
  emitRemark(loc) << describeCost(cost, sizes.names);
  if (std::optional<EditCost> figures = numeric(true))
    emitRemark(loc) << "cost at the arguments' kv.sample_length ("
                    << sizes.describeSamples()
                    << "): " << describeFigures(*figures, {});
}

LogicalResult
mlir::kv::emitEditPlanRemarks(EditOp edit, std::optional<int64_t> dynamicSize) {
  FailureOr<EditTarget> target = getEditTarget(edit);
  if (failed(target))
    return failure();
  const DependencyGraph &graph = target->graph;
  EditPlan plan = EditPlan::build(graph, target->edited, edit.getStrategy());
  // Remarks report, they do not point at a problem: no op attached.
  Location loc = edit.getLoc();
  emitRemark(loc) << describeEditPlan(graph, plan);

  // Every dynamic size is a variable of its own: the old length of a
  // dynamic segment, the new tokens', the correction's.
  ViewSizes views;
  CostSizes sizes{dynamicSize, {}, {}};
  auto sampleOf = [&](Value tokens) -> std::optional<int64_t> {
    return tokens ? views.sampleLength(tokens) : std::nullopt;
  };
  auto staticSize = [](Value tokens) -> std::optional<SizePolynomial> {
    auto type = cast<RankedTensorType>(tokens.getType());
    if (type.isDynamicDim(0))
      return std::nullopt;
    return SizePolynomial(type.getDimSize(0));
  };
  SmallVector<SizePolynomial> segmentSizes;
  for (unsigned i = 0; i < graph.size(); ++i) {
    const SegmentInfo &segment = graph.segment(i);
    std::optional<SizePolynomial> declared;
    if (segment.size)
      declared = SizePolynomial(*segment.size);
    segmentSizes.push_back(sizes.get(
        declared, "len(@" + segment.name + ")",
        declared
            ? std::nullopt
            : sampleOf(views.segmentTokens(edit.getCache(), segment.name))));
  }
  StringRef edited = graph.segment(target->edited).name;
  SizePolynomial newSize =
      sizes.get(staticSize(edit.getTokens()), ("len(@" + edited + "')").str(),
                sampleOf(edit.getTokens()));
  SizePolynomial correctionSize = 0;
  if (TypedValue<RankedTensorType> correction = edit.getCorrection())
    correctionSize = sizes.get(staticSize(correction),
                               "len(@" + correctionLabel(edited) + ")",
                               sampleOf(correction));

  CostModel model = CostModel::get(edit.getModel().getType());
  emitCostRemarks(
      loc,
      computeEditCost(graph, plan, segmentSizes, newSize, model,
                      correctionSize),
      sizes, [&](bool atSamples) -> std::optional<EditCost> {
        auto value = [&](const SizePolynomial &size) {
          return atSamples ? sizes.atSamples(size) : size.getConstant();
        };
        SmallVector<int64_t> numbers;
        for (const SizePolynomial &size : segmentSizes) {
          std::optional<int64_t> number = value(size);
          if (!number)
            return std::nullopt;
          numbers.push_back(*number);
        }
        std::optional<int64_t> newNumber = value(newSize);
        std::optional<int64_t> correctionNumber = value(correctionSize);
        if (!newNumber || !correctionNumber)
          return std::nullopt;
        return computeEditCost(graph, plan, numbers, *newNumber, model,
                               *correctionNumber);
      });
  return success();
}

void mlir::kv::emitComposePlanRemarks(ComposeOp compose,
                                      std::optional<int64_t> dynamicSize) {
  Location loc = compose.getLoc();
  ViewSizes views;
  std::optional<SizePolynomial> prefix = views.length(compose.getCache());
  std::optional<SizePolynomial> block = views.length(compose.getBlock());
  std::optional<SizePolynomial> start = views.startPosition(compose.getBlock());
  std::optional<SizePolynomial> position =
      compose.getPosition() ? positionOf(compose.getPosition()) : prefix;
  // The lengths' variables, then the lengths the IR does not tell.
  CostSizes sizes{dynamicSize, {}, {}};
  sizes.adopt(views);
  auto orDynamic = [&](std::optional<SizePolynomial> &size) {
    if (!size && dynamicSize)
      size = SizePolynomial(*dynamicSize);
  };
  orDynamic(prefix);
  orDynamic(block);
  // With dynamic-size, every variable stands for it (numbers, as before).
  auto shown = [&](const SizePolynomial &size) {
    std::optional<int64_t> number =
        dynamicSize ? sizes.atSamples(size) : size.getConstant();
    return number ? std::to_string(*number) : size.str(sizes.names);
  };
  {
    InFlightDiagnostic remark = emitRemark(loc) << "compose: ";
    if (block)
      remark << "block of " << shown(*block) << " tokens";
    else
      remark << "block of run-time length";
    if (position && start)
      remark << " at position " << shown(*position) << ", shift "
             << shown(*position - *start);
    else
      remark << " shifted by position - start_position(block) at run time";
  }
  if (!prefix || !block)
    return;
  TypedValue<ModelType> operand = compose.getModel();
  ModelType model =
      operand ? operand.getType() : views.modelOf(compose.getCache());
  if (!model)
    model = views.modelOf(compose.getBlock());
  if (!model) {
    // No model to price it with: composing computes nothing; say what
    // prefilling the block again would have computed, in tokens.
    emitRemark(loc) << "cost: plan 0 tokens; exact " << shown(*block)
                    << " tokens; full " << shown(*prefix + *block) << " tokens";
    return;
  }
  CostModel cost = CostModel::get(model);
  RepairAttr repair = compose.getRepairAttr();
  emitCostRemarks(loc, computeComposeCost(*prefix, *block, repair, cost), sizes,
                  [&](bool atSamples) -> std::optional<EditCost> {
                    bool numbers = atSamples || dynamicSize;
                    std::optional<int64_t> p = numbers
                                                   ? sizes.atSamples(*prefix)
                                                   : prefix->getConstant();
                    std::optional<int64_t> b = numbers ? sizes.atSamples(*block)
                                                       : block->getConstant();
                    if (!p || !b)
                      return std::nullopt;
                    return computeComposeCost(*p, *b, repair, cost);
                  });
}

void mlir::kv::emitLoadBlockPlanRemarks(LoadBlockOp load,
                                        std::optional<int64_t> dynamicSize) {
  std::optional<int64_t> n = getStaticLength(load.getResult());
  if (!n)
    n = dynamicSize;
  std::optional<int64_t> base = getStaticStartPosition(load.getResult());
  InFlightDiagnostic remark = emitRemark(load.getLoc())
                              << "load_block: block of ";
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
