//===- CpuQuantMatmul.cpp - Matmuls of weights widened to f32 --*- C++ -*-===//
//
// The matmuls of weights in every format but f32 (F16, BF16, Q8_0, Q4_0,
// Q4_K, Q5_K, Q6_K) that keep the f32 arithmetic: the blocks are widened to
// f32 exactly, in registers as they are multiplied (decode) or into a buffer
// the f32 packed kernel multiplies (prefill), so the product is the f32
// path's on the dequantised weights (docs/cpu-backend.md, "Quantised
// weights").
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/KVToCPU/CpuKernels.h"
#include "passes/Conversion/KVToCPU/CpuParallel.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::kv;
using namespace mlir::kv::cpu;

namespace {

/// What foldRow calls on each piece of a row: the piece's first column, its
/// weights (a vector of f32, or one f32 in a tail), its index within the
/// block (the group; 0 outside blocks) and the carried values; returns the
/// carried values.
using RowPieceFn = function_ref<SmallVector<Value>(Value col, Value w,
                                                   int64_t slot, ValueRange)>;

/// Folds over row `row` (the byte offset of its first block) of `cols`
/// elements of weights in `format`, widened to f32 piece by piece in
/// registers with the operations of the runtime's dequantisation
/// (ForwardEmitter's groupScale, groupQuant, dequant), so the values are the
/// oracle's bit for bit: block by block, each group (a group shares its
/// scale and min) as one vector; f16 and bf16 16 elements at a time, then
/// the rest one by one (`tail`). Returns the carried values.
SmallVector<Value> foldRow(ForwardEmitter &e, kvrt_weight_format format,
                           Value bytes, Value row, Value cols, ValueRange inits,
                           RowPieceFn piece, RowPieceFn tail) {
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  if (!kvrt::isBlockFormat(format)) {
    bool f16 = format == KVRT_WEIGHT_F16;
    Value c16 = e.cIndex(16);
    Value whole = e.sub(cols, e.remu(cols, c16));
    SmallVector<Value> carried = e.forLoop(
        c0, whole, c16, inits,
        [&](Value j, ValueRange accs) -> SmallVector<Value> {
          Value raw = vector::LoadOp::create(
              e.b, e.vec(32, e.byte()), bytes,
              ValueRange{e.add(row, e.mul(j, e.cIndex(2)))});
          Value halves = vector::BitCastOp::create(
              e.b, e.vec(16, f16 ? Type(e.b.getF16Type()) : e.b.getBF16Type()),
              raw);
          Value wide =
              f16 ? arith::ExtFOp::create(e.b, e.vec(16, e.f32()), halves)
                        .getResult()
                  : e.fromBF16(halves);
          return piece(j, wide, 0, accs);
        });
    return e.forLoop(whole, cols, c1, carried,
                     [&](Value j, ValueRange accs) -> SmallVector<Value> {
                       return tail(j, e.weightElement(format, bytes, row, j), 0,
                                   accs);
                     });
  }
  kvrt::BlockLayout block = kvrt::blockLayout(format);
  ForwardEmitter::Groups groups = ForwardEmitter::groupsOf(format);
  Value blocks = e.divu(cols, e.cIndex(block.elements));
  return e.forLoop(
      c0, blocks, c1, inits,
      [&](Value i, ValueRange accs) -> SmallVector<Value> {
        Value at = e.add(row, e.mul(i, e.cIndex(block.bytes)));
        Value first = e.mul(i, e.cIndex(block.elements));
        SmallVector<Value> carried(accs);
        for (int64_t g = 0; g < groups.count; ++g) {
          Value group = e.cIndex(g);
          auto [scale, min] = e.groupScale(format, bytes, at, group);
          Value q = e.groupQuant(format, bytes, at, group, c0, groups.elements);
          carried = piece(e.add(first, e.cIndex(g * groups.elements)),
                          e.dequant(scale, min, q), g, carried);
        }
        return carried;
      });
}

/// Widens row `row` of `cols` weights in `format` to f32 into `out`
/// (memref<?xf32>), exactly (foldRow).
void emitWidenRow(ForwardEmitter &e, kvrt_weight_format format, Value bytes,
                  Value row, Value cols, Value out) {
  auto store = [&](Value col, Value w, int64_t, ValueRange) {
    if (isa<VectorType>(w.getType()))
      vector::StoreOp::create(e.b, w, out, ValueRange{col});
    else
      e.store(w, out, {col});
    return SmallVector<Value>();
  };
  foldRow(e, format, bytes, row, cols, {}, store, store);
}

/// c[t][o] (+)= a[t] · (row `row` of `k` weights in `format`), the weights
/// widened in registers (foldRow) and multiplied as they come: nothing is
/// copied. Two 16-lane accumulators (alternating over the 16-lane parts of
/// the pieces) and a scalar one for a tail.
void emitQuantDot(ForwardEmitter &e, kvrt_weight_format format, Value a,
                  Value bytes, Value row, Value c, Value t, Value o, Value k,
                  bool accumulate) {
  VectorType v16 = e.vec(kLanes, e.f32());
  Value zero = e.splatF32(kLanes, 0.0f);
  Value scalarZero = arith::ConstantOp::create(e.b, e.b.getF32FloatAttr(0.0f));
  auto piece = [&](Value col, Value w, int64_t slot,
                   ValueRange accs) -> SmallVector<Value> {
    SmallVector<Value> next(accs);
    int64_t parts = cast<VectorType>(w.getType()).getNumElements() / kLanes;
    for (int64_t j = 0; j < parts; ++j) {
      Value part = parts == 1
                       ? w
                       : vector::ExtractStridedSliceOp::create(
                             e.b, w, ArrayRef<int64_t>{j * kLanes},
                             ArrayRef<int64_t>{kLanes}, ArrayRef<int64_t>{1});
      Value x = vector::LoadOp::create(
          e.b, v16, a, ValueRange{t, e.add(col, e.cIndex(j * kLanes))});
      int64_t slotOf = (slot * parts + j) % 2;
      next[slotOf] = vector::FMAOp::create(e.b, x, part, next[slotOf]);
    }
    return next;
  };
  auto tail = [&](Value col, Value w, int64_t,
                  ValueRange accs) -> SmallVector<Value> {
    Value p = arith::MulFOp::create(e.b, e.load(a, {t, col}), w);
    return {accs[0], accs[1], arith::AddFOp::create(e.b, accs[2], p)};
  };
  SmallVector<Value> accs =
      foldRow(e, format, bytes, row, k, {zero, zero, scalarZero}, piece, tail);
  Value sum =
      vector::ReductionOp::create(e.b, vector::CombiningKind::ADD,
                                  arith::AddFOp::create(e.b, accs[0], accs[1]));
  Value total = arith::AddFOp::create(e.b, sum, accs[2]);
  if (accumulate)
    total = arith::AddFOp::create(e.b, e.load(c, {t, o}), total);
  e.store(total, c, {t, o});
}

} // namespace

std::string cpu::quantMatmulName(kvrt_weight_format format, bool accumulate) {
  return std::string("matmul_") + kvrt::weightFormatName(format) +
         (accumulate ? "_acc" : "");
}

/// Begins `base`, a matmul of weights in a format other than f32, with the
/// arguments every such kernel takes: (a, bytes, byte offset of b, c, pack
/// buffer, widen buffer).
func::FuncOp cpu::beginQuantMatmul(ForwardEmitter &e, StringRef base) {
  Type m2 = matrixType(e);
  Type f = e.buffer(e.f32());
  return e.beginFunction(e.name(base),
                         {m2, e.buffer(e.byte()), e.index(), m2, f, f}, false);
}

/// Bytes of a row of `k` (index) weights in `format`.
Value cpu::weightRowBytes(ForwardEmitter &e, kvrt_weight_format format,
                          Value k) {
  kvrt::BlockLayout block = kvrt::blockLayout(format);
  return e.mul(e.divu(k, e.cIndex(block.elements)), e.cIndex(block.bytes));
}

/// The prefill half of emitQuantMatmul: the weights widened to f32, as many
/// rows at a time as `widen` holds (in parallel), then multiplied by the f32
/// packed kernel (matmul_nt) into those columns of c.
void cpu::emitWidenedProduct(ForwardEmitter &e, kvrt_weight_format format,
                             StringRef base, Value a, Value bytes, Value offset,
                             Value c, Value packed, Value widen,
                             bool accumulate) {
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  auto rowBytesOf = [&](Value k) { return weightRowBytes(e, format, k); };
  Value n = memref::DimOp::create(e.b, a, c0);
  Value k = memref::DimOp::create(e.b, a, c1);
  Value m = memref::DimOp::create(e.b, c, c1);
  Value capacity = memref::DimOp::create(e.b, widen, c0);
  Value chunk = e.maxu(e.divu(capacity, k), c1);
  e.forLoop(c0, m, chunk, [&](Value r0) {
    Value count = e.minu(chunk, e.sub(m, r0));
    parallelFor(
        e, (base + "_widen_task").str(), count, {bytes, offset, widen, r0, k},
        [&](ValueRange v, Value lo, Value hi) {
          Value bytes = v[0], offset = v[1], widen = v[2], r0 = v[3], k = v[4];
          Value rowBytes = rowBytesOf(k);
          e.forLoop(lo, hi, e.cIndex(1), [&](Value o) {
            Value out = memref::SubViewOp::create(
                e.b, widen, ArrayRef<OpFoldResult>{e.mul(o, k)},
                ArrayRef<OpFoldResult>{k},
                ArrayRef<OpFoldResult>{e.b.getIndexAttr(1)});
            emitWidenRow(e, format, bytes,
                         e.add(offset, e.mul(e.add(r0, o), rowBytes)), k, out);
          });
        });
    Value weights = memref::ReinterpretCastOp::create(
        e.b, matrixType(e), widen, OpFoldResult(e.b.getIndexAttr(0)),
        ArrayRef<OpFoldResult>{count, k},
        ArrayRef<OpFoldResult>{k, e.b.getIndexAttr(1)});
    Value columns = memref::SubViewOp::create(
        e.b, c, ArrayRef<OpFoldResult>{c0, r0},
        ArrayRef<OpFoldResult>{n, count},
        ArrayRef<OpFoldResult>{e.b.getIndexAttr(1), e.b.getIndexAttr(1)});
    call(e, accumulate ? "matmul_nt_acc" : "matmul_nt",
         {a, weights, columns, packed});
  });
}

/// c[t][o] (+)= sum_i a[t][i] * b[o][i] for weights b in `format`, as
/// (a, bytes, byte offset of b, c, pack buffer, widen buffer). Fewer rows
/// than kPackedMinRows (decode): parallel over the outputs, each weight row
/// widened in registers as it is multiplied with a token's row
/// (emitQuantDot): nothing is packed, converted into memory or copied. More
/// rows (prefill): the weights widened to f32, as many rows at a time as the
/// widen buffer holds (in parallel), then multiplied by the f32 packed
/// kernel (matmul_nt) into those columns of c. Widening is exact, so either
/// way the product is the f32 path's on the dequantised weights.
void cpu::emitQuantMatmul(ForwardEmitter &e, kvrt_weight_format format,
                          bool accumulate) {
  std::string base = quantMatmulName(format, accumulate);
  func::FuncOp fn = beginQuantMatmul(e, base);
  Value a = fn.getArgument(0), bytes = fn.getArgument(1),
        offset = fn.getArgument(2), c = fn.getArgument(3),
        packed = fn.getArgument(4), widen = fn.getArgument(5);
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  auto rowBytesOf = [&](Value k) { return weightRowBytes(e, format, k); };
  Value n = memref::DimOp::create(e.b, a, c0);
  Value m = memref::DimOp::create(e.b, c, c1);
  Value small = e.cmp(arith::CmpIPredicate::ult, n, e.cIndex(kPackedMinRows));
  e.ifElse(
      small,
      [&] {
        parallelFor(e, base + "_dot_task", m, {a, bytes, offset, c},
                    [&](ValueRange v, Value lo, Value hi) {
                      // (The task is a function of its own: values of the
                      // caller do not reach it but through `v`.)
                      Value a = v[0], bytes = v[1], offset = v[2], c = v[3];
                      Value c1 = e.cIndex(1);
                      Value k = memref::DimOp::create(e.b, a, c1);
                      Value rowBytes = rowBytesOf(k);
                      Value n = memref::DimOp::create(e.b, a, e.cIndex(0));
                      e.forLoop(lo, hi, c1, [&](Value o) {
                        Value row = e.add(offset, e.mul(o, rowBytes));
                        e.forLoop(e.cIndex(0), rowBytes, e.cIndex(64),
                                  [&](Value j) {
                                    prefetchWeights(e, bytes, e.add(row, j));
                                  });
                        e.forLoop(e.cIndex(0), n, c1, [&](Value t) {
                          emitQuantDot(e, format, a, bytes, row, c, t, o, k,
                                       accumulate);
                        });
                      });
                    });
      },
      [&] {
        emitWidenedProduct(e, format, base, a, bytes, offset, c, packed, widen,
                           accumulate);
      });
  e.finishFunction();
}
