//===- KVOps.cpp - Operations of the kv dialect -----------------*- C++ -*-===//
//
// Verifiers, custom directives and symbol checks of the kv ops. Folders and
// canonicalization patterns live in KVOpFolders.cpp.
//
//===----------------------------------------------------------------------===//

#include "dialects/KV/KVOps.h"
#include "dialects/KV/KVAsmUtils.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <cmath>

using namespace mlir;
using namespace mlir::kv;

//===----------------------------------------------------------------------===//
// Custom directives
//===----------------------------------------------------------------------===//

/// `tokens(N)` or `tokens(?)` (a static or dynamic segment size), then an
/// optional `deps(@a, @b)`.
static ParseResult parseSegmentSizeAndDeps(OpAsmParser &parser,
                                           IntegerAttr &tokens,
                                           ArrayAttr &deps) {
  if (parser.parseKeyword("tokens") || parser.parseLParen())
    return failure();
  if (failed(parser.parseOptionalQuestion())) {
    int64_t size;
    if (parser.parseInteger(size))
      return failure();
    tokens = parser.getBuilder().getI64IntegerAttr(size);
  }
  if (parser.parseRParen())
    return failure();
  SmallVector<Attribute> refs;
  if (succeeded(parser.parseOptionalKeyword("deps"))) {
    auto parseRef = [&]() -> ParseResult {
      StringAttr name;
      if (parser.parseSymbolName(name))
        return failure();
      refs.push_back(FlatSymbolRefAttr::get(name));
      return success();
    };
    if (parser.parseCommaSeparatedList(OpAsmParser::Delimiter::Paren, parseRef))
      return failure();
  }
  deps = parser.getBuilder().getArrayAttr(refs);
  return success();
}

static void printSegmentSizeAndDeps(OpAsmPrinter &printer, Operation *,
                                    IntegerAttr tokens, ArrayAttr deps) {
  printer << "tokens(";
  if (tokens)
    printer << tokens.getInt();
  else
    printer << "?";
  printer << ")";
  if (!deps || deps.empty())
    return;
  printer << " deps(";
  llvm::interleaveComma(deps, printer, [&](Attribute ref) {
    printer.printAttributeWithoutType(ref);
  });
  printer << ")";
}

/// A view list: `%v` or `[%a, %b]` or `[%a + %da, %b + %db]`, where every
/// entry has an offset or none has.
static ParseResult
parseViewList(OpAsmParser &parser,
              SmallVectorImpl<OpAsmParser::UnresolvedOperand> &views,
              SmallVectorImpl<OpAsmParser::UnresolvedOperand> &offsets) {
  if (failed(parser.parseOptionalLSquare())) {
    OpAsmParser::UnresolvedOperand view;
    if (parser.parseOperand(view))
      return failure();
    views.push_back(view);
    return success();
  }
  SMLoc loc = parser.getCurrentLocation();
  auto parseEntry = [&]() -> ParseResult {
    OpAsmParser::UnresolvedOperand view;
    if (parser.parseOperand(view))
      return failure();
    views.push_back(view);
    if (succeeded(parser.parseOptionalPlus())) {
      OpAsmParser::UnresolvedOperand offset;
      if (parser.parseOperand(offset))
        return failure();
      offsets.push_back(offset);
    }
    return success();
  };
  if (parser.parseCommaSeparatedList(parseEntry) || parser.parseRSquare())
    return failure();
  if (!offsets.empty() && offsets.size() != views.size())
    return parser.emitError(loc)
           << "either every view of the list has an offset or none has";
  return success();
}

static void printViewList(OpAsmPrinter &printer, Operation *,
                          OperandRange views, OperandRange offsets) {
  if (views.size() == 1 && offsets.empty()) {
    printer << views.front();
    return;
  }
  printer << "[";
  for (auto [i, view] : llvm::enumerate(views)) {
    if (i)
      printer << ", ";
    printer << view;
    if (!offsets.empty())
      printer << " + " << offsets[i];
  }
  printer << "]";
}

//===----------------------------------------------------------------------===//
// Shared verification helpers
//===----------------------------------------------------------------------===//

/// Checks that `cache` holds K/V of the shape `model` computes.
static LogicalResult verifyCacheMatchesModel(Operation *op, ModelType model,
                                             CacheType cache,
                                             const Twine &what) {
  if (cache.getLayers() == model.getLayers() &&
      cache.getKvHeads() == model.getKvHeads() &&
      cache.getHeadSize() == model.getHeadSize())
    return success();
  return op->emitOpError() << what
                           << " does not match the model: the model computes "
                           << model.getLayers() << " layers x "
                           << model.getKvHeads() << " KV heads x head size "
                           << model.getHeadSize() << ", the cache holds "
                           << cache.getLayers() << " x " << cache.getKvHeads()
                           << " x " << cache.getHeadSize();
}

/// Checks a view list against the model and its offsets against the views.
static LogicalResult verifyViewList(Operation *op, ModelType model,
                                    ValueRange views, ValueRange offsets) {
  if (views.empty())
    return op->emitOpError("needs at least one view");
  if (!offsets.empty() && offsets.size() != views.size())
    return op->emitOpError() << "has " << views.size() << " views but "
                             << offsets.size() << " offsets";
  for (auto [i, view] : llvm::enumerate(views))
    if (failed(verifyCacheMatchesModel(
            op, model, cast<CacheType>(view.getType()), "view #" + Twine(i))))
      return failure();
  return success();
}

/// Checks that logits have one column per vocabulary entry.
static LogicalResult verifyLogitsType(Operation *op, ModelType model,
                                      RankedTensorType logits) {
  if (logits.isDynamicDim(1) || logits.getDimSize(1) != model.getVocab())
    return op->emitOpError()
           << "logits type " << logits << " does not match the model: "
           << "expected " << model.getVocab() << " columns (the vocabulary)";
  return success();
}

/// Resolves the context a cache type names, if any. Fails (with a diagnostic)
/// when the name does not resolve to a kv.context.
static FailureOr<ContextOp> lookupContext(Operation *op, CacheType type,
                                          SymbolTableCollection &tables) {
  FlatSymbolRefAttr name = type.getContextName();
  if (!name)
    return ContextOp();
  Operation *symbol = tables.lookupNearestSymbolFrom(op, name);
  if (!symbol)
    return op->emitOpError()
           << "cache type names context " << name << ", which is not defined";
  auto context = dyn_cast<ContextOp>(symbol);
  if (!context)
    return op->emitOpError()
           << "cache type names " << name << ", which is not a 'kv.context'";
  return context;
}

/// Checks that `segment` is a segment of the context `type` names (or, with
/// `allowCorrection`, the correction label of one). With `requireContext`, a
/// cache type that names no context is an error too.
static LogicalResult verifySegmentUse(Operation *op, CacheType type,
                                      FlatSymbolRefAttr segment,
                                      SymbolTableCollection &tables,
                                      bool requireContext,
                                      bool allowCorrection = true) {
  FailureOr<ContextOp> context = lookupContext(op, type, tables);
  if (failed(context))
    return failure();
  if (!*context) {
    if (!requireContext)
      return success();
    return op->emitOpError()
           << "needs a cache type that names a kv.context, to know the "
              "dependencies of segment "
           << segment;
  }
  if (!context->lookupSegment(segment.getValue()) &&
      !(allowCorrection && isCorrectionLabel(*context, segment.getValue())))
    return op->emitOpError()
           << "segment " << segment << " is not defined in context @"
           << context->getSymName();
  return success();
}

//===----------------------------------------------------------------------===//
// Erratum helpers
//===----------------------------------------------------------------------===//

std::string mlir::kv::correctionLabel(StringRef segment) {
  return (segment + ".erratum").str();
}

bool mlir::kv::isCorrectionLabel(ContextOp context, StringRef label) {
  return label.consume_back(".erratum") && context.lookupSegment(label);
}

std::optional<unsigned> mlir::kv::getErratumAnswer(ArrayRef<SegmentKind> kinds,
                                                   unsigned edited) {
  for (unsigned i = edited + 1; i < kinds.size(); ++i)
    if (kinds[i] == SegmentKind::Answer)
      return i;
  if (kinds.size() > edited + 1)
    return kinds.size() - 1;
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// ContextOp
//===----------------------------------------------------------------------===//

void ContextOp::build(OpBuilder &builder, OperationState &state,
                      StringRef name) {
  state.addAttribute(getSymNameAttrName(state.name),
                     builder.getStringAttr(name));
  state.addRegion()->emplaceBlock();
}

SegmentOp ContextOp::lookupSegment(StringRef name) {
  return dyn_cast_or_null<SegmentOp>(::mlir::SymbolTable::lookupSymbolIn(
      getOperation(), StringAttr::get(getContext(), name)));
}

/// Finds a path of dependencies from `from` to `to`, following every edge
/// (forward ones included), and appends it to `path`.
static bool
findDependencyPath(StringAttr from, StringAttr to,
                   const llvm::DenseMap<StringAttr, ArrayAttr> &deps,
                   llvm::SmallPtrSetImpl<Attribute> &visited,
                   SmallVectorImpl<StringAttr> &path) {
  path.push_back(from);
  if (from == to)
    return true;
  if (visited.insert(from).second) {
    auto it = deps.find(from);
    if (it != deps.end() && it->second)
      for (auto ref : it->second.getAsRange<FlatSymbolRefAttr>())
        if (findDependencyPath(ref.getAttr(), to, deps, visited, path))
          return true;
  }
  path.pop_back();
  return false;
}

LogicalResult ContextOp::verifyRegions() {
  llvm::DenseMap<StringAttr, unsigned> order;
  llvm::DenseMap<StringAttr, ArrayAttr> deps;
  for (Operation &op : getBody().front()) {
    auto segment = dyn_cast<SegmentOp>(op);
    if (!segment)
      return op.emitOpError("is not allowed in a 'kv.context'; only "
                            "'kv.segment' ops are");
    order.try_emplace(segment.getSymNameAttr(), order.size());
    deps[segment.getSymNameAttr()] = segment.getDeps();
  }
  for (SegmentOp segment : getSegments()) {
    StringAttr name = segment.getSymNameAttr();
    llvm::SmallPtrSet<Attribute, 4> listed;
    for (auto ref : segment.getDeps().getAsRange<FlatSymbolRefAttr>()) {
      StringAttr dep = ref.getAttr();
      if (!listed.insert(dep).second)
        return segment.emitOpError() << "segment @" << name.getValue()
                                     << " lists dependency " << ref << " twice";
      if (dep == name)
        return segment.emitOpError()
               << "segment @" << name.getValue() << " depends on itself";
      auto it = order.find(dep);
      if (it == order.end())
        return segment.emitOpError()
               << "segment @" << name.getValue() << " depends on " << ref
               << ", which is not a segment of context @" << getSymName();
      if (it->second < order.lookup(name))
        continue;
      llvm::SmallPtrSet<Attribute, 8> visited;
      SmallVector<StringAttr> path;
      if (findDependencyPath(dep, name, deps, visited, path)) {
        InFlightDiagnostic diag = segment.emitOpError()
                                  << "dependency cycle: @" << name.getValue();
        for (StringAttr step : path)
          diag << " -> @" << step.getValue();
        return diag;
      }
      return segment.emitOpError()
             << "segment @" << name.getValue() << " depends on " << ref
             << ", which comes later in the context; dependencies must point "
                "to earlier segments";
    }
  }
  return success();
}

//===----------------------------------------------------------------------===//
// SegmentOp
//===----------------------------------------------------------------------===//

LogicalResult SegmentOp::verify() {
  if (std::optional<int64_t> tokens = getTokens(); tokens && *tokens <= 0)
    return emitOpError() << "segment @" << getSymName()
                         << " must have a positive token count, got " << *tokens
                         << " (use tokens(?) for a size known at run time)";
  return success();
}

//===----------------------------------------------------------------------===//
// EmptyOp
//===----------------------------------------------------------------------===//

LogicalResult EmptyOp::verifySymbolUses(SymbolTableCollection &tables) {
  return lookupContext(*this, getType(), tables);
}

//===----------------------------------------------------------------------===//
// PrefillOp
//===----------------------------------------------------------------------===//

/// Checks what a prefill (or a chain of them) computes: its view list, its
/// result, and logits with a row per token of `tokens` (the last list of a
/// chain), or one row with `last`.
static LogicalResult verifyPrefillTypes(Operation *op, ModelType model,
                                        ValueRange views, ValueRange offsets,
                                        CacheType result,
                                        RankedTensorType logits,
                                        RankedTensorType tokens, bool last,
                                        StringRef whose) {
  if (failed(verifyViewList(op, model, views, offsets)) ||
      failed(verifyCacheMatchesModel(op, model, result, "result type")) ||
      failed(verifyLogitsType(op, model, logits)))
    return failure();
  if (logits.isDynamicDim(0))
    return success();
  int64_t rows = logits.getDimSize(0);
  if (last && rows != 1)
    return op->emitOpError() << "returns the logits of the last token only, so "
                                "its logits type needs 1 row, got "
                             << rows;
  if (!last && !tokens.isDynamicDim(0) && tokens.getDimSize(0) != rows)
    return op->emitOpError()
           << "computes the logits of " << tokens.getDimSize(0) << " tokens"
           << whose << ", but its logits type has " << rows << " rows";
  return success();
}

LogicalResult PrefillOp::verify() {
  return verifyPrefillTypes(*this, getModel().getType(), getViews(),
                            getOffsets(), getResult().getType(),
                            getLogits().getType(), getTokens().getType(),
                            getLast(), "");
}

/// The static size `context` declares for `segment`, where the static
/// `tokens` hold another number of tokens; else nothing.
static std::optional<int64_t> conflictingDeclaredSize(ContextOp context,
                                                      StringRef segment,
                                                      RankedTensorType tokens) {
  if (!context || tokens.isDynamicDim(0))
    return std::nullopt;
  SegmentOp declared = context.lookupSegment(segment);
  if (!declared || declared.isDynamic() ||
      int64_t(*declared.getTokens()) == tokens.getDimSize(0))
    return std::nullopt;
  return int64_t(*declared.getTokens());
}

/// Checks the context a new run's cache type names and, when the op labels
/// the run with `segment`, that the segment is one of it and that `tokens`
/// (what the op `verb`s) agree with its static size.
static LogicalResult verifyNewRunLabel(Operation *op, CacheType type,
                                       FlatSymbolRefAttr segment,
                                       RankedTensorType tokens, StringRef verb,
                                       SymbolTableCollection &tables) {
  FailureOr<ContextOp> context = lookupContext(op, type, tables);
  if (failed(context))
    return failure();
  if (!segment)
    return success();
  if (failed(verifySegmentUse(op, type, segment, tables,
                              /*requireContext=*/false)))
    return failure();
  // The tokens of a segment of static size are that many.
  std::optional<int64_t> declared =
      conflictingDeclaredSize(*context, segment.getValue(), tokens);
  if (!declared)
    return success();
  return op->emitOpError() << verb << " " << tokens.getDimSize(0)
                           << " tokens as segment " << segment
                           << ", which context @" << (*context).getSymName()
                           << " declares with " << *declared;
}

LogicalResult PrefillOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifyNewRunLabel(*this, getResult().getType(), getSegmentAttr(),
                           getTokens().getType(), "prefills", tables);
}

//===----------------------------------------------------------------------===//
// PrefillChainOp
//===----------------------------------------------------------------------===//

LogicalResult PrefillChainOp::verify() {
  OperandRange tokens = getTokens();
  if (tokens.size() < 2)
    return emitOpError() << "chains at least 2 token lists, got "
                         << tokens.size();
  if (ArrayAttr segments = getSegmentsAttr();
      segments && segments.size() != tokens.size())
    return emitOpError() << "has " << tokens.size() << " token lists but "
                         << segments.size() << " segment labels";
  return verifyPrefillTypes(*this, getModel().getType(), getViews(),
                            getOffsets(), getResult().getType(),
                            getLogits().getType(),
                            cast<RankedTensorType>(tokens.back().getType()),
                            getLast(), " (its last token list)");
}

LogicalResult PrefillChainOp::verifySymbolUses(SymbolTableCollection &tables) {
  for (auto [i, tokens] : llvm::enumerate(getTokens()))
    if (failed(verifyNewRunLabel(*this, getResult().getType(), getSegmentOf(i),
                                 cast<RankedTensorType>(tokens.getType()),
                                 "prefills", tables)))
      return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// EditOp
//===----------------------------------------------------------------------===//

LogicalResult EditOp::verify() {
  StrategyKind strategy = getStrategy().getKind();
  if (strategy == StrategyKind::Erratum && !getCorrection())
    return emitOpError("strategy erratum needs the tokens of the correction "
                       "it appends: add `correction(%tokens)`");
  if (strategy != StrategyKind::Erratum && getCorrection())
    return emitOpError()
           << "takes correction tokens only with the erratum strategy, not "
           << stringifyStrategyKind(strategy);
  return verifyCacheMatchesModel(*this, getModel().getType(),
                                 getCache().getType(), "cache type");
}

LogicalResult EditOp::verifySymbolUses(SymbolTableCollection &tables) {
  CacheType type = getCache().getType();
  if (failed(verifySegmentUse(*this, type, getSegmentAttr(), tables,
                              /*requireContext=*/true,
                              /*allowCorrection=*/false)))
    return failure();
  auto context = cast<ContextOp>(
      tables.lookupNearestSymbolFrom(*this, type.getContextName()));
  // New tokens of another static length than a segment of static size: the
  // edited context would contradict its declaration (reported here, at the
  // op the user wrote, not at the prefill the plan makes of it).
  if (std::optional<int64_t> declared =
          conflictingDeclaredSize(context, getSegment(), getTokens().getType()))
    return emitOpError() << "replaces segment @" << getSegment() << " by "
                         << getTokens().getType().getDimSize(0)
                         << " tokens, but context @" << context.getSymName()
                         << " declares it with " << *declared
                         << " (declare it tokens(?) for an edit that changes "
                            "its length)";
  if (getStrategy().getKind() != StrategyKind::Erratum)
    return success();
  SmallVector<SegmentKind> kinds;
  std::optional<unsigned> edited;
  for (SegmentOp segment : context.getSegments()) {
    if (segment.getSymName() == getSegment())
      edited = kinds.size();
    kinds.push_back(segment.getKind());
  }
  if (edited && !getErratumAnswer(kinds, *edited))
    return emitOpError() << "erratum of @" << getSegment()
                         << ", the last segment of context @"
                         << context.getSymName()
                         << ", leaves no answer to recompute after the "
                            "correction (use exact or cot_slice)";
  return success();
}

//===----------------------------------------------------------------------===//
// LogitsOp
//===----------------------------------------------------------------------===//

LogicalResult LogitsOp::verify() {
  ModelType model = getModel().getType();
  if (failed(verifyCacheMatchesModel(*this, model, getCache().getType(),
                                     "cache type")))
    return failure();
  return verifyLogitsType(*this, model, getLogits().getType());
}

LogicalResult LogitsOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifySegmentUse(*this, getCache().getType(), getSegmentAttr(), tables,
                          /*requireContext=*/false);
}

//===----------------------------------------------------------------------===//
// ComposeOp
//===----------------------------------------------------------------------===//

LogicalResult ComposeOp::verify() {
  CacheType cache = getCache().getType();
  CacheType block = getBlock().getType();
  if (!cache.isLayoutCompatibleWith(block))
    return emitOpError() << "block type " << block
                         << " does not hold K/V of the shape of the cache "
                         << cache;
  if (getRepair() && !getModel())
    return emitOpError("needs the model (`using %model`) to spend a repair "
                       "budget");
  if (!getRepair() && getModel())
    return emitOpError("takes a model only to spend a repair budget; add "
                       "`repair <...>` or drop `using`");
  if (TypedValue<ModelType> model = getModel())
    return verifyCacheMatchesModel(*this, model.getType(), cache, "cache type");
  return success();
}

//===----------------------------------------------------------------------===//
// LoadBlockOp, StoreBlockOp
//===----------------------------------------------------------------------===//

LogicalResult LoadBlockOp::verify() {
  return verifyCacheMatchesModel(*this, getModel().getType(),
                                 getResult().getType(), "result type");
}

LogicalResult LoadBlockOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifyNewRunLabel(*this, getResult().getType(), getSegmentAttr(),
                           getTokens().getType(), "loads", tables);
}

LogicalResult StoreBlockOp::verify() {
  return verifyCacheMatchesModel(*this, getModel().getType(),
                                 getCache().getType(), "cache type");
}

//===----------------------------------------------------------------------===//
// MaterializeOp
//===----------------------------------------------------------------------===//

LogicalResult MaterializeOp::verify() {
  return verifyCacheMatchesModel(*this, getModel().getType(),
                                 getCache().getType(), "cache type");
}

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::verify() {
  ModelType model = getModel().getType();
  if (failed(verifyViewList(*this, model, getViews(), getOffsets())))
    return failure();
  if (static_cast<int64_t>(getLayer()) >= model.getLayers())
    return emitOpError() << "layer " << getLayer()
                         << " is out of range for a model with "
                         << model.getLayers() << " layers";
  RankedTensorType query = getQuery().getType();
  if (query.isDynamicDim(1) || query.getDimSize(1) != model.getHeads() ||
      query.isDynamicDim(2) || query.getDimSize(2) != model.getHeadSize())
    return emitOpError() << "query type " << query
                         << " does not match the model: expected [n]["
                         << model.getHeads() << "][" << model.getHeadSize()
                         << "] (tokens x heads x head size)";
  if (getResult().getType() != query)
    return emitOpError() << "result type " << getResult().getType()
                         << " differs from the query type " << query;
  return success();
}

//===----------------------------------------------------------------------===//
// ConcatOp
//===----------------------------------------------------------------------===//

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one input");
  CacheType result = getResult().getType();
  for (auto [i, input] : llvm::enumerate(getInputs()))
    if (!cast<CacheType>(input.getType()).isLayoutCompatibleWith(result))
      return emitOpError() << "input #" << i << " of type " << input.getType()
                           << " does not hold K/V of the shape of the result "
                           << result;
  return success();
}

//===----------------------------------------------------------------------===//
// SegmentBoundsOp
//===----------------------------------------------------------------------===//

LogicalResult SegmentBoundsOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifySegmentUse(*this, getCache().getType(), getSegmentAttr(), tables,
                          /*requireContext=*/false);
}

//===----------------------------------------------------------------------===//
// SelectiveRecomputeOp
//===----------------------------------------------------------------------===//

LogicalResult SelectiveRecomputeOp::verify() {
  std::optional<APFloat> fraction = getFraction(), deviation = getDeviation();
  if (fraction.has_value() == deviation.has_value())
    return emitOpError("needs exactly one of `fraction f` and `deviation t`, "
                       "got ")
           << (fraction ? "both" : "neither");
  if (fraction) {
    double f = fraction->convertToDouble();
    if (!(f >= 0.0 && f <= 1.0))
      return emitOpError() << "fraction must be in [0, 1], got "
                           << formatShortestFloat(f);
  } else {
    double t = deviation->convertToDouble();
    if (!(t > 0.0 && std::isfinite(t)))
      return emitOpError() << "deviation threshold must be finite and > 0, got "
                           << formatShortestFloat(t);
  }
  return verifyCacheMatchesModel(*this, getModel().getType(),
                                 getCache().getType(), "cache type");
}

#define GET_OP_CLASSES
#include "dialects/KV/KVOps.cpp.inc"
