//===- CpuMath.cpp - The CPU forward's element-wise kernels -----*- C++ -*-===//
//
// rmsnorm (sums of squares in f64), rope_table and rope_apply (angles and
// rotations in f64, as the oracle computes them), swiglu (libm's exp) and
// exp16, the bounded-error vector exp of the attention weights
// (docs/cpu-backend.md).
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/KVToCPU/CpuKernels.h"
#include "passes/Conversion/KVToCPU/CpuParallel.h"
#include "runtime/core/ForwardABI.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::kv;
using namespace mlir::kv::cpu;

/// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, the sum of squares in f64.
void cpu::emitRmsnorm(ForwardEmitter &e) {
  Type m2 = matrixType(e), v1 = vectorType(e);
  func::FuncOp f = e.beginFunction(e.name("rmsnorm"), {m2, v1, m2}, false);
  Value x = f.getArgument(0), w = f.getArgument(1), out = f.getArgument(2);
  Value c0 = e.cIndex(0), c1 = e.cIndex(1), d = e.cIndex(e.dim);
  Value n = memref::DimOp::create(e.b, x, c0);
  e.forLoop(c0, n, c1, [&](Value t) {
    Value sum = e.forLoop(c0, d, c1, {e.cF64(0.0)},
                          [&](Value i, ValueRange acc) -> SmallVector<Value> {
                            Value v = e.load(x, {t, i});
                            Value vd = arith::ExtFOp::create(e.b, e.f64(), v);
                            Value sq = arith::MulFOp::create(e.b, vd, vd);
                            return {arith::AddFOp::create(e.b, acc[0], sq)};
                          })[0];
    Value scale = e.rmsScale(sum);
    e.forLoop(c0, d, c1, [&](Value i) {
      Value xi = e.load(x, {t, i});
      Value wi = e.load(w, {i});
      e.store(e.rmsApply(xi, wi, scale), out, {t, i});
    });
  });
  e.finishFunction();
}

/// The cos/sin table of position `pos` (i64): one entry per RoPE pair.
void cpu::emitRopeTable(ForwardEmitter &e) {
  Type tab = ropeTableType(e);
  func::FuncOp f =
      e.beginFunction(e.name("rope_table"), {e.i64(), tab, tab}, false);
  Value pos = f.getArgument(0), cs = f.getArgument(1), sn = f.getArgument(2);
  Value c0 = e.cIndex(0), cHalf = e.cIndex(e.half), c1 = e.cIndex(1);
  e.forLoop(c0, cHalf, c1, [&](Value i) {
    auto [c, s] = e.ropeCosSin(pos, i);
    e.store(c, cs, {i});
    e.store(s, sn, {i});
  });
  e.finishFunction();
}

/// The cos/sin tables of a whole prefill (ropeTableRows rows): for rows
/// r * n + t with r < the run count, position pos + t - Δ of run r (its
/// queries' rotation); for rows runs * n + t, pos + t (its new keys'). The
/// layers read them (rope_row) instead of computing each one per layer and
/// per task, with the same operations as rope_table: the same values.
void cpu::emitRopeRows(ForwardEmitter &e) {
  func::FuncOp f = e.beginFunction(
      e.name("rope_rows"),
      {e.buffer(e.f64()), e.i64(), e.table(KVRT_RUN_WIDTH), e.index()}, false);
  Value runs = f.getArgument(2);
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  Value rows =
      e.mul(e.add(memref::DimOp::create(e.b, runs, c0), c1), f.getArgument(3));
  parallelFor(e, "rope_rows_task", rows, f.getArguments(),
              [&](ValueRange v, Value begin, Value end) {
                Value table = v[0], pos = v[1], runs = v[2], n = v[3];
                Value c0 = e.cIndex(0), c1 = e.cIndex(1),
                      cHalf = e.cIndex(e.half);
                Value nruns = memref::DimOp::create(e.b, runs, c0);
                e.forLoop(begin, end, c1, [&](Value row) {
                  Value r = e.divu(row, n), t = e.remu(row, n);
                  Value p = arith::AddIOp::create(e.b, pos, e.toI64(t));
                  Value shifted = e.cmp(arith::CmpIPredicate::ult, r, nruns);
                  Value delta =
                      e.ifThenElse(
                           shifted, {e.i64()},
                           [&]() -> SmallVector<Value> {
                             return {e.loadRun(runs, r).delta};
                           },
                           [&]() -> SmallVector<Value> { return {e.cI64(0)}; })
                          .front();
                  p = arith::SubIOp::create(e.b, p, delta);
                  Value base = e.mul(row, e.cIndex(2 * e.half));
                  e.forLoop(c0, cHalf, c1, [&](Value i) {
                    auto [c, s] = e.ropeCosSin(p, i);
                    e.store(c, table, {e.add(base, i)});
                    e.store(s, table, {e.add(e.add(base, cHalf), i)});
                  });
                });
              });
  e.finishFunction();
}

Value cpu::ropeTableRows(ForwardEmitter &e, Value n, Value runs) {
  Value rows = e.mul(
      e.add(memref::DimOp::create(e.b, runs, e.cIndex(0)), e.cIndex(1)), n);
  int64_t rowBytes = 2 * e.half * int64_t(sizeof(double));
  Value fits = e.cmp(arith::CmpIPredicate::ule, rows,
                     e.cIndex(kRopeTablesMaxBytes / rowBytes));
  return e.select(fits, rows, e.cIndex(0));
}

void cpu::ropeRowOrTable(ForwardEmitter &e, Value tables, Value row, Value pos,
                         Value cs, Value sn) {
  Value some =
      e.cmp(arith::CmpIPredicate::ugt,
            memref::DimOp::create(e.b, tables, e.cIndex(0)), e.cIndex(0));
  e.ifElse(
      some,
      [&] {
        call(e, "rope_row", {tables, row, cs, sn});
      },
      [&] {
        call(e, "rope_table", {pos, cs, sn});
      });
}

/// Row `row` of rope_rows' tables copied into a rope_table pair.
void cpu::emitRopeRow(ForwardEmitter &e) {
  Type tab = ropeTableType(e);
  func::FuncOp f = e.beginFunction(
      e.name("rope_row"), {e.buffer(e.f64()), e.index(), tab, tab}, false);
  Value table = f.getArgument(0), cs = f.getArgument(2), sn = f.getArgument(3);
  Value c0 = e.cIndex(0), c1 = e.cIndex(1), cHalf = e.cIndex(e.half);
  Value base = e.mul(f.getArgument(1), e.cIndex(2 * e.half));
  e.forLoop(c0, cHalf, c1, [&](Value i) {
    e.store(e.load(table, {e.add(base, i)}), cs, {i});
    e.store(e.load(table, {e.add(e.add(base, cHalf), i)}), sn, {i});
  });
  e.finishFunction();
}

/// dst = R(table) src for one head (dst may alias src).
void cpu::emitRopeApply(ForwardEmitter &e) {
  Type h1 = headType(e), tab = ropeTableType(e);
  func::FuncOp f =
      e.beginFunction(e.name("rope_apply"), {h1, h1, tab, tab}, false);
  Value src = f.getArgument(0), dst = f.getArgument(1), cs = f.getArgument(2),
        sn = f.getArgument(3);
  Value c0 = e.cIndex(0), cHalf = e.cIndex(e.half), c1 = e.cIndex(1);
  e.forLoop(c0, cHalf, c1, [&](Value i) {
    auto [ia, ib] = e.ropePair(i);
    Value xa = e.load(src, {ia}), xb = e.load(src, {ib});
    Value c = e.load(cs, {i}), s = e.load(sn, {i});
    auto [fa, fb] = e.rotate(xa, xb, c, s);
    e.store(fa, dst, {ia});
    e.store(fb, dst, {ib});
  });
  e.finishFunction();
}

/// h1 = silu(h1) * h3, element by element (libm's exp: a parallel loop over
/// blocks of 4096 elements).
void cpu::emitSwiglu(ForwardEmitter &e) {
  Type v1 = vectorType(e);
  func::FuncOp f = e.beginFunction(e.name("swiglu"), {v1, v1}, false);
  Value a = f.getArgument(0), b = f.getArgument(1);
  Value c0 = e.cIndex(0), c1 = e.cIndex(1), block = e.cIndex(4096);
  Value count = memref::DimOp::create(e.b, a, c0);
  Value blocks = e.divu(e.add(count, e.sub(block, c1)), block);
  parallelFor(e, "swiglu_task", blocks, {a, b},
              [&](ValueRange v, Value lo, Value hi) {
                Value c1 = e.cIndex(1), block = e.cIndex(4096);
                Value size = memref::DimOp::create(e.b, v[0], e.cIndex(0));
                Value begin = e.mul(lo, block);
                Value end = e.minu(e.mul(hi, block), size);
                e.forLoop(begin, end, c1, [&](Value i) {
                  Value h = e.load(v[0], {i}), g = e.load(v[1], {i});
                  e.store(e.swiglu(h, g), v[0], {i});
                });
              });
  e.finishFunction();
}

/// c[t][j] += b[j]: a few floats per token next to the matmul before it, so
/// a plain loop (LLVM vectorises the inner one).
void cpu::emitAddBias(ForwardEmitter &e) {
  func::FuncOp f = e.beginFunction(e.name("add_bias"),
                                   {matrixType(e), vectorType(e)}, false);
  Value c = f.getArgument(0), b = f.getArgument(1);
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  Value n = memref::DimOp::create(e.b, c, c0);
  Value m = memref::DimOp::create(e.b, c, c1);
  e.forLoop(c0, n, c1, [&](Value t) {
    e.forLoop(c0, m, c1, [&](Value j) {
      Value sum = arith::AddFOp::create(e.b, e.load(c, {t, j}), e.load(b, {j}));
      e.store(sum, c, {t, j});
    });
  });
  e.finishFunction();
}

/// exp(x) on 16 lanes for the softmax weights (x = score - running max <=
/// 0): Cody-Waite reduction x = n ln2 + r (ln2 split in two, n ln2_hi
/// exact), the degree-7 minimax polynomial of Cephes' expf on |r| <= ln2/2
/// (FMAs), scaled by 2^n built from the exponent bits. At most 1 ulp from
/// libm's expf on [-87.3, 0], the domain used (docs/cpu-backend.md); not
/// meant for x > 88. Results below 2^-126 (x < -87.3, -inf included) are 0;
/// NaN stays NaN. No fast-math flag is involved.
void cpu::emitExp16(ForwardEmitter &e) {
  VectorType v16 = e.vec(kLanes, e.f32());
  VectorType i16 = e.vec(kLanes, e.i32());
  func::FuncOp f = e.beginFunction(e.name("exp16"), {v16}, false);
  f.setType(e.b.getFunctionType({v16}, {v16}));
  Value x = f.getArgument(0);
  auto splat = [&](float value) { return e.splatF32(kLanes, value); };
  auto fma = [&](Value a, Value b, Value c) -> Value {
    return vector::FMAOp::create(e.b, a, b, c);
  };
  Value lo = splat(-87.336544f), hi = splat(88.3762589f);
  Value log2e = splat(1.44269504f), half = splat(0.5f);
  Value nln2hi = splat(-0.693359375f), nln2lo = splat(2.12194440e-4f);
  Value p0 = splat(1.9875691500e-4f), p1 = splat(1.3981999507e-3f);
  Value p2 = splat(8.3334519073e-3f), p3 = splat(4.1665795894e-2f);
  Value p4 = splat(1.6666665459e-1f), p5 = splat(5.0000001201e-1f);
  Value one = splat(1.0f), zero = splat(0.0f);
  Value bias = e.splatI32(kLanes, 127), c23 = e.splatI32(kLanes, 23);
  Value x0 = arith::MaximumFOp::create(e.b, x, lo);
  Value xc = arith::MinimumFOp::create(e.b, x0, hi);
  Value t = fma(xc, log2e, half);
  Value n = math::FloorOp::create(e.b, t);
  Value r0 = fma(n, nln2hi, xc);
  Value r = fma(n, nln2lo, r0);
  Value q1 = fma(p0, r, p1);
  Value q2 = fma(q1, r, p2);
  Value q3 = fma(q2, r, p3);
  Value q4 = fma(q3, r, p4);
  Value q5 = fma(q4, r, p5);
  Value r2 = arith::MulFOp::create(e.b, r, r);
  Value q6 = fma(q5, r2, r);
  Value q = arith::AddFOp::create(e.b, q6, one);
  Value ni = arith::FPToSIOp::create(e.b, i16, n);
  Value eb = arith::AddIOp::create(e.b, ni, bias);
  Value es = arith::ShLIOp::create(e.b, eb, c23);
  Value p2n = arith::BitcastOp::create(e.b, v16, es);
  Value ex = arith::MulFOp::create(e.b, q, p2n);
  Value under = arith::CmpFOp::create(e.b, arith::CmpFPredicate::OLT, x, lo);
  Value result = arith::SelectOp::create(e.b, under, zero, ex);
  func::ReturnOp::create(e.b, result);
  e.b.setInsertionPointToEnd(e.module.getBody());
}
