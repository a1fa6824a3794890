//===- CpuMatmul.cpp - The CPU forward's matmuls ----------------*- C++ -*-===//
//
// c (+)= a · bᵀ for f32 weights b as llama2.c lays them out ([out][in]):
// from a few rows on, the weights are packed into panels (per call, or once
// per model by the runtime) and multiplied by register tiles that follow the
// host's vector width; fewer rows (decode) take a dot-product kernel bound by
// reading the weights (docs/cpu-backend.md, "The matmul").
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

/// At most this many floats of packed weights at once (16 MiB): a larger
/// matrix (a big vocabulary's classifier) is packed and multiplied in groups
/// of panels.
constexpr int64_t kPackCapFloats = int64_t(4) << 20;

/// The register tile of the packed matmul for the host's vector width:
/// `rows` tokens x `vectors` vectors of `lanes` outputs, one accumulator
/// each, plus the weight vectors and a broadcast in registers. AVX-512
/// (32 zmm): 6 x 4 vectors of 16 = 24 accumulators; AVX2 (16 ymm): 6 x 2
/// vectors of 8 = 12.
struct MatmulTile {
  int64_t lanes, rows, vectors;
  int64_t columns() const { return lanes * vectors; }
};

MatmulTile tileFor(int64_t vectorBits) {
  if (vectorBits >= 512)
    return {16, 6, 4};
  return {8, 6, 2};
}

/// The transpose of a 16 x 16 block given as 16 row vectors: four
/// stages of two-source shuffles (vector.shuffle), each swapping the
/// off-diagonal b x b blocks of every 2b x 2b block (b = 8, 4, 2, 1).
SmallVector<Value> transpose16(ForwardEmitter &e, SmallVector<Value> rows) {
  for (int64_t b = 8; b >= 1; b /= 2) {
    SmallVector<int64_t> upper, lower;
    for (int64_t g = 0; g < 16; g += 2 * b) {
      for (int64_t j = 0; j < b; ++j)
        upper.push_back(g + j);
      for (int64_t j = 0; j < b; ++j)
        upper.push_back(16 + g + j);
      for (int64_t j = 0; j < b; ++j)
        lower.push_back(g + b + j);
      for (int64_t j = 0; j < b; ++j)
        lower.push_back(16 + g + b + j);
    }
    SmallVector<Value> next(rows);
    for (int64_t r = 0; r < 16; ++r) {
      if ((r / b) % 2)
        continue;
      next[r] = vector::ShuffleOp::create(e.b, rows[r], rows[r + b], upper);
      next[r + b] = vector::ShuffleOp::create(e.b, rows[r], rows[r + b], lower);
    }
    rows = next;
  }
  return rows;
}

/// The dot-product kernel for outputs lo .. hi-1 of every row: the weight
/// row stays in L1 while every token passes over it; four independent
/// 16-lane accumulators.
void emitDotRows(ForwardEmitter &e, Value a, Value b, Value c, Value lo,
                 Value hi, bool accumulate) {
  Value c0 = e.cIndex(0), c1 = e.cIndex(1), c16 = e.cIndex(16),
        c32 = e.cIndex(32), c48 = e.cIndex(48), c64 = e.cIndex(64);
  Value n = memref::DimOp::create(e.b, a, c0);
  Value k = memref::DimOp::create(e.b, a, c1);
  Value k64 = e.sub(k, e.remu(k, c64));
  Value k16 = e.sub(k, e.remu(k, c16));
  VectorType v16 = e.vec(kLanes, e.f32());
  Value zero = e.splatF32(kLanes, 0.0f);
  auto vload = [&](Value memref, Value row, Value col) -> Value {
    return vector::LoadOp::create(e.b, v16, memref, ValueRange{row, col});
  };
  e.forLoop(lo, hi, c1, [&](Value o) {
    e.forLoop(c0, n, c1, [&](Value t) {
      SmallVector<Value> acc = e.forLoop(
          c0, k64, c64, {zero, zero, zero, zero},
          [&](Value i, ValueRange accs) -> SmallVector<Value> {
            Value cols[4] = {i, e.add(i, c16), e.add(i, c32), e.add(i, c48)};
            SmallVector<Value> next;
            Value xs[4], ys[4];
            for (int j = 0; j < 4; ++j) {
              xs[j] = vload(a, t, cols[j]);
              ys[j] = vload(b, o, cols[j]);
            }
            for (int j = 0; j < 4; ++j)
              next.push_back(vector::FMAOp::create(e.b, xs[j], ys[j], accs[j]));
            return next;
          });
      Value s01 = arith::AddFOp::create(e.b, acc[0], acc[1]);
      Value s23 = arith::AddFOp::create(e.b, acc[2], acc[3]);
      Value s4 = arith::AddFOp::create(e.b, s01, s23);
      Value s16 =
          e.forLoop(k64, k16, c16, {s4},
                    [&](Value i, ValueRange av) -> SmallVector<Value> {
                      Value xv = vload(a, t, i);
                      Value yv = vload(b, o, i);
                      return {vector::FMAOp::create(e.b, xv, yv, av[0])};
                    })[0];
      Value red =
          vector::ReductionOp::create(e.b, vector::CombiningKind::ADD, s16);
      Value total = e.forLoop(
          k16, k, c1, {red}, [&](Value i, ValueRange as) -> SmallVector<Value> {
            Value xs = e.load(a, {t, i});
            Value ys = e.load(b, {o, i});
            Value p = arith::MulFOp::create(e.b, xs, ys);
            return {arith::AddFOp::create(e.b, as[0], p)};
          })[0];
      if (accumulate) {
        Value old = e.load(c, {t, o});
        total = arith::AddFOp::create(e.b, old, total);
      }
      e.store(total, c, {t, o});
    });
  });
}

/// Packs panels lo .. hi-1 of the group starting at panel g0: panel p holds
/// outputs (g0 + p) * NR .. + NR - 1 of b transposed, at
/// packed[p * k * NR + i * NR + j] = b[(g0 + p) * NR + j][i], rows past m
/// zero. 16 x 16 blocks are loaded as rows and transposed in registers
/// (vector.transpose, lowered to shuffles); blocks at the edges of b take
/// masked loads and store only the columns inside k.
void emitPackPanels(ForwardEmitter &e, const MatmulTile &tile, Value b,
                    Value packed, Value g0, Value lo, Value hi) {
  Value c0 = e.cIndex(0), c1 = e.cIndex(1), c16 = e.cIndex(16);
  Value k = memref::DimOp::create(e.b, b, c1);
  Value m = memref::DimOp::create(e.b, b, c0);
  int64_t nrValue = tile.columns();
  Value nr = e.cIndex(nrValue);
  VectorType v16 = e.vec(16, e.f32());
  VectorType m16 = e.vec(16, e.i1());
  Value zero16 = e.splatF32(16, 0.0f);
  Value lastRow = e.sub(m, c1);
  auto transposeAndStore = [&](SmallVector<Value> rows, Value at, Value cols) {
    rows = transpose16(e, rows);
    for (int64_t r = 0; r < 16; ++r) {
      auto store = [&] {
        Value to = e.add(at, e.mul(e.cIndex(r), nr));
        vector::StoreOp::create(e.b, rows[r], packed, ValueRange{to});
      };
      if (cols)
        e.ifThen(e.cmp(arith::CmpIPredicate::ult, e.cIndex(r), cols), store);
      else
        store();
    }
  };
  e.forLoop(lo, hi, c1, [&](Value p) {
    Value panelBase = e.mul(e.mul(p, k), nr);
    Value firstOutput = e.mul(e.add(g0, p), nr);
    e.forLoop(c0, nr, c16, [&](Value jb) {
      Value o0 = e.add(firstOutput, jb);
      Value fullRows = e.cmp(arith::CmpIPredicate::ule, e.add(o0, c16), m);
      e.forLoop(c0, k, c16, [&](Value i0) {
        Value at = e.add(panelBase, e.add(e.mul(i0, nr), jb));
        Value full = arith::AndIOp::create(
            e.b, fullRows, e.cmp(arith::CmpIPredicate::ule, e.add(i0, c16), k));
        e.ifElse(
            full,
            [&] {
              SmallVector<Value> rows;
              for (int64_t j = 0; j < 16; ++j)
                rows.push_back(vector::LoadOp::create(
                    e.b, v16, b, ValueRange{e.add(o0, e.cIndex(j)), i0}));
              transposeAndStore(rows, at, Value());
            },
            [&] {
              Value cols = e.minu(c16, e.sub(k, i0));
              SmallVector<Value> rows;
              for (int64_t j = 0; j < 16; ++j) {
                Value o = e.add(o0, e.cIndex(j));
                Value valid = e.cmp(arith::CmpIPredicate::ult, o, m);
                Value count = e.select(valid, cols, c0);
                Value mask =
                    vector::CreateMaskOp::create(e.b, m16, ValueRange{count});
                Value row = vector::MaskedLoadOp::create(
                    e.b, v16, b, ValueRange{e.minu(o, lastRow), i0}, mask,
                    zero16);
                rows.push_back(row);
              }
              transposeAndStore(rows, at, cols);
            });
      });
    });
  });
}

/// Work items lo .. hi-1 of the packed product of a group: item = panel p
/// (of the group at g0) x chunk of kChunkRows tokens. Each register tile
/// (tile.rows tokens x tile.columns() outputs) keeps its accumulators in
/// registers over the whole k loop; outputs past m are masked. A chunk's
/// last rows, fewer than tile.rows, take a tile of exactly that many rows
/// (not a full tile whose extra rows repeat the last one: 8 rows cost 12
/// rows' FMAs, the 8 of an edit's answer, and 4 to 7 rows 6 to 12). Every
/// output is the same FMA chain over k whatever its tile's height.
void emitPackedTiles(ForwardEmitter &e, const MatmulTile &tile, Value a,
                     Value packed, Value c, Value g0, Value chunks, Value lo,
                     Value hi, bool accumulate) {
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  Value n = memref::DimOp::create(e.b, a, c0);
  Value k = memref::DimOp::create(e.b, a, c1);
  Value m = memref::DimOp::create(e.b, c, c1);
  int64_t lanes = tile.lanes, nv = tile.vectors;
  Value nr = e.cIndex(tile.columns());
  VectorType vt = e.vec(lanes, e.f32());
  VectorType mt = e.vec(lanes, e.i1());
  Value zero = e.splatF32(lanes, 0.0f);
  e.forLoop(lo, hi, c1, [&](Value item) {
    Value p = e.divu(item, chunks);
    Value chunk = e.remu(item, chunks);
    Value panelBase = e.mul(e.mul(p, k), nr);
    Value firstOutput = e.mul(e.add(g0, p), nr);
    Value t0 = e.mul(chunk, e.cIndex(kChunkRows));
    Value t1 = e.minu(n, e.add(t0, e.cIndex(kChunkRows)));
    // Rows t .. t + mr - 1 (all below n).
    auto rowTile = [&](Value t, int64_t mr) {
      SmallVector<Value> inits(mr * nv, zero);
      SmallVector<Value> acc = e.forLoop(
          c0, k, c1, inits,
          [&](Value i, ValueRange accs) -> SmallVector<Value> {
            Value at = e.add(panelBase, e.mul(i, nr));
            SmallVector<Value> w;
            for (int64_t v = 0; v < nv; ++v)
              w.push_back(vector::LoadOp::create(
                  e.b, vt, packed, ValueRange{e.add(at, e.cIndex(v * lanes))}));
            SmallVector<Value> next;
            for (int64_t r = 0; r < mr; ++r) {
              Value x = e.load(a, {e.add(t, e.cIndex(r)), i});
              Value xb = vector::BroadcastOp::create(e.b, vt, x);
              for (int64_t v = 0; v < nv; ++v)
                next.push_back(
                    vector::FMAOp::create(e.b, xb, w[v], accs[r * nv + v]));
            }
            return next;
          });
      for (int64_t r = 0; r < mr; ++r) {
        Value row = e.add(t, e.cIndex(r));
        for (int64_t v = 0; v < nv; ++v) {
          Value col = e.add(firstOutput, e.cIndex(v * lanes));
          Value inside = e.cmp(arith::CmpIPredicate::ult, col, m);
          Value count = e.select(inside, e.sub(m, col), c0);
          Value mask = vector::CreateMaskOp::create(e.b, mt, ValueRange{count});
          Value value = acc[r * nv + v];
          if (accumulate) {
            Value old = vector::MaskedLoadOp::create(
                e.b, vt, c, ValueRange{row, col}, mask, zero);
            value = arith::AddFOp::create(e.b, old, value);
          }
          vector::MaskedStoreOp::create(e.b, c, ValueRange{row, col}, mask,
                                        value);
        }
      }
    };
    Value cMR = e.cIndex(tile.rows);
    Value full = e.add(t0, e.mul(e.divu(e.sub(t1, t0), cMR), cMR));
    e.forLoop(t0, full, cMR, [&](Value t) { rowTile(t, tile.rows); });
    Value rest = e.sub(t1, full);
    for (int64_t rows = 1; rows < tile.rows; ++rows)
      e.ifThen(e.cmp(arith::CmpIPredicate::eq, rest, e.cIndex(rows)),
               [&] { rowTile(full, rows); });
  });
}

} // namespace

int64_t cpu::panelWidth(int64_t vectorBits) {
  return tileFor(vectorBits).columns();
}

/// The buffer the matmuls of a function pack weights into: room for the
/// largest weight matrix of the forward, rows padded to whole panels, up to
/// kPackCapFloats (but at least one panel of the longest rows).
int64_t cpu::packBufferFloats(ForwardEmitter &e, int64_t vectorBits) {
  int64_t nr = tileFor(vectorBits).columns();
  auto padded = [&](int64_t m) { return (m + nr - 1) / nr * nr; };
  int64_t largest = std::max(
      {padded(e.dim) * e.dim, padded(e.kvDim) * e.dim, padded(e.hidden) * e.dim,
       padded(e.dim) * e.hidden, padded(e.vocab) * e.dim});
  return std::max(std::min(largest, kPackCapFloats),
                  nr * std::max(e.dim, e.hidden));
}

/// c[t][o] (+)= sum_i a[t][i] * b[o][i], weights b [out][in] row-major,
/// with a fourth argument, the buffer the weights are packed into. From
/// kPackedMinRows rows on, the packed path: the weights are packed into
/// panels of `tile.columns()` outputs, transposed ([panel][in][column]), then
/// register tiles of `tile.rows` tokens x `tile.columns()` outputs
/// accumulate over k with one FMA per (row, vector) and k, broadcasting
/// a[t][i] and loading a panel row: every output is one sequential FMA chain
/// over i, whichever tile or thread computes it. Both the packing and the
/// tiles are parallel loops (panels; panels x chunks of kChunkRows tokens).
/// Fewer rows take the dot-product kernel, parallel over outputs.
void cpu::emitMatmul(ForwardEmitter &e, int64_t vectorBits, bool accumulate) {
  MatmulTile tile = tileFor(vectorBits);
  Type m2 = matrixType(e);
  std::string base = accumulate ? "matmul_nt_acc" : "matmul_nt";
  func::FuncOp f =
      e.beginFunction(e.name(base), {m2, m2, m2, e.buffer(e.f32())}, false);
  Value a = f.getArgument(0), b = f.getArgument(1), c = f.getArgument(2),
        packed = f.getArgument(3);
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  Value n = memref::DimOp::create(e.b, a, c0);
  Value k = memref::DimOp::create(e.b, a, c1);
  Value m = memref::DimOp::create(e.b, b, c0);
  Value nr = e.cIndex(tile.columns());
  Value small = e.cmp(arith::CmpIPredicate::ult, n, e.cIndex(kPackedMinRows));
  e.ifElse(
      small,
      [&] {
        parallelFor(e, base + "_dot_task", m, {a, b, c},
                    [&](ValueRange v, Value lo, Value hi) {
                      emitDotRows(e, v[0], v[1], v[2], lo, hi, accumulate);
                    });
      },
      [&] {
        Value panels = e.divu(e.add(m, e.sub(nr, c1)), nr);
        Value capacity = memref::DimOp::create(e.b, packed, c0);
        Value group = e.maxu(e.divu(capacity, e.mul(k, nr)), c1);
        Value chunkRows = e.cIndex(kChunkRows);
        Value chunks = e.divu(e.add(n, e.sub(chunkRows, c1)), chunkRows);
        e.forLoop(c0, panels, group, [&](Value g0) {
          Value count = e.minu(group, e.sub(panels, g0));
          parallelFor(e, base + "_pack_task", count, {b, packed, g0},
                      [&](ValueRange v, Value lo, Value hi) {
                        emitPackPanels(e, tile, v[0], v[1], v[2], lo, hi);
                      });
          parallelFor(e, base + "_tile_task", e.mul(count, chunks),
                      {a, packed, c, g0, chunks},
                      [&](ValueRange v, Value lo, Value hi) {
                        emitPackedTiles(e, tile, v[0], v[1], v[2], v[3], v[4],
                                        lo, hi, accumulate);
                      });
        });
      });
  e.finishFunction();
}

/// c[t][o] (+)= sum_i a[t][i] * b[o][i] for weights b already packed into
/// `panels` (emitPackPanels' layout, every panel of b from its start), at
/// least kPackedMinRows rows: matmul_nt's packed path without its packing,
/// the same tiles, so every output is the same FMA chain. The weights a
/// runtime packs once per model (ForwardABI.def) take it.
void cpu::emitPanelMatmul(ForwardEmitter &e, int64_t vectorBits,
                          bool accumulate) {
  MatmulTile tile = tileFor(vectorBits);
  Type m2 = matrixType(e);
  std::string base = accumulate ? "matmul_nt_acc_panels" : "matmul_nt_panels";
  func::FuncOp f =
      e.beginFunction(e.name(base), {m2, vectorType(e), m2}, false);
  Value a = f.getArgument(0), panels = f.getArgument(1), c = f.getArgument(2);
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  Value n = memref::DimOp::create(e.b, a, c0);
  Value m = memref::DimOp::create(e.b, c, c1);
  Value nr = e.cIndex(tile.columns());
  Value count = e.divu(e.add(m, e.sub(nr, c1)), nr);
  Value chunkRows = e.cIndex(kChunkRows);
  Value chunks = e.divu(e.add(n, e.sub(chunkRows, c1)), chunkRows);
  parallelFor(e, base + "_task", e.mul(count, chunks), {a, panels, c, chunks},
              [&](ValueRange v, Value lo, Value hi) {
                emitPackedTiles(e, tile, v[0], v[1], v[2], e.cIndex(0), v[3],
                                lo, hi, accumulate);
              });
  e.finishFunction();
}
