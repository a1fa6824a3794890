//===- ForwardEmitter.cpp - Builders of the model forward -------*- C++ -*-===//

#include "passes/Conversion/Forward/ForwardEmitter.h"
#include "runtime/core/ForwardABI.h"
#include "runtime/core/ModelConfig.h"

#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include "llvm/ADT/bit.h"

#include <cmath>
#include <numeric>

using namespace mlir;
using namespace mlir::kv;

ForwardEmitter::ForwardEmitter(ModuleOp module, const kvrt_model_config &config,
                               StringRef prefix, kvrt_kv_dtype dtype)
    : b(module.getLoc(), module.getContext()), module(module), config(config),
      prefix(prefix.str()), kvDtype(dtype) {
  b.setInsertionPointToEnd(module.getBody());
  dim = config.dim;
  hidden = config.hidden_dim;
  layers = config.n_layers;
  heads = config.n_heads;
  kvHeads = config.n_kv_heads;
  group = heads / kvHeads;
  vocab = config.vocab_size;
  headSize = kvir::headSize(config);
  half = headSize / 2;
  kvDim = kvir::kvDim(config);
}

std::string ForwardEmitter::name(StringRef what) const {
  return prefix + "_" + what.str();
}

//===----------------------------------------------------------------------===//
// Types, constants and arithmetic shorthands
//===----------------------------------------------------------------------===//

MemRefType ForwardEmitter::buffer(Type element) {
  return MemRefType::get({ShapedType::kDynamic}, element);
}

MemRefType ForwardEmitter::table(int64_t columns) {
  return MemRefType::get({ShapedType::kDynamic, columns}, i64());
}

Type ForwardEmitter::llvmType(Type type) {
  Type converted = LLVMTypeConverter(b.getContext()).convertType(type);
  assert(converted && "a type without an LLVM lowering");
  return converted;
}

Value ForwardEmitter::cIndex(int64_t value) {
  return arith::ConstantIndexOp::create(b, value);
}
Value ForwardEmitter::cI64(int64_t value) {
  return arith::ConstantIntOp::create(b, value, 64);
}
Value ForwardEmitter::cI32(int64_t value) {
  return arith::ConstantIntOp::create(b, value, 32);
}
Value ForwardEmitter::cF32(float value) {
  return arith::ConstantOp::create(b, b.getF32FloatAttr(value));
}
Value ForwardEmitter::cF32Bits(uint32_t bits) {
  return cF32(llvm::bit_cast<float>(bits));
}
Value ForwardEmitter::cF64(double value) {
  return arith::ConstantOp::create(b, b.getF64FloatAttr(value));
}
Value ForwardEmitter::splatF32(int64_t lanes, float value) {
  return arith::ConstantOp::create(
      b, DenseElementsAttr::get(vec(lanes, f32()), b.getF32FloatAttr(value)));
}
Type ForwardEmitter::kvElement() {
  switch (kvDtype) {
  case KVRT_KV_F16:
    return b.getF16Type();
  case KVRT_KV_BF16:
    return b.getBF16Type();
  case KVRT_KV_F32:
    break;
  }
  return f32();
}

namespace {

/// `type` (a scalar or a vector) with `element` as its element type.
Type withElement(Type type, Type element) {
  if (auto vector = dyn_cast<VectorType>(type))
    return vector.clone(element);
  return element;
}

/// A constant of integer `type` (scalar or vector): `value` in every lane.
Value intConstant(ImplicitLocOpBuilder &b, Type type, int64_t value) {
  Type element = getElementTypeOrSelf(type);
  auto attr = b.getIntegerAttr(element, value);
  if (auto vector = dyn_cast<VectorType>(type))
    return arith::ConstantOp::create(b, DenseElementsAttr::get(vector, attr));
  return arith::ConstantOp::create(b, attr);
}

} // namespace

Value ForwardEmitter::toKV(Value value) {
  Type target = withElement(value.getType(), kvElement());
  switch (kvDtype) {
  case KVRT_KV_F32:
    return value;
  case KVRT_KV_F16:
    return arith::TruncFOp::create(b, target, value);
  case KVRT_KV_BF16:
    break;
  }
  // bits + 0x7fff + (bit 16 of bits), the top half: round to nearest even.
  Type wide = withElement(value.getType(), i32());
  Type narrow = withElement(value.getType(), b.getI16Type());
  Value bits = arith::BitcastOp::create(b, wide, value);
  Value top = arith::ShRUIOp::create(b, bits, intConstant(b, wide, 16));
  Value lsb = arith::AndIOp::create(b, top, intConstant(b, wide, 1));
  Value bias = arith::AddIOp::create(b, lsb, intConstant(b, wide, 0x7fff));
  Value rounded = arith::ShRUIOp::create(
      b, arith::AddIOp::create(b, bits, bias), intConstant(b, wide, 16));
  Value quiet = arith::OrIOp::create(b, top, intConstant(b, wide, 0x40));
  Value isNaN =
      arith::CmpFOp::create(b, arith::CmpFPredicate::UNO, value, value);
  Value chosen = arith::SelectOp::create(b, isNaN, quiet, rounded);
  return arith::BitcastOp::create(b, target,
                                  arith::TruncIOp::create(b, narrow, chosen));
}

Value ForwardEmitter::fromKV(Value value) {
  Type target = withElement(value.getType(), f32());
  switch (kvDtype) {
  case KVRT_KV_F32:
    return value;
  case KVRT_KV_F16:
    return arith::ExtFOp::create(b, target, value);
  case KVRT_KV_BF16:
    break;
  }
  return fromBF16(value);
}

Value ForwardEmitter::fromBF16(Value value) {
  // A bfloat16 is the top half of the f32 with the same value.
  Type target = withElement(value.getType(), f32());
  Type wide = withElement(value.getType(), i32());
  Type narrow = withElement(value.getType(), b.getI16Type());
  Value bits = arith::ExtUIOp::create(
      b, wide, arith::BitcastOp::create(b, narrow, value));
  return arith::BitcastOp::create(
      b, target, arith::ShLIOp::create(b, bits, intConstant(b, wide, 16)));
}

Value ForwardEmitter::splatI32(int64_t lanes, int32_t value) {
  return arith::ConstantOp::create(
      b, DenseElementsAttr::get(vec(lanes, i32()), b.getI32IntegerAttr(value)));
}

Value ForwardEmitter::add(Value a, Value c) {
  return arith::AddIOp::create(b, a, c);
}
Value ForwardEmitter::sub(Value a, Value c) {
  return arith::SubIOp::create(b, a, c);
}
Value ForwardEmitter::mul(Value a, Value c) {
  return arith::MulIOp::create(b, a, c);
}
Value ForwardEmitter::divu(Value a, Value c) {
  return arith::DivUIOp::create(b, a, c);
}
Value ForwardEmitter::remu(Value a, Value c) {
  return arith::RemUIOp::create(b, a, c);
}
Value ForwardEmitter::minu(Value a, Value c) {
  return arith::MinUIOp::create(b, a, c);
}
Value ForwardEmitter::maxu(Value a, Value c) {
  return arith::MaxUIOp::create(b, a, c);
}
Value ForwardEmitter::mins(Value a, Value c) {
  return arith::MinSIOp::create(b, a, c);
}
Value ForwardEmitter::maxs(Value a, Value c) {
  return arith::MaxSIOp::create(b, a, c);
}
Value ForwardEmitter::cmp(arith::CmpIPredicate predicate, Value a, Value c) {
  return arith::CmpIOp::create(b, predicate, a, c);
}
Value ForwardEmitter::select(Value condition, Value a, Value c) {
  return arith::SelectOp::create(b, condition, a, c);
}
Value ForwardEmitter::toIndex(Value value) {
  return arith::IndexCastOp::create(b, index(), value);
}
Value ForwardEmitter::toI64(Value value) {
  return arith::IndexCastOp::create(b, i64(), value);
}
Value ForwardEmitter::toI32(Value value) {
  return arith::IndexCastOp::create(b, i32(), value);
}
Value ForwardEmitter::load(Value memref, ValueRange indices) {
  return memref::LoadOp::create(b, memref, indices);
}
void ForwardEmitter::store(Value value, Value memref, ValueRange indices) {
  memref::StoreOp::create(b, value, memref, indices);
}

//===----------------------------------------------------------------------===//
// Structure
//===----------------------------------------------------------------------===//

func::FuncOp ForwardEmitter::beginFunction(StringRef functionName,
                                           TypeRange arguments, bool isPublic) {
  b.setInsertionPointToEnd(module.getBody());
  auto func =
      func::FuncOp::create(b, functionName, b.getFunctionType(arguments, {}));
  // Only the entry points are visible outside the module: everything else is
  // internal, for the optimiser and so that no name can clash with a symbol
  // of the process that loads the compiled program.
  if (!isPublic) {
    func.setPrivate();
    func->setAttr("llvm.linkage", LLVM::LinkageAttr::get(
                                      b.getContext(), LLVM::Linkage::Internal));
  }
  b.setInsertionPointToStart(func.addEntryBlock());
  return func;
}

void ForwardEmitter::finishFunction() {
  func::ReturnOp::create(b);
  b.setInsertionPointToEnd(module.getBody());
}

void ForwardEmitter::forLoop(Value lb, Value ub, Value step,
                             function_ref<void(Value iv)> body) {
  auto loop = scf::ForOp::create(b, lb, ub, step);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(loop.getBody()->getTerminator());
  body(loop.getInductionVar());
}

SmallVector<Value> ForwardEmitter::forLoop(
    Value lb, Value ub, Value step, ValueRange inits,
    function_ref<SmallVector<Value>(Value iv, ValueRange iters)> body) {
  auto loop = scf::ForOp::create(b, lb, ub, step, inits);
  // Without carried values the builder has put in a yield: ours replaces it.
  if (inits.empty())
    loop.getBody()->getTerminator()->erase();
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(loop.getBody());
    SmallVector<Value> yielded =
        body(loop.getInductionVar(), loop.getRegionIterArgs());
    scf::YieldOp::create(b, yielded);
  }
  return SmallVector<Value>(loop.getResults());
}

void ForwardEmitter::ifThen(Value condition, function_ref<void()> then) {
  auto op = scf::IfOp::create(b, condition, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(op.thenBlock()->getTerminator());
  then();
}

void ForwardEmitter::ifElse(Value condition, function_ref<void()> then,
                            function_ref<void()> otherwise) {
  auto op = scf::IfOp::create(b, condition, /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(op.thenBlock()->getTerminator());
  then();
  b.setInsertionPoint(op.elseBlock()->getTerminator());
  otherwise();
}

SmallVector<Value>
ForwardEmitter::ifThenElse(Value condition, TypeRange types,
                           function_ref<SmallVector<Value>()> then,
                           function_ref<SmallVector<Value>()> otherwise) {
  auto op = scf::IfOp::create(b, types, condition, /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(op.thenBlock());
    scf::YieldOp::create(b, then());
    b.setInsertionPointToStart(op.elseBlock());
    scf::YieldOp::create(b, otherwise());
  }
  return SmallVector<Value>(op.getResults());
}

//===----------------------------------------------------------------------===//
// The model's math
//===----------------------------------------------------------------------===//

std::pair<Value, Value> ForwardEmitter::ropePair(Value i) {
  // The IR form of kvir::ropePair (runtime/core/ModelConfig.h). With partial
  // rotary the pairs past the rotary ones are (2i, 2i + 1), whatever the
  // layout: their frequency is 0, they pass through.
  int64_t rotaryPairs = kvir::ropeDims(config) / 2;
  auto interleaved = [&]() -> std::pair<Value, Value> {
    Value a2 = mul(i, cIndex(2));
    return {a2, add(a2, cIndex(1))};
  };
  switch (config.rope_layout) {
  case KVRT_ROPE_INTERLEAVED:
    return interleaved();
  case KVRT_ROPE_HALF: {
    std::pair<Value, Value> pair = {i, add(i, cIndex(rotaryPairs))};
    if (rotaryPairs == half)
      return pair;
    std::pair<Value, Value> passThrough = interleaved();
    Value rotary = cmp(arith::CmpIPredicate::ult, i, cIndex(rotaryPairs));
    return {select(rotary, pair.first, passThrough.first),
            select(rotary, pair.second, passThrough.second)};
  }
  }
  llvm_unreachable("unknown RoPE layout");
}

std::pair<Value, Value> ForwardEmitter::ropeCosSin(Value pos, Value i) {
  // The pairs' frequencies are the config's, so they are computed here, by
  // kvir::ropeFrequency itself (the oracle's definition: pow, the pair's
  // divisor, 0 past the rotary pairs), not by a pow in every table the
  // generated code builds.
  SmallVector<double> frequencies;
  for (int64_t j = 0; j < half; ++j)
    frequencies.push_back(kvir::ropeFrequency(config, int32_t(j)));
  auto type = VectorType::get({half}, f64());
  Value table = arith::ConstantOp::create(
      b, DenseElementsAttr::get(type, ArrayRef<double>(frequencies)));
  Value freq = vector::ExtractOp::create(b, table, ArrayRef<OpFoldResult>{i});
  Value p = arith::SIToFPOp::create(b, f64(), pos);
  Value angle = arith::MulFOp::create(b, p, freq);
  return {math::CosOp::create(b, angle), math::SinOp::create(b, angle)};
}

std::pair<Value, Value> ForwardEmitter::rotate(Value a, Value c, Value cs,
                                               Value sn) {
  Value da = arith::ExtFOp::create(b, f64(), a);
  Value db = arith::ExtFOp::create(b, f64(), c);
  Value ac = arith::MulFOp::create(b, da, cs);
  Value bs = arith::MulFOp::create(b, db, sn);
  Value as = arith::MulFOp::create(b, da, sn);
  Value bc = arith::MulFOp::create(b, db, cs);
  Value ra = arith::SubFOp::create(b, ac, bs);
  Value rb = arith::AddFOp::create(b, as, bc);
  return {arith::TruncFOp::create(b, f32(), ra),
          arith::TruncFOp::create(b, f32(), rb)};
}

PageStrides ForwardEmitter::pageStrides(Value pageTokens) {
  PageStrides s;
  s.pageTokens = pageTokens;
  s.kv = mul(pageTokens, cIndex(headSize));
  s.head = mul(s.kv, cIndex(2));
  s.layer = mul(s.head, cIndex(kvHeads));
  s.page = mul(s.layer, cIndex(layers));
  return s;
}

Value ForwardEmitter::headBase(const PageStrides &strides, Value pageIdValue,
                               Value layer, Value kvHead) {
  Value pageBase = mul(pageIdValue, strides.page);
  Value layerBase = add(pageBase, mul(layer, strides.layer));
  return add(layerBase, mul(kvHead, strides.head));
}

Value ForwardEmitter::pageId(Value pages, Value pageOffset, Value pageIndex) {
  return toIndex(load(pages, add(pageOffset, pageIndex)));
}

RunRow ForwardEmitter::loadRun(Value runs, Value r) {
  auto column = [&](int64_t c) { return load(runs, {r, cIndex(c)}); };
  return {column(KVRT_RUN_PAGE_OFFSET), column(KVRT_RUN_SLOT_BEGIN),
          column(KVRT_RUN_TOKENS), column(KVRT_RUN_BASE_POS),
          column(KVRT_RUN_DELTA)};
}

Value ForwardEmitter::visibleKeys(Value m, const RunRow &run) {
  Value rel = sub(sub(m, run.basePos), run.delta);
  Value count = add(rel, cI64(1));
  return mins(maxs(count, cI64(0)), run.nTokens);
}

ForwardEmitter::SoftmaxStep ForwardEmitter::softmaxRescale(Value oldMax,
                                                           Value candidate,
                                                           bool skipUnchanged) {
  Value newMax = arith::MaxNumFOp::create(b, oldMax, candidate);
  Value unseen = arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, newMax,
                                       cF32Bits(0xFF800000u));
  Value shift = select(unseen, cF32(0.0f), newMax);
  Value diff = arith::SubFOp::create(b, oldMax, shift);
  if (!skipUnchanged)
    return {newMax, shift, math::ExpOp::create(b, diff)};
  Value unchanged =
      arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, diff, cF32(0.0f));
  Value factor = ifThenElse(
                     unchanged, {f32()},
                     [&]() -> SmallVector<Value> { return {cF32(1.0f)}; },
                     [&]() -> SmallVector<Value> {
                       return {math::ExpOp::create(b, diff)};
                     })
                     .front();
  return {newMax, shift, factor};
}

Value ForwardEmitter::softmaxNormalizer(Value sum) {
  Value positive =
      arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, sum, cF32(0.0f));
  Value inverse = arith::DivFOp::create(b, cF32(1.0f), sum);
  return select(positive, inverse, cF32(0.0f));
}

Value ForwardEmitter::rmsScale(Value sumSquares) {
  Value mean = arith::DivFOp::create(b, sumSquares, cF64(double(dim)));
  Value shifted = arith::AddFOp::create(b, mean, cF64(config.rms_eps));
  Value root = math::SqrtOp::create(b, shifted);
  return arith::DivFOp::create(b, cF64(1.0), root);
}

Value ForwardEmitter::rmsApply(Value x, Value weight, Value scale) {
  Value xd = arith::ExtFOp::create(b, f64(), x);
  Value wd = arith::ExtFOp::create(b, f64(), weight);
  Value scaled = arith::MulFOp::create(b, xd, scale);
  Value weighted = arith::MulFOp::create(b, scaled, wd);
  return arith::TruncFOp::create(b, f32(), weighted);
}

Value ForwardEmitter::swiglu(Value h, Value g) {
  Value negated = arith::NegFOp::create(b, h);
  Value e = math::ExpOp::create(b, negated);
  Value denominator = arith::AddFOp::create(b, cF32(1.0f), e);
  Value silu = arith::DivFOp::create(b, h, denominator);
  return arith::MulFOp::create(b, silu, g);
}

Value ForwardEmitter::scoreScale() {
  return cF32(static_cast<float>(1.0 / std::sqrt(double(headSize))));
}

//===----------------------------------------------------------------------===//
// Weights of every format
//===----------------------------------------------------------------------===//

Value ForwardEmitter::f32View(Value bytes, Value offset, Value size) {
  return memref::ViewOp::create(b, buffer(f32()), bytes, offset,
                                ValueRange{size});
}

Value ForwardEmitter::loadU8(Value bytes, Value at) {
  return arith::ExtUIOp::create(b, i32(), load(bytes, at));
}

Value ForwardEmitter::loadF16(Value bytes, Value at) {
  Value lo = loadU8(bytes, at);
  Value hi = loadU8(bytes, add(at, cIndex(1)));
  Value bits =
      arith::OrIOp::create(b, lo, arith::ShLIOp::create(b, hi, cI32(8)));
  Value half = arith::BitcastOp::create(
      b, b.getF16Type(), arith::TruncIOp::create(b, b.getI16Type(), bits));
  return arith::ExtFOp::create(b, f32(), half);
}

ForwardEmitter::Groups ForwardEmitter::groupsOf(kvrt_weight_format format) {
  switch (format) {
  case KVRT_WEIGHT_Q8_0:
    return {1, 32};
  case KVRT_WEIGHT_Q4_0:
    return {2, 16};
  case KVRT_WEIGHT_Q4_K:
  case KVRT_WEIGHT_Q5_K:
    return {8, 32};
  case KVRT_WEIGHT_Q6_K:
    return {16, 16};
  case KVRT_WEIGHT_F32:
  case KVRT_WEIGHT_F16:
  case KVRT_WEIGHT_BF16:
    break;
  }
  return {1, 1};
}

namespace {

/// `v` (i32) as f32.
Value toF32(ForwardEmitter &e, Value v) {
  return arith::SIToFPOp::create(e.b, e.f32(), v);
}

Value shr(ForwardEmitter &e, Value v, Value bits) {
  return arith::ShRUIOp::create(e.b, v, bits);
}

Value andBits(ForwardEmitter &e, Value v, int64_t mask) {
  return arith::AndIOp::create(e.b, v, e.cI32(mask));
}

} // namespace

std::pair<Value, Value> ForwardEmitter::groupScale(kvrt_weight_format format,
                                                   Value bytes, Value block,
                                                   Value g) {
  switch (format) {
  case KVRT_WEIGHT_Q8_0:
  case KVRT_WEIGHT_Q4_0:
    return {loadF16(bytes, block), Value()};
  case KVRT_WEIGHT_Q4_K:
  case KVRT_WEIGHT_Q5_K: {
    // kvrt::scaleMinK4: sub-block g < 4 in the low 6 bits of bytes g and
    // g + 4 of the scales; g >= 4 in the nibbles of byte g + 4 with the top
    // 2 bits of bytes g - 4 and g. Both computed, one selected.
    Value scales = add(block, cIndex(4));
    Value low = cmp(arith::CmpIPredicate::ult, g, cIndex(4));
    Value gLow = select(low, g, cIndex(0));
    Value gHigh = select(low, cIndex(4), g);
    Value sLow = andBits(*this, loadU8(bytes, add(scales, gLow)), 63);
    Value mLow =
        andBits(*this, loadU8(bytes, add(scales, add(gLow, cIndex(4)))), 63);
    Value packed = loadU8(bytes, add(scales, add(gHigh, cIndex(4))));
    Value topS =
        shr(*this, loadU8(bytes, add(scales, sub(gHigh, cIndex(4)))), cI32(6));
    Value topM = shr(*this, loadU8(bytes, add(scales, gHigh)), cI32(6));
    Value four = cI32(4);
    Value sHigh = arith::OrIOp::create(b, andBits(*this, packed, 0xF),
                                       arith::ShLIOp::create(b, topS, four));
    Value mHigh = arith::OrIOp::create(b, shr(*this, packed, four),
                                       arith::ShLIOp::create(b, topM, four));
    Value sc = select(low, sLow, sHigh), m = select(low, mLow, mHigh);
    Value d = loadF16(bytes, block),
          dmin = loadF16(bytes, add(block, cIndex(2)));
    return {arith::MulFOp::create(b, d, toF32(*this, sc)),
            arith::MulFOp::create(b, dmin, toF32(*this, m))};
  }
  case KVRT_WEIGHT_Q6_K: {
    Value d = loadF16(bytes, add(block, cIndex(208)));
    Value sc = arith::ExtSIOp::create(
        b, i32(), load(bytes, add(add(block, cIndex(192)), g)));
    return {arith::MulFOp::create(b, d, toF32(*this, sc)), Value()};
  }
  case KVRT_WEIGHT_F32:
  case KVRT_WEIGHT_F16:
  case KVRT_WEIGHT_BF16:
    break;
  }
  llvm_unreachable("groupScale of a format without blocks");
}

Value ForwardEmitter::kQuantScalesMinsBytes(Value bytes,
                                            ArrayRef<Value> blocks) {
  // From the 12 bytes s of the scales (and 4 bytes after them, unused):
  // sc_g = s[g] & 63 (g < 4), s[g + 4] & 15 | (s[g - 4] >> 6) << 4 (g >= 4);
  // m_g = s[g + 4] & 63 (g < 4), s[g + 4] >> 4 | (s[g] >> 6) << 4 (g >= 4).
  int64_t n = blocks.size();
  VectorType lanes = vec(16 * n, byte());
  Value s;
  for (Value block : blocks) {
    Value one = vector::LoadOp::create(b, vec(16, byte()), bytes,
                                       ValueRange{add(block, cIndex(4))});
    if (!s) {
      s = one;
      continue;
    }
    SmallVector<int64_t> order(cast<VectorType>(s.getType()).getNumElements() +
                               16);
    std::iota(order.begin(), order.end(), 0);
    s = vector::ShuffleOp::create(b, s, one, order);
  }
  // A 16-byte pattern in every block's lane.
  auto perLane = [&](ArrayRef<int64_t> order) {
    SmallVector<int64_t> all;
    for (int64_t lane = 0; lane < n; ++lane)
      for (int64_t i : order)
        all.push_back(16 * lane + i);
    return all;
  };
  auto constants = [&](ArrayRef<int8_t> values) -> Value {
    SmallVector<int8_t> all;
    for (int64_t lane = 0; lane < n; ++lane)
      all.append(values.begin(), values.end());
    return arith::ConstantOp::create(
        b, DenseElementsAttr::get(lanes, ArrayRef<int8_t>(all)));
  };
  Value lows = vector::ShuffleOp::create(
      b, s, s, perLane({0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11}));
  Value tops = vector::ShuffleOp::create(
      b, s, s, perLane({0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7}));
  Value lowBits = arith::OrIOp::create(
      b,
      arith::AndIOp::create(b, lows,
                            constants({63, 63, 63, 63, 15, 15, 15, 15, 63, 63,
                                       63, 63, 0, 0, 0, 0})),
      arith::AndIOp::create(
          b,
          arith::ShRUIOp::create(
              b, lows,
              constants({4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4})),
          constants({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15})));
  Value topBits = arith::AndIOp::create(
      b,
      arith::ShRUIOp::create(
          b, tops, constants({2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2})),
      constants({0, 0, 0, 0, 48, 48, 48, 48, 0, 0, 0, 0, 48, 48, 48, 48}));
  return arith::OrIOp::create(b, lowBits, topBits);
}

Value ForwardEmitter::kQuantScalesMins(Value bytes, Value block) {
  // kQuantScalesMinsBytes in 16 lanes [A g < 4 | A g >= 4 | B g < 4 | B g >=
  // 4], times [d x 8 | dmin x 8].
  Value values = arith::UIToFPOp::create(
      b, vec(16, f32()),
      arith::ExtUIOp::create(b, vec(16, i32()),
                             kQuantScalesMinsBytes(bytes, block)));
  VectorType v8 = vec(8, f32());
  Value d = vector::BroadcastOp::create(b, v8, loadF16(bytes, block));
  Value dmin =
      vector::BroadcastOp::create(b, v8, loadF16(bytes, add(block, cIndex(2))));
  SmallVector<int64_t> both;
  for (int64_t i = 0; i < 16; ++i)
    both.push_back(i);
  return arith::MulFOp::create(b, vector::ShuffleOp::create(b, d, dmin, both),
                               values);
}

namespace {

/// The integer arithmetic of groupQuant on `lanes` consecutive elements: a
/// scalar i32 for 1 lane, else vector<lanes x i32> (the same operations on
/// each lane, so both give the same values).
struct Lanes {
  ForwardEmitter &e;
  int64_t lanes;

  Type i32() { return lanes == 1 ? e.i32() : Type(e.vec(lanes, e.i32())); }
  /// `v` (a scalar i32) in every lane.
  Value splat(Value v) {
    return lanes == 1 ? v : vector::BroadcastOp::create(e.b, i32(), v);
  }
  Value c(int32_t v) { return lanes == 1 ? e.cI32(v) : e.splatI32(lanes, v); }
  /// The bytes at..at+lanes-1, zero- or sign-extended.
  Value bytes(Value memref, Value at, bool isSigned) {
    Value raw = lanes == 1
                    ? e.load(memref, at)
                    : vector::LoadOp::create(e.b, e.vec(lanes, e.b.getI8Type()),
                                             memref, ValueRange{at});
    if (isSigned)
      return arith::ExtSIOp::create(e.b, i32(), raw);
    return arith::ExtUIOp::create(e.b, i32(), raw);
  }
  /// (v >> shift) & mask, shift a scalar i32.
  Value bits(Value v, Value shift, int32_t mask) {
    Value shifted = arith::ShRUIOp::create(e.b, v, splat(shift));
    return arith::AndIOp::create(e.b, shifted, c(mask));
  }
  Value f32(Value v) {
    Type type = lanes == 1 ? e.f32() : Type(e.vec(lanes, e.f32()));
    return arith::SIToFPOp::create(e.b, type, v);
  }
};

} // namespace

Value ForwardEmitter::groupQuant(kvrt_weight_format format, Value bytes,
                                 Value block, Value g, Value l, int64_t lanes) {
  Lanes v{*this, lanes};
  switch (format) {
  case KVRT_WEIGHT_Q8_0:
    return v.f32(v.bytes(bytes, add(add(block, cIndex(2)), l), true));
  case KVRT_WEIGHT_Q4_0: {
    // Group 0: the low nibbles of the 16 bytes, group 1 the high ones.
    Value byte = v.bytes(bytes, add(add(block, cIndex(2)), l), false);
    Value q = v.bits(byte, toI32(mul(g, cIndex(4))), 0xF);
    return v.f32(arith::SubIOp::create(b, q, v.c(8)));
  }
  case KVRT_WEIGHT_Q4_K:
  case KVRT_WEIGHT_Q5_K: {
    // Sub-block g: the low (even g) or high (odd g) nibbles of qs[32 (g / 2)
    // ...]; Q5_K adds bit g of qh[l] as 16.
    bool q5 = format == KVRT_WEIGHT_Q5_K;
    Value qs = add(block, cIndex(q5 ? 48 : 16));
    Value byte = v.bytes(
        bytes, add(add(qs, mul(divu(g, cIndex(2)), cIndex(32))), l), false);
    Value q = v.bits(byte, toI32(mul(remu(g, cIndex(2)), cIndex(4))), 0xF);
    if (q5) {
      Value high = v.bytes(bytes, add(add(block, cIndex(16)), l), false);
      Value bit = v.bits(high, toI32(g), 1);
      q = arith::OrIOp::create(b, q, arith::ShLIOp::create(b, bit, v.c(4)));
    }
    return v.f32(q);
  }
  case KVRT_WEIGHT_Q6_K: {
    // Group k (16 elements) of half k / 8, quarter (k % 8) / 2: element
    // 16 (k % 2) + l of that quarter; low 4 bits in ql (quarters 0, 2 in
    // bytes 0..31 of the half's 64, 1 and 3 in 32..63; 2 and 3 the high
    // nibbles), high 2 bits at 2 * quarter of qh.
    Value half = divu(g, cIndex(8));
    Value quarter = divu(remu(g, cIndex(8)), cIndex(2));
    Value at = add(mul(remu(g, cIndex(2)), cIndex(16)), l);
    Value ql = add(add(block, mul(half, cIndex(64))),
                   add(mul(remu(quarter, cIndex(2)), cIndex(32)), at));
    Value low = v.bits(v.bytes(bytes, ql, false),
                       toI32(mul(divu(quarter, cIndex(2)), cIndex(4))), 0xF);
    Value qh = add(add(block, add(cIndex(128), mul(half, cIndex(32)))), at);
    Value high =
        v.bits(v.bytes(bytes, qh, false), toI32(mul(quarter, cIndex(2))), 3);
    Value q =
        arith::OrIOp::create(b, low, arith::ShLIOp::create(b, high, v.c(4)));
    return v.f32(arith::SubIOp::create(b, q, v.c(32)));
  }
  case KVRT_WEIGHT_F32:
  case KVRT_WEIGHT_F16:
  case KVRT_WEIGHT_BF16:
    break;
  }
  llvm_unreachable("groupQuant of a format without blocks");
}

Value ForwardEmitter::dequant(Value scale, Value min, Value q) {
  // Scalars in every lane where q is a vector.
  auto like = [&](Value x) -> Value {
    if (!isa<VectorType>(q.getType()))
      return x;
    return vector::BroadcastOp::create(b, q.getType(), x);
  };
  Value y = arith::MulFOp::create(b, like(scale), q);
  return min ? arith::SubFOp::create(b, y, like(min)) : y;
}

Value ForwardEmitter::weightElement(kvrt_weight_format format, Value bytes,
                                    Value row, Value j) {
  switch (format) {
  case KVRT_WEIGHT_F32: {
    Value at = add(row, mul(j, cIndex(4)));
    Value bits = cI32(0);
    for (int64_t i = 0; i < 4; ++i)
      bits = arith::OrIOp::create(
          b, bits,
          arith::ShLIOp::create(b, loadU8(bytes, add(at, cIndex(i))),
                                cI32(8 * i)));
    return arith::BitcastOp::create(b, f32(), bits);
  }
  case KVRT_WEIGHT_F16:
    return loadF16(bytes, add(row, mul(j, cIndex(2))));
  case KVRT_WEIGHT_BF16: {
    Value at = add(row, mul(j, cIndex(2)));
    Value bits = arith::OrIOp::create(
        b, loadU8(bytes, at),
        arith::ShLIOp::create(b, loadU8(bytes, add(at, cIndex(1))), cI32(8)));
    return arith::BitcastOp::create(b, f32(),
                                    arith::ShLIOp::create(b, bits, cI32(16)));
  }
  case KVRT_WEIGHT_Q8_0:
  case KVRT_WEIGHT_Q4_0:
  case KVRT_WEIGHT_Q4_K:
  case KVRT_WEIGHT_Q5_K:
  case KVRT_WEIGHT_Q6_K:
    break;
  }
  kvrt::BlockLayout layout = kvrt::blockLayout(format);
  Groups groups = groupsOf(format);
  Value block =
      add(row, mul(divu(j, cIndex(layout.elements)), cIndex(layout.bytes)));
  Value within = remu(j, cIndex(layout.elements));
  Value g = divu(within, cIndex(groups.elements));
  Value l = remu(within, cIndex(groups.elements));
  auto [scale, min] = groupScale(format, bytes, block, g);
  return dequant(scale, min, groupQuant(format, bytes, block, g, l));
}
