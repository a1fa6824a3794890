//===- ConvertKVToRuntime.cpp - kv host code to runtime calls ---*- C++ -*-===//
//
// Lowers a planned kv program (what kv-optimize leaves) to calls of the
// execution C ABI (runtime/exec/ExecRuntime.h). Values become pointers:
// views, the model, and token ids and logits as runtime handles, so the host
// program needs no bufferization. Every host function gets a leading context
// argument; each public one also gets `_kvrt_entry_NAME(ctx, args, results)`
// taking its arguments and results as arrays of 64-bit slots.
//
//===----------------------------------------------------------------------===//

#include "dialects/KV/KVDialect.h"
#include "dialects/KV/KVOps.h"
#include "passes/Conversion/Forward/BuildForward.h"
#include "passes/Conversion/KVToRuntime/ExecABI.h"
#include "passes/Passes.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/exec/ExecRuntime.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Func/Transforms/FuncConversions.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

#include <array>

namespace mlir::kv {
#define GEN_PASS_DEF_CONVERTKVTORUNTIMEPASS
#include "passes/Passes.h.inc"
} // namespace mlir::kv

using namespace mlir;
using namespace mlir::kv;

namespace {

/// The prefix of the generated entry wrappers.
constexpr llvm::StringLiteral kEntryPrefix = "_kvrt_entry_";

/// The types the conversion turns into pointers.
bool isHandleType(Type type) {
  return isa<CacheType, ModelType>(type) || isTokensType(type) ||
         isLogitsType(type) || isQueryType(type);
}

/// The static size of dimension `i` of a tensor type, or -1.
int64_t staticSize(Type type, unsigned i) {
  auto tensor = cast<RankedTensorType>(type);
  return tensor.isDynamicDim(i) ? -1 : tensor.getDimSize(i);
}

/// The K/V element type of an op's caches: of its first cache operand, else
/// of its first cache result (kv.load_block has no cache operand).
Type cacheElementOf(Operation *op) {
  for (TypeRange types :
       {TypeRange(op->getOperandTypes()), TypeRange(op->getResultTypes())})
    for (Type type : types)
      if (auto cache = dyn_cast<CacheType>(type))
        return cache.getElementType();
  return Float32Type::get(op->getContext());
}

/// The formats of the weights of an op's model (kv.weight_formats; a
/// malformed attribute was refused where the forwards were built).
kvir::WeightFormats formatsOf(Operation *op) {
  auto model = cast<ModelType>(op->getOperand(0).getType());
  FailureOr<kvir::WeightFormats> formats = weightFormatsOf(
      op->getParentOfType<ModuleOp>(), model.getConfig(), op->getLoc());
  return succeeded(formats) ? *formats : kvir::WeightFormats();
}

/// The forward entry point an op needs, for its model, the element type of
/// its caches and the formats of the model's weights.
std::string forwardEntryOf(Operation *op, ForwardEntryPoint entry) {
  auto model = cast<ModelType>(op->getOperand(0).getType());
  return forwardEntryName(model.getConfig(), kvDtypeOf(cacheElementOf(op)),
                          formatsOf(op), entry);
}

/// The key of the forward an op needs (what the runtime checks).
std::string forwardKeyOf(Operation *op) {
  auto model = cast<ModelType>(op->getOperand(0).getType());
  return kvir::forwardKey(model.getConfig(), kvDtypeOf(cacheElementOf(op)),
                          formatsOf(op));
}

/// The entry point each op that needs math calls.
std::optional<ForwardEntryPoint> forwardEntryPointOf(Operation *op) {
  if (isa<PrefillOp, PrefillChainOp, SelectiveRecomputeOp, LoadBlockOp>(op))
    return ForwardEntryPoint::Prefill;
  if (isa<AttentionOp>(op))
    return ForwardEntryPoint::Attention;
  if (isa<MaterializeOp>(op))
    return ForwardEntryPoint::Materialize;
  return std::nullopt;
}

bool usesHostTypes(Operation *op) {
  return llvm::any_of(op->getOperandTypes(), isHandleType) ||
         llvm::any_of(op->getResultTypes(), isHandleType);
}
bool hasHostSignature(func::FuncOp func) {
  return llvm::any_of(func.getArgumentTypes(), isHandleType) ||
         llvm::any_of(func.getResultTypes(), isHandleType);
}

/// What the pre-pass decided, read by the patterns.
struct LoweringState {
  DenseSet<Operation *> hostFuncs;
  DenseMap<Operation *, int32_t> sites;
  DenseSet<Operation *> planOps;
  SmallVector<Attribute> siteLocs;
  llvm::StringMap<FlatSymbolRefAttr> strings;
  unsigned numGlobals = 0;
  ModuleOp module;

  int32_t siteOf(Operation *op) const {
    auto it = sites.find(op);
    return it == sites.end() ? -1 : it->second;
  }

  /// The host functions in module order (deterministic site numbers).
  SmallVector<func::FuncOp> hostFuncsInOrder() const {
    SmallVector<func::FuncOp> funcs;
    for (auto func : ModuleOp(module).getOps<func::FuncOp>())
      if (hostFuncs.contains(func))
        funcs.push_back(func);
    return funcs;
  }
};

class HostTypeConverter : public TypeConverter {
public:
  explicit HostTypeConverter(MLIRContext *context) {
    addConversion([](Type type) { return type; });
    addConversion([context](Type type) -> std::optional<Type> {
      if (isHandleType(type))
        return LLVM::LLVMPointerType::get(context);
      return std::nullopt;
    });
    auto cast = [](OpBuilder &builder, Type type, ValueRange inputs,
                   Location loc) -> Value {
      return UnrealizedConversionCastOp::create(builder, loc, type, inputs)
          .getResult(0);
    };
    addSourceMaterialization(cast);
    addTargetMaterialization(cast);
  }
};

/// Shared helpers of the patterns: runtime calls with the context, site and
/// plan accounting.
template <typename Op> class RuntimePattern : public OpConversionPattern<Op> {
public:
  RuntimePattern(const TypeConverter &converter, MLIRContext *context,
                 LoweringState &state)
      : OpConversionPattern<Op>(converter, context), state(state) {}

protected:
  LoweringState &state;

  Type ptrType() const {
    return LLVM::LLVMPointerType::get(this->getContext());
  }
  Type i64() const { return IntegerType::get(this->getContext(), 64); }
  Type i32() const { return IntegerType::get(this->getContext(), 32); }

  /// The context argument of the function around `op`.
  Value contextOf(Operation *op, ConversionPatternRewriter &rewriter) const {
    auto func = op->template getParentOfType<func::FuncOp>();
    return rewriter.getRemappedValue(func.getArgument(0));
  }

  Value constI64(ConversionPatternRewriter &rewriter, Location loc,
                 int64_t value) const {
    return arith::ConstantIntOp::create(rewriter, loc, value, 64);
  }
  Value constI32(ConversionPatternRewriter &rewriter, Location loc,
                 int64_t value) const {
    return arith::ConstantIntOp::create(rewriter, loc, value, 32);
  }
  Value site(ConversionPatternRewriter &rewriter, Operation *op) const {
    return constI32(rewriter, op->getLoc(), state.siteOf(op));
  }
  Value null(ConversionPatternRewriter &rewriter, Location loc) const {
    return LLVM::ZeroOp::create(rewriter, loc, ptrType());
  }
  Value toI64(ConversionPatternRewriter &rewriter, Location loc,
              Value index) const {
    return arith::IndexCastOp::create(rewriter, loc, i64(), index);
  }
  Value toIndex(ConversionPatternRewriter &rewriter, Location loc,
                Value value) const {
    return arith::IndexCastOp::create(rewriter, loc, rewriter.getIndexType(),
                                      value);
  }

  /// The call of `F` for the kv op `op`, as a function of the operands
  /// after the two every such call starts with: the context of the function
  /// around `op`, and `op`'s site. Those two are made here, before the
  /// other operands (`atSite<F>(rewriter, op)(operands...)` evaluates them
  /// after), which keeps the order of the ops the pattern creates.
  template <ExecFn F>
  auto atSite(ConversionPatternRewriter &rewriter, Operation *op) const {
    Value ctx = contextOf(op, rewriter), at = site(rewriter, op);
    return [this, &rewriter, op, ctx, at](auto... operands) {
      return this->template call<F>(rewriter, op, ctx, at, operands...);
    };
  }

  /// Calls `F` of the exec ABI (runtime/exec/ExecABI.def), bracketed by
  /// plan accounting when `op` is plan work; the number of operands is
  /// checked at compile time, their types by the call's verifier.
  template <ExecFn F, typename... Args>
  ValueRange call(ConversionPatternRewriter &rewriter, Operation *op,
                  Args... args) const {
    static_assert(sizeof...(Args) == execFunction(F).arity,
                  "the call does not match runtime/exec/ExecABI.def");
    return callExec(rewriter, op, F, {Value(args)...});
  }

  ValueRange callExec(ConversionPatternRewriter &rewriter, Operation *op,
                      ExecFn fn, ArrayRef<Value> args) const {
    Location loc = op->getLoc();
    Value ctx = args.front();
    bool plan = state.planOps.contains(op);
    if (plan)
      callPlain(rewriter, loc, ExecFn::kvrt_exec_plan_begin, ctx);
    ValueRange results = callPlain(rewriter, loc, fn, args);
    if (plan)
      callPlain(rewriter, loc, ExecFn::kvrt_exec_plan_end, ctx);
    return results;
  }

  /// A call of `fn`, declared once in the module from the ABI's types.
  ValueRange callPlain(ConversionPatternRewriter &rewriter, Location loc,
                       ExecFn fn, ArrayRef<Value> args) const {
    StringRef name = execFunction(fn).name;
    FunctionType type = getExecFunctionType(rewriter.getContext(), fn);
    if (!state.module.lookupSymbol(name))
      declareExecFunction(rewriter, state.module, fn);
    return func::CallOp::create(rewriter, loc, name, type.getResults(), args)
        .getResults();
  }

  /// The forward entry point `op` needs, as a function value, and the
  /// config key it was compiled for (both checked to exist by the pass).
  Value forward(ConversionPatternRewriter &rewriter, Operation *op,
                ForwardEntryPoint entry) const {
    return func::ConstantOp::create(
        rewriter, op->getLoc(), getForwardEntryType(rewriter.getContext()),
        SymbolRefAttr::get(rewriter.getContext(), forwardEntryOf(op, entry)));
  }
  Value forwardKey(ConversionPatternRewriter &rewriter, Operation *op) const {
    return string(rewriter, op->getLoc(), forwardKeyOf(op));
  }

  /// A stack array of `values` (pointers or i64), or null when empty.
  Value array(ConversionPatternRewriter &rewriter, Location loc,
              ValueRange values, Type element) const {
    if (values.empty())
      return null(rewriter, loc);
    auto arrayType = LLVM::LLVMArrayType::get(element, values.size());
    Value one = constI64(rewriter, loc, 1);
    Value base =
        LLVM::AllocaOp::create(rewriter, loc, ptrType(), arrayType, one);
    for (auto [i, value] : llvm::enumerate(values)) {
      Value slot = LLVM::GEPOp::create(rewriter, loc, ptrType(), element, base,
                                       ArrayRef<LLVM::GEPArg>{int32_t(i)});
      LLVM::StoreOp::create(rewriter, loc, value, slot);
    }
    return base;
  }

  /// A stack array of `indices` as i64 (a view list's offsets).
  Value indexArray(ConversionPatternRewriter &rewriter, Location loc,
                   ValueRange indices) const {
    SmallVector<Value> words;
    for (Value index : indices)
      words.push_back(toI64(rewriter, loc, index));
    return array(rewriter, loc, words, i64());
  }

  /// The operands of an optional `at` position and `segment` label
  /// (kv.prefill, kv.load_block): has_position, position (0 when absent) and
  /// the label (null when absent).
  std::array<Value, 3> placement(ConversionPatternRewriter &rewriter,
                                 Location loc, Value position,
                                 std::optional<StringRef> segment) const {
    Value hasPosition = constI32(rewriter, loc, position ? 1 : 0);
    Value at =
        position ? toI64(rewriter, loc, position) : constI64(rewriter, loc, 0);
    Value label =
        segment ? string(rewriter, loc, *segment) : null(rewriter, loc);
    return {hasPosition, at, label};
  }

  /// Replaces a prefill (or a chain) by the call of `F`: the forward's key
  /// and entry, the model, the view list (`views`, `offsets` and its size),
  /// `middle` (what the op computes, placed or labelled), which rows get
  /// logits and their static count, and a stack slot the new view comes
  /// back through. Logits nothing reads (a segment's last row while a
  /// context is built, every segment an edit's plan recomputes) are not
  /// computed: the classifier is vocab x dim per row, and the handle is
  /// still returned.
  template <ExecFn F, typename PrefillLike, typename... Middle>
  void replacePrefill(PrefillLike op, typename PrefillLike::Adaptor adaptor,
                      ConversionPatternRewriter &rewriter, Value views,
                      Value offsets, Middle... middle) const {
    Location loc = op.getLoc();
    Value resultSlot = array(rewriter, loc, {null(rewriter, loc)}, ptrType());
    bool unread = op.getLogits().use_empty();
    int32_t rows = unread         ? KVRT_EXEC_LOGITS_NONE
                   : op.getLast() ? KVRT_EXEC_LOGITS_LAST
                                  : KVRT_EXEC_LOGITS_ALL;
    Value logits =
        atSite<F>(rewriter, op)(
            forwardKey(rewriter, op),
            forward(rewriter, op, ForwardEntryPoint::Prefill),
            adaptor.getModel(), views, offsets,
            constI64(rewriter, loc, adaptor.getViews().size()), middle...,
            constI32(rewriter, loc, rows),
            constI64(rewriter, loc,
                     unread ? -1 : staticSize(op.getLogits().getType(), 0)),
            resultSlot)
            .front();
    Value result = LLVM::LoadOp::create(rewriter, loc, ptrType(), resultSlot);
    rewriter.replaceOp(op, {result, logits});
  }

  /// A pointer to a NUL-terminated constant string (deduplicated).
  Value string(ConversionPatternRewriter &rewriter, Location loc,
               StringRef text) const {
    FlatSymbolRefAttr &symbol = state.strings[text];
    if (!symbol) {
      OpBuilder::InsertionGuard guard(rewriter);
      rewriter.setInsertionPointToStart(state.module.getBody());
      std::string name = "__kvrt_str_" + std::to_string(state.numGlobals++);
      std::string value = (text + Twine('\0')).str();
      auto type = LLVM::LLVMArrayType::get(rewriter.getI8Type(), value.size());
      LLVM::GlobalOp::create(rewriter, loc, type, /*isConstant=*/true,
                             LLVM::Linkage::Internal, name,
                             rewriter.getStringAttr(value));
      symbol = FlatSymbolRefAttr::get(rewriter.getContext(), name);
    }
    return LLVM::AddressOfOp::create(rewriter, loc, ptrType(),
                                     symbol.getValue());
  }
};

//===----------------------------------------------------------------------===//
// kv ops
//===----------------------------------------------------------------------===//

struct EmptyLowering : RuntimePattern<EmptyOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(EmptyOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(op, atSite<ExecFn::kvrt_exec_empty>(rewriter, op)());
    return success();
  }
};

struct PrefillLowering : RuntimePattern<PrefillOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(PrefillOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value views = array(rewriter, loc, adaptor.getViews(), ptrType());
    Value offsets = indexArray(rewriter, loc, adaptor.getOffsets());
    auto [hasPosition, position, label] =
        placement(rewriter, loc, adaptor.getPosition(), op.getSegment());
    replacePrefill<ExecFn::kvrt_exec_prefill>(op, adaptor, rewriter, views,
                                              offsets, adaptor.getTokens(),
                                              hasPosition, position, label);
    return success();
  }
};

/// kv.prefill_chain: the token handles and labels as stack arrays, one
/// runtime call.
struct PrefillChainLowering : RuntimePattern<PrefillChainOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(PrefillChainOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value views = array(rewriter, loc, adaptor.getViews(), ptrType());
    Value offsets = indexArray(rewriter, loc, adaptor.getOffsets());
    Value tokens = array(rewriter, loc, adaptor.getTokens(), ptrType());
    SmallVector<Value> labelValues;
    for (unsigned i = 0, e = op.getTokens().size(); i < e; ++i)
      if (FlatSymbolRefAttr segment = op.getSegmentOf(i))
        labelValues.push_back(string(rewriter, loc, segment.getValue()));
    Value labels = array(rewriter, loc, labelValues, ptrType());
    replacePrefill<ExecFn::kvrt_exec_prefill_chain>(
        op, adaptor, rewriter, views, offsets, tokens, labels,
        constI64(rewriter, loc, adaptor.getTokens().size()));
    return success();
  }
};

/// kv.load_block: the runtime fetches the block or prefills (and stores) it;
/// the forward is passed for the prefill.
struct LoadBlockLowering : RuntimePattern<LoadBlockOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(LoadBlockOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto [hasPosition, position, label] = placement(
        rewriter, op.getLoc(), adaptor.getPosition(), op.getSegment());
    rewriter.replaceOp(op,
                       atSite<ExecFn::kvrt_exec_load_block>(rewriter, op)(
                           forwardKey(rewriter, op),
                           forward(rewriter, op, ForwardEntryPoint::Prefill),
                           adaptor.getModel(), adaptor.getTokens(), hasPosition,
                           position, label));
    return success();
  }
};

struct StoreBlockLowering : RuntimePattern<StoreBlockOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(StoreBlockOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    atSite<ExecFn::kvrt_exec_store_block>(rewriter, op)(adaptor.getModel(),
                                                        adaptor.getCache());
    rewriter.eraseOp(op);
    return success();
  }
};

struct SliceLowering : RuntimePattern<SliceOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(SliceOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    rewriter.replaceOp(op, atSite<ExecFn::kvrt_exec_slice>(rewriter, op)(
                               adaptor.getCache(),
                               toI64(rewriter, loc, adaptor.getBegin()),
                               toI64(rewriter, loc, adaptor.getEnd())));
    return success();
  }
};

struct ConcatLowering : RuntimePattern<ConcatOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(ConcatOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value views = array(rewriter, loc, adaptor.getInputs(), ptrType());
    rewriter.replaceOp(
        op, atSite<ExecFn::kvrt_exec_concat>(rewriter, op)(
                views, constI64(rewriter, loc, adaptor.getInputs().size())));
    return success();
  }
};

struct RopeShiftLowering : RuntimePattern<RopeShiftOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(RopeShiftOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(op, atSite<ExecFn::kvrt_exec_rope_shift>(rewriter, op)(
                               adaptor.getCache(), toI64(rewriter, op.getLoc(),
                                                         adaptor.getDelta())));
    return success();
  }
};

struct SegmentBoundsLowering : RuntimePattern<SegmentBoundsOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(SegmentBoundsOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value zero = constI64(rewriter, loc, 0);
    Value bounds = array(rewriter, loc, {zero, zero}, i64());
    atSite<ExecFn::kvrt_exec_segment_bounds>(rewriter, op)(
        adaptor.getCache(), string(rewriter, loc, op.getSegment()), bounds);
    SmallVector<Value> results;
    for (int32_t i = 0; i < 2; ++i) {
      Value slot = LLVM::GEPOp::create(rewriter, loc, ptrType(), i64(), bounds,
                                       ArrayRef<LLVM::GEPArg>{i});
      results.push_back(toIndex(
          rewriter, loc, LLVM::LoadOp::create(rewriter, loc, i64(), slot)));
    }
    rewriter.replaceOp(op, results);
    return success();
  }
};

struct TokensLowering : RuntimePattern<TokensOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(TokensOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(
        op, atSite<ExecFn::kvrt_exec_view_tokens>(rewriter, op)(
                adaptor.getCache(),
                constI64(rewriter, op.getLoc(), staticSize(op.getType(), 0))));
    return success();
  }
};

/// kv.length, kv.start_position, kv.end_position.
template <typename Op, ExecFn F> struct ViewQueryLowering : RuntimePattern<Op> {
  using RuntimePattern<Op>::RuntimePattern;
  LogicalResult
  matchAndRewrite(Op op, typename Op::Adaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Value ctx = this->contextOf(op, rewriter);
    Value value =
        this->template call<F>(rewriter, op, ctx, adaptor.getCache()).front();
    rewriter.replaceOp(op, this->toIndex(rewriter, op.getLoc(), value));
    return success();
  }
};

struct SelectiveRecomputeLowering : RuntimePattern<SelectiveRecomputeOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(SelectiveRecomputeOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    std::optional<APFloat> fraction = op.getFraction(),
                           deviation = op.getDeviation();
    if (fraction.has_value() == deviation.has_value())
      return op.emitOpError("needs exactly one of `fraction f` and "
                            "`deviation t`");
    int32_t mode =
        fraction ? KVRT_EXEC_REPAIR_FRACTION : KVRT_EXEC_REPAIR_DEVIATION;
    double amount = (fraction ? *fraction : *deviation).convertToDouble();
    Value amountValue = arith::ConstantOp::create(
        rewriter, loc, rewriter.getF64FloatAttr(amount));
    rewriter.replaceOp(
        op, atSite<ExecFn::kvrt_exec_selective_recompute>(rewriter, op)(
                forwardKey(rewriter, op),
                forward(rewriter, op, ForwardEntryPoint::Prefill),
                adaptor.getModel(), adaptor.getCache(),
                toI64(rewriter, loc, adaptor.getBegin()),
                toI64(rewriter, loc, adaptor.getEnd()),
                constI32(rewriter, loc, mode), amountValue));
    return success();
  }
};

struct MaterializeLowering : RuntimePattern<MaterializeOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(MaterializeOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(
        op, atSite<ExecFn::kvrt_exec_materialize>(rewriter, op)(
                forwardKey(rewriter, op),
                forward(rewriter, op, ForwardEntryPoint::Materialize),
                adaptor.getModel(), adaptor.getCache()));
    return success();
  }
};

struct AttentionLowering : RuntimePattern<AttentionOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(AttentionOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value views = array(rewriter, loc, adaptor.getViews(), ptrType());
    Value offsets = indexArray(rewriter, loc, adaptor.getOffsets());
    rewriter.replaceOp(
        op, atSite<ExecFn::kvrt_exec_attention>(rewriter, op)(
                forwardKey(rewriter, op),
                forward(rewriter, op, ForwardEntryPoint::Attention),
                adaptor.getModel(), adaptor.getQuery(), views, offsets,
                constI64(rewriter, loc, adaptor.getViews().size()),
                constI64(rewriter, loc, op.getLayer()),
                toI64(rewriter, loc, adaptor.getPosition()),
                constI64(rewriter, loc, staticSize(op.getType(), 0))));
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Tokens and logits tensors, calls
//===----------------------------------------------------------------------===//

/// Dense token constants become an internal global and a handle.
struct TokenConstantLowering : RuntimePattern<arith::ConstantOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(arith::ConstantOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto dense = dyn_cast<DenseIntElementsAttr>(op.getValue());
    if (!dense || !isTokensType(op.getType()))
      return failure();
    Location loc = op.getLoc();
    int64_t n = dense.getNumElements();
    Value data;
    if (n == 0) {
      data = null(rewriter, loc);
    } else {
      std::string name = "__kvrt_tokens_" + std::to_string(state.numGlobals++);
      {
        OpBuilder::InsertionGuard guard(rewriter);
        rewriter.setInsertionPointToStart(state.module.getBody());
        LLVM::GlobalOp::create(
            rewriter, loc, LLVM::LLVMArrayType::get(i32(), n),
            /*isConstant=*/true, LLVM::Linkage::Internal, name,
            dense.reshape(RankedTensorType::get({n}, i32())));
      }
      data = LLVM::AddressOfOp::create(rewriter, loc, ptrType(), name);
    }
    rewriter.replaceOp(op, atSite<ExecFn::kvrt_exec_tokens_constant>(
                               rewriter, op)(data, constI64(rewriter, loc, n)));
    return success();
  }
};

struct TensorEmptyLowering : RuntimePattern<tensor::EmptyOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(tensor::EmptyOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto type = op.getType();
    if (!isTokensType(type))
      return rewriter.notifyMatchFailure(op, "not a token tensor");
    Location loc = op.getLoc();
    Value size = type.isDynamicDim(0)
                     ? toI64(rewriter, loc, adaptor.getDynamicSizes()[0])
                     : constI64(rewriter, loc, type.getDimSize(0));
    rewriter.replaceOp(
        op, atSite<ExecFn::kvrt_exec_tokens_empty>(rewriter, op)(size));
    return success();
  }
};

struct TensorDimLowering : RuntimePattern<tensor::DimOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(tensor::DimOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Type type = op.getSource().getType();
    if (!isHandleType(type))
      return rewriter.notifyMatchFailure(op, "not a token or logits tensor");
    Location loc = op.getLoc();
    Value source = adaptor.getSource();
    Value size;
    if (isTokensType(type))
      size = call<ExecFn::kvrt_exec_tokens_size>(
                 rewriter, op, contextOf(op, rewriter), source)
                 .front();
    else if (isLogitsType(type))
      size = atSite<ExecFn::kvrt_exec_logits_dim>(rewriter, op)(
                 source, toI64(rewriter, loc, adaptor.getIndex()))
                 .front();
    else
      size = atSite<ExecFn::kvrt_exec_tensor_dim>(rewriter, op)(
                 source, toI64(rewriter, loc, adaptor.getIndex()))
                 .front();
    rewriter.replaceOp(op, toIndex(rewriter, loc, size));
    return success();
  }
};

struct TensorCastLowering : RuntimePattern<tensor::CastOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(tensor::CastOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto type = dyn_cast<RankedTensorType>(op.getType());
    if (!type || !isHandleType(type) || isa<CacheType, ModelType>(type) ||
        !isHandleType(op.getSource().getType()))
      return rewriter.notifyMatchFailure(op, "not a token or logits tensor");
    Value source = adaptor.getSource();
    auto size = [&](unsigned i) {
      return constI64(rewriter, op.getLoc(), staticSize(type, i));
    };
    if (isTokensType(type))
      rewriter.replaceOp(op, atSite<ExecFn::kvrt_exec_tokens_cast>(
                                 rewriter, op)(source, size(0)));
    else if (isLogitsType(type))
      rewriter.replaceOp(op, atSite<ExecFn::kvrt_exec_logits_cast>(
                                 rewriter, op)(source, size(0), size(1)));
    else
      rewriter.replaceOp(op,
                         atSite<ExecFn::kvrt_exec_tensor_cast>(rewriter, op)(
                             source, size(0), size(1), size(2)));
    return success();
  }
};

/// arith.select of views or handles: a select of pointers.
struct HandleSelectLowering : RuntimePattern<arith::SelectOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(arith::SelectOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    if (!isHandleType(op.getType()))
      return failure();
    rewriter.replaceOpWithNewOp<arith::SelectOp>(op, adaptor.getCondition(),
                                                 adaptor.getTrueValue(),
                                                 adaptor.getFalseValue());
    return success();
  }
};

/// A call of a host function: counted against the call depth (a recursion
/// ends in an error, not a stack overflow) and, in a plan, as plan work.
struct HostCallLowering : RuntimePattern<func::CallOp> {
  using RuntimePattern::RuntimePattern;
  LogicalResult
  matchAndRewrite(func::CallOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Operation *callee = state.module.lookupSymbol(op.getCallee());
    if (!callee || !state.hostFuncs.contains(callee))
      return failure();
    Location loc = op.getLoc();
    SmallVector<Type> resultTypes;
    if (failed(
            getTypeConverter()->convertTypes(op.getResultTypes(), resultTypes)))
      return failure();
    Value ctx = adaptor.getOperands().front();
    Value ok = callPlain(rewriter, loc, ExecFn::kvrt_exec_call_enter,
                         {ctx, site(rewriter, op)})
                   .front();
    Value go = arith::CmpIOp::create(rewriter, loc, arith::CmpIPredicate::ne,
                                     ok, constI32(rewriter, loc, 0));
    bool plan = state.planOps.contains(op);
    if (plan)
      callPlain(rewriter, loc, ExecFn::kvrt_exec_plan_begin, {ctx});
    auto ifOp = scf::IfOp::create(rewriter, loc, resultTypes, go,
                                  /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(rewriter);
      rewriter.setInsertionPointToStart(ifOp.thenBlock());
      auto inner = func::CallOp::create(rewriter, loc, op.getCallee(),
                                        resultTypes, adaptor.getOperands());
      callPlain(rewriter, loc, ExecFn::kvrt_exec_call_leave, {ctx});
      scf::YieldOp::create(rewriter, loc, inner.getResults());
      rewriter.setInsertionPointToStart(ifOp.elseBlock());
      SmallVector<Value> zeros;
      for (Type type : resultTypes) {
        if (isa<LLVM::LLVMPointerType>(type))
          zeros.push_back(null(rewriter, loc));
        else if (isa<IntegerType, IndexType, FloatType>(type))
          zeros.push_back(arith::ConstantOp::create(
              rewriter, loc, cast<TypedAttr>(rewriter.getZeroAttr(type))));
        else
          return rewriter.notifyMatchFailure(op, "a result of unknown type");
      }
      scf::YieldOp::create(rewriter, loc, zeros);
    }
    if (plan)
      callPlain(rewriter, loc, ExecFn::kvrt_exec_plan_end, {ctx});
    rewriter.replaceOp(op, ifOp.getResults());
    return success();
  }
};

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

struct ConvertKVToRuntimePass
    : public kv::impl::ConvertKVToRuntimePassBase<ConvertKVToRuntimePass> {
  void runOnOperation() override;

  /// Finds the host functions, checks what cannot be lowered, adds the
  /// context argument and numbers the sites.
  LogicalResult prepare(LoweringState &state);
  /// `_kvrt_entry_NAME` for each public host function whose types it can
  /// pass in 64-bit slots.
  void buildEntryWrappers(LoweringState &state);
};

LogicalResult ConvertKVToRuntimePass::prepare(LoweringState &state) {
  ModuleOp module = state.module;
  // Host functions: those with a body that touch kv values or token and
  // logits tensors, and those that call them.
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    bool host = hasHostSignature(func);
    func.walk([&](Operation *op) {
      if (isa<KVDialect>(op->getDialect()) || usesHostTypes(op))
        host = true;
    });
    if (host)
      state.hostFuncs.insert(func);
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal() || state.hostFuncs.contains(func))
        continue;
      func.walk([&](func::CallOp call) {
        if (Operation *callee = module.lookupSymbol(call.getCallee()))
          if (state.hostFuncs.contains(callee) && !state.hostFuncs.count(func))
            changed = state.hostFuncs.insert(func).second;
      });
    }
  }

  bool ok = true;
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal()) {
      if (hasHostSignature(func)) {
        // A declaration may be defined elsewhere only if nothing here calls
        // it: its context argument would be missing.
        std::optional<SymbolTable::UseRange> uses =
            SymbolTable::getSymbolUses(func, module);
        if (uses && !uses->empty()) {
          func.emitOpError()
              << "is called but has no body: convert-kv-to-runtime can only "
                 "call host functions defined in the module";
          ok = false;
        }
      }
      continue;
    }
    if (!state.hostFuncs.contains(func))
      continue;
    func.walk([&](Operation *op) {
      if (isa<EditOp, ComposeOp, LogitsOp>(op)) {
        op->emitOpError() << "has no runtime lowering: run kv-optimize first, "
                             "which plans it into primitives";
        ok = false;
      } else if (std::optional<ForwardEntryPoint> entry =
                     forwardEntryPointOf(op)) {
        std::string name = forwardEntryOf(op, *entry);
        if (!module.lookupSymbol(name)) {
          op->emitOpError()
              << "needs the forward of its model, @" << name << " ["
              << forwardKeyOf(op)
              << "], which the module lacks: run convert-kv-to-cpu or "
                 "convert-kv-to-gpu first (kv-lower-to-cpu and "
                 "kv-lower-to-nvvm do)";
          ok = false;
        }
      } else if (isa<tensor::TensorDialect>(op->getDialect()) &&
                 !isa<tensor::EmptyOp, tensor::DimOp, tensor::CastOp>(op) &&
                 usesHostTypes(op)) {
        op->emitOpError() << "on token or logits tensors has no runtime "
                             "lowering (tensor.dim, tensor.cast and "
                             "tensor.empty have)";
        ok = false;
      }
    });
  }
  if (!ok)
    return failure();

  // The context argument, the sites and the plan.
  Type ptr = LLVM::LLVMPointerType::get(&getContext());
  SmallVector<func::FuncOp> hostFuncs = state.hostFuncsInOrder();
  for (func::FuncOp func : hostFuncs)
    if (failed(func.insertArgument(0, ptr, {}, func.getLoc())))
      return failure();
  for (func::FuncOp func : hostFuncs) {
    Value ctx = func.getArgument(0);
    DenseSet<Value> planValues;
    func.walk([&](Operation *inner) {
      if (inner == func.getOperation() || isa<ContextOp, SegmentOp>(inner))
        return;
      // Plan-ness flows through every op, index arithmetic included.
      bool plan = isPlanLocation(inner->getLoc()) ||
                  llvm::any_of(inner->getOperands(),
                               [&](Value v) { return planValues.contains(v); });
      if (plan) {
        state.planOps.insert(inner);
        planValues.insert(inner->result_begin(), inner->result_end());
      }
      bool needsSite =
          isa<KVDialect, tensor::TensorDialect>(inner->getDialect()) ||
          (isa<arith::ConstantOp>(inner) && usesHostTypes(inner));
      if (auto call = dyn_cast<func::CallOp>(inner)) {
        Operation *callee = module.lookupSymbol(call.getCallee());
        if (callee && state.hostFuncs.contains(callee)) {
          call->insertOperands(0, ctx);
          needsSite = true;
        }
      }
      if (!needsSite)
        return;
      state.sites[inner] = state.siteLocs.size();
      state.siteLocs.push_back(inner->getLoc());
    });
  }
  return success();
}

void ConvertKVToRuntimePass::buildEntryWrappers(LoweringState &state) {
  MLIRContext *context = &getContext();
  Type ptr = LLVM::LLVMPointerType::get(context);
  Type i64 = IntegerType::get(context, 64);
  OpBuilder builder(context);
  for (func::FuncOp func : state.hostFuncsInOrder()) {
    if (!func.isPublic())
      continue;
    FunctionType type = func.getFunctionType();
    auto slotType = [](Type t) {
      return isa<LLVM::LLVMPointerType, IndexType>(t) ||
             (isa<IntegerType>(t) && t.getIntOrFloatBitWidth() <= 64);
    };
    if (!llvm::all_of(type.getInputs().drop_front(), slotType) ||
        !llvm::all_of(type.getResults(), slotType))
      continue;
    Location loc = func.getLoc();
    builder.setInsertionPointAfter(func);
    auto wrapper = func::FuncOp::create(
        builder, loc, (kEntryPrefix + func.getName()).str(),
        builder.getFunctionType({ptr, ptr, ptr}, {}));
    Block *body = wrapper.addEntryBlock();
    builder.setInsertionPointToStart(body);
    Value args = body->getArgument(1), results = body->getArgument(2);
    SmallVector<Value> operands = {body->getArgument(0)};
    for (auto [i, t] : llvm::enumerate(type.getInputs().drop_front())) {
      Value slot = LLVM::GEPOp::create(builder, loc, ptr, i64, args,
                                       ArrayRef<LLVM::GEPArg>{int32_t(i)});
      if (isa<LLVM::LLVMPointerType>(t)) {
        operands.push_back(LLVM::LoadOp::create(builder, loc, ptr, slot));
        continue;
      }
      Value word = LLVM::LoadOp::create(builder, loc, i64, slot);
      if (isa<IndexType>(t))
        operands.push_back(arith::IndexCastOp::create(builder, loc, t, word));
      else if (t.getIntOrFloatBitWidth() < 64)
        operands.push_back(arith::TruncIOp::create(builder, loc, t, word));
      else
        operands.push_back(word);
    }
    auto call = func::CallOp::create(builder, loc, func, operands);
    for (auto [i, value] : llvm::enumerate(call.getResults())) {
      Value slot = LLVM::GEPOp::create(builder, loc, ptr, i64, results,
                                       ArrayRef<LLVM::GEPArg>{int32_t(i)});
      Type t = value.getType();
      Value stored = value;
      if (isa<IndexType>(t))
        stored = arith::IndexCastOp::create(builder, loc, i64, value);
      else if (t.isInteger(1))
        stored = arith::ExtUIOp::create(builder, loc, i64, value);
      else if (isa<IntegerType>(t) && t.getIntOrFloatBitWidth() < 64)
        stored = arith::ExtSIOp::create(builder, loc, i64, value);
      LLVM::StoreOp::create(builder, loc, stored, slot);
    }
    func::ReturnOp::create(builder, loc);
    // The wrapper is the function's interface now; the function itself is
    // internal, so that its name (often `main`) cannot clash with a symbol of
    // the process that loads the compiled program.
    func.setPrivate();
    func->setAttr("llvm.linkage",
                  LLVM::LinkageAttr::get(context, LLVM::Linkage::Internal));
  }
}

void ConvertKVToRuntimePass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *context = &getContext();
  LoweringState state;
  state.module = module;
  if (failed(prepare(state)))
    return signalPassFailure();
  if (state.hostFuncs.empty()) {
    // Nothing to lower; contexts are metadata.
    for (auto ctxOp : llvm::make_early_inc_range(module.getOps<ContextOp>()))
      ctxOp.erase();
    module->removeAttr(kWeightFormatsAttrName);
    return;
  }

  HostTypeConverter converter(context);
  ConversionTarget target(*context);
  target.addIllegalDialect<KVDialect>();
  target.addLegalOp<ContextOp, SegmentOp>();
  target.addLegalDialect<LLVM::LLVMDialect, arith::ArithDialect,
                         scf::SCFDialect, cf::ControlFlowDialect>();
  target.addLegalOp<func::ConstantOp>();
  target.addDynamicallyLegalOp<func::FuncOp>([&](func::FuncOp func) {
    return converter.isSignatureLegal(func.getFunctionType()) &&
           converter.isLegal(&func.getBody());
  });
  target.addDynamicallyLegalOp<func::CallOp>([&](func::CallOp call) {
    Operation *callee = module.lookupSymbol(call.getCallee());
    if (callee && state.hostFuncs.contains(callee) &&
        state.sites.contains(call))
      return false;
    return converter.isLegal(call);
  });
  target.addDynamicallyLegalOp<func::ReturnOp, cf::BranchOp, cf::CondBranchOp>(
      [&](Operation *op) { return converter.isLegal(op); });
  target.addDynamicallyLegalOp<arith::ConstantOp, arith::SelectOp>(
      [&](Operation *op) { return !usesHostTypes(op); });
  target.addDynamicallyLegalDialect<tensor::TensorDialect>(
      [&](Operation *op) { return !usesHostTypes(op); });

  RewritePatternSet patterns(context);
  patterns
      .add<EmptyLowering, PrefillLowering, PrefillChainLowering,
           LoadBlockLowering, StoreBlockLowering, SliceLowering, ConcatLowering,
           RopeShiftLowering, SegmentBoundsLowering, TokensLowering,
           SelectiveRecomputeLowering, MaterializeLowering, AttentionLowering,
           TokenConstantLowering, TensorEmptyLowering, TensorDimLowering,
           TensorCastLowering, HandleSelectLowering, HostCallLowering>(
          converter, context, state);
  patterns
      .add<ViewQueryLowering<LengthOp, ExecFn::kvrt_exec_length>,
           ViewQueryLowering<StartPositionOp, ExecFn::kvrt_exec_start_position>,
           ViewQueryLowering<EndPositionOp, ExecFn::kvrt_exec_end_position>>(
          converter, context, state);
  populateFunctionOpInterfaceTypeConversionPattern<func::FuncOp>(patterns,
                                                                 converter);
  populateCallOpTypeConversionPattern(patterns, converter);
  populateReturnOpTypeConversionPattern(patterns, converter);
  populateBranchOpInterfaceTypeConversionPattern(patterns, converter);

  if (failed(applyPartialConversion(module, target, std::move(patterns))))
    return signalPassFailure();

  for (auto ctxOp : llvm::make_early_inc_range(module.getOps<ContextOp>()))
    ctxOp.erase();
  module->removeAttr(kWeightFormatsAttrName);
  // kv.* argument attributes (kv.name, kv.sample_length) mean nothing to
  // LLVM, whose translation warns about them.
  for (auto func : module.getOps<func::FuncOp>()) {
    if (!state.hostFuncs.contains(func))
      continue;
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
      DictionaryAttr attrs = func.getArgAttrDict(i);
      if (!attrs)
        continue;
      SmallVector<NamedAttribute> kept;
      for (NamedAttribute attr : attrs)
        if (!attr.getName().getValue().starts_with("kv."))
          kept.push_back(attr);
      func.setArgAttrs(i, kept);
    }
  }
  buildEntryWrappers(state);
  module->setAttr(kExecSitesAttrName, ArrayAttr::get(context, state.siteLocs));
  numSites = state.siteLocs.size();
  numFunctions = state.hostFuncs.size();
}

} // namespace

bool mlir::kv::isPlanLocation(Location loc) {
  if (auto fused = dyn_cast<FusedLoc>(loc)) {
    if (auto tag = dyn_cast_or_null<StringAttr>(fused.getMetadata()))
      if (tag.getValue() == kPlanLocationTag)
        return true;
    return llvm::any_of(fused.getLocations(), isPlanLocation);
  }
  if (auto name = dyn_cast<NameLoc>(loc))
    return isPlanLocation(name.getChildLoc());
  if (auto site = dyn_cast<CallSiteLoc>(loc))
    return isPlanLocation(site.getCallee());
  return false;
}
