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
#include "passes/Conversion/KVToCPU/CpuTarget.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::kv;
using namespace mlir::kv::cpu;

namespace {

/// What foldRows calls on each piece of its rows: the piece's first column,
/// the rows' weights there (a vector of f32 each, or one f32 each in a
/// tail), the piece's slot (the group within the block, or which half of a
/// 32-element step of f16 and bf16 rows) and the carried values; returns
/// the carried values.
using RowPieceFn = function_ref<SmallVector<Value>(
    Value col, ArrayRef<Value> weights, int64_t slot, ValueRange)>;

/// Folds over the rows at bytes `rows` (the byte offsets of their first
/// blocks) of `cols` elements of weights in `format`, widened to f32 piece
/// by piece in registers with the operations of the runtime's
/// dequantisation (ForwardEmitter's groupScale, groupQuant, dequant), so the
/// values are the oracle's bit for bit: block by block, each group (a group
/// shares its scale and min) as one vector per row; f16 and bf16 32 elements
/// at a time (two pieces of 16, slots 0 and 1), then 16 (slot 0), then the
/// rest one by one (`tail`). With `prefetchRows`, the rows are a decode
/// tile's and each prefetches the bytes kDecodeTilePrefetchBytes ahead of
/// the step it is at (prefetchTileRows; f16 and bf16 rows
/// halfDecodeTilePrefetchBytes(farPrefetch)). Returns the carried values.
SmallVector<Value> foldRows(ForwardEmitter &e, kvrt_weight_format format,
                            Value bytes, ArrayRef<Value> rows, Value cols,
                            ValueRange inits, RowPieceFn piece, RowPieceFn tail,
                            bool prefetchRows = false,
                            bool farPrefetch = false) {
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  auto prefetch = [&](Value at, int64_t stepBytes,
                      int64_t aheadBytes = kDecodeTilePrefetchBytes) {
    if (prefetchRows)
      prefetchTileRows(e, bytes, rows, at, stepBytes, aheadBytes);
  };
  if (!kvrt::isBlockFormat(format)) {
    bool f16 = format == KVRT_WEIGHT_F16;
    Type half = f16 ? Type(e.b.getF16Type()) : e.b.getBF16Type();
    Value c16 = e.cIndex(16), c32 = e.cIndex(32);
    // The 16 elements from column `j` of every row, widened.
    auto widen = [&](Value j) {
      SmallVector<Value> weights;
      for (Value row : rows) {
        Value raw = vector::LoadOp::create(
            e.b, e.vec(32, e.byte()), bytes,
            ValueRange{e.add(row, e.mul(j, e.cIndex(2)))});
        Value halves = vector::BitCastOp::create(e.b, e.vec(16, half), raw);
        weights.push_back(
            f16 ? arith::ExtFOp::create(e.b, e.vec(16, e.f32()), halves)
                      .getResult()
                : e.fromBF16(halves));
      }
      return weights;
    };
    Value pairs = e.sub(cols, e.remu(cols, c32));
    Value whole = e.sub(cols, e.remu(cols, c16));
    SmallVector<Value> carried =
        e.forLoop(c0, pairs, c32, inits,
                  [&](Value j, ValueRange accs) -> SmallVector<Value> {
                    prefetch(e.mul(j, e.cIndex(2)), 64,
                             halfDecodeTilePrefetchBytes(farPrefetch));
                    SmallVector<Value> next = piece(j, widen(j), 0, accs);
                    Value second = e.add(j, c16);
                    return piece(second, widen(second), 1, next);
                  });
    carried = e.forLoop(pairs, whole, c16, carried,
                        [&](Value j, ValueRange accs) -> SmallVector<Value> {
                          return piece(j, widen(j), 0, accs);
                        });
    return e.forLoop(whole, cols, c1, carried,
                     [&](Value j, ValueRange accs) -> SmallVector<Value> {
                       SmallVector<Value> weights;
                       for (Value row : rows)
                         weights.push_back(
                             e.weightElement(format, bytes, row, j));
                       return tail(j, weights, 0, accs);
                     });
  }
  kvrt::BlockLayout block = kvrt::blockLayout(format);
  ForwardEmitter::Groups groups = ForwardEmitter::groupsOf(format);
  Value blocks = e.divu(cols, e.cIndex(block.elements));
  return e.forLoop(
      c0, blocks, c1, inits,
      [&](Value i, ValueRange accs) -> SmallVector<Value> {
        Value within = e.mul(i, e.cIndex(block.bytes));
        prefetch(within, block.bytes);
        Value first = e.mul(i, e.cIndex(block.elements));
        SmallVector<Value> carried(accs);
        // The K-quants' 8 scales and mins of each row's block, decoded
        // together (kQuantScalesMins) rather than one group at a time.
        bool kQuant = format == KVRT_WEIGHT_Q4_K || format == KVRT_WEIGHT_Q5_K;
        SmallVector<Value> scalesMins;
        if (kQuant)
          for (Value row : rows)
            scalesMins.push_back(e.kQuantScalesMins(bytes, e.add(row, within)));
        for (int64_t g = 0; g < groups.count; ++g) {
          Value group = e.cIndex(g);
          SmallVector<Value> weights;
          for (auto [r, row] : llvm::enumerate(rows)) {
            Value at = e.add(row, within);
            auto [scale, min] =
                kQuant
                    ? std::pair<Value, Value>(
                          vector::ExtractOp::create(e.b, scalesMins[r], g),
                          vector::ExtractOp::create(e.b, scalesMins[r], 8 + g))
                    : e.groupScale(format, bytes, at, group);
            Value q =
                e.groupQuant(format, bytes, at, group, c0, groups.elements);
            weights.push_back(e.dequant(scale, min, q));
          }
          carried = piece(e.add(first, e.cIndex(g * groups.elements)), weights,
                          g, carried);
        }
        return carried;
      });
}

/// Widens row `row` of `cols` weights in `format` to f32 into `out`
/// (memref<?xf32>), exactly (foldRows).
void emitWidenRow(ForwardEmitter &e, kvrt_weight_format format, Value bytes,
                  Value row, Value cols, Value out) {
  auto store = [&](Value col, ArrayRef<Value> w, int64_t, ValueRange) {
    if (isa<VectorType>(w[0].getType()))
      vector::StoreOp::create(e.b, w[0], out, ValueRange{col});
    else
      e.store(w[0], out, {col});
    return SmallVector<Value>();
  };
  foldRows(e, format, bytes, {row}, cols, {}, store, store);
}

} // namespace

bool cpu::decodePrefetchesFar() {
  int64_t ways = hostL1DataWays();
  return ways == 0 || ways >= 12;
}

int64_t cpu::halfDecodeTilePrefetchBytes(bool far) { return far ? 512 : 256; }

int64_t cpu::kQuantTilePrefetchBlocks(bool far) { return far ? 8 : 1; }

/// The decode's tiles (fewer than kPackedMinRows rows): this many weight
/// rows at a time (decodeTileRow's), each token's activations loaded once per
/// piece for all of them. One row at a time left one stream of misses in
/// flight and, for f16, one FMA chain: the memory idled while the row's
/// multiply ran. Measured with a C model of the loop on TinyLlama's F16 file
/// (rows of 4 and 11 KiB, 2 GB, far beyond the L3), one thread, in CPU time
/// on a loaded machine, a tile's rows consecutive: one row, one chain 9.5
/// GB/s of weights; 4 rows, two accumulators each, 12.6 GB/s; with
/// prefetchTileRows 14.1-14.4 GB/s, a plain read of 4 streams 14.2-15; 8
/// rows no faster than 4. With decodeTileRow's rows, kv-run --greedy on
/// TinyLlama's files, one thread, ms a step (alternated runs, idle
/// machine): F16 with 8 rows 184.8-186.3 against 203.6-211.1 with 6 and
/// 204.2-204.9 with 4 (two threads 96.6-98.9 against 106.1-108.5); the
/// Q5_K_M file's Q5_K (widened here) with 4 rows 97.0-98.2 against
/// 103.0-105.7 with 6 and 105.8-108.2 with 8. BF16 keeps 4: a BF16 file
/// took 129.7-137.8 ms with 4 rows, 132.6-133.6 with 8 and 132.9-138.6 with
/// 6, no difference beyond the noise.
/// Those F16 figures are an Intel Xeon's, whose L1 data cache has 12 ways.
/// An F16 row of TinyLlama's is 4 KiB (k = 2048) and a tile's rows lie a
/// multiple of 4 KiB apart, so the lines a tile reads at one column all fall
/// into one set of the L1: 8 of them fill an 8-way L1 with nothing left for
/// the activations or the lines prefetched ahead. On an AMD EPYC (Zen 4,
/// 32 KiB 8-way L1) 4 rows did better than 8 and 6 between them: one
/// thread, 64-token prompt, 32 steps, ms a step, four to six alternated
/// runs, median 4 / 6 / 8: 95.2 / - / 121.4, 123.2 / 133.9 / 144.7 (a
/// slower hour); two threads 71.8 / 72.9 / 78.9. Q8_0's and Q4_K's integer
/// tiles (rows of 2176 and 1152 bytes) showed no such difference there. So
/// F16 takes 8 rows where the host's L1 has 12 ways or more (or says
/// nothing), else 4.
int64_t cpu::decodeTileRows(kvrt_weight_format format) {
  if (format != KVRT_WEIGHT_F16)
    return 4;
  int64_t ways = hostL1DataWays();
  return ways == 0 || ways >= 12 ? 8 : 4;
}
/// a[t] · (each row of a decode tile: `k` weights in `format` from the
/// bytes `rows`, decodeTileRow's), the weights widened in
/// registers (foldRows) and multiplied as they come: nothing is copied.
/// The 16 activations of each part of a piece are loaded once for all the
/// rows. Per row two 16-lane accumulators (alternating over the 16-lane
/// parts of the pieces) and a scalar one for a tail; returns the rows' sums.
SmallVector<Value> cpu::emitQuantDots(ForwardEmitter &e,
                                      kvrt_weight_format format, Value a,
                                      Value bytes, ArrayRef<Value> rows,
                                      Value t, Value k, bool farPrefetch) {
  VectorType v16 = e.vec(kLanes, e.f32());
  int64_t count = rows.size();
  Value zero = e.splatF32(kLanes, 0.0f);
  Value scalarZero = arith::ConstantOp::create(e.b, e.b.getF32FloatAttr(0.0f));
  // The carried values: row r's accumulators at 2r and 2r + 1, its scalar
  // one at 2 count + r.
  SmallVector<Value> inits(2 * count, zero);
  inits.append(count, scalarZero);
  auto piece = [&](Value col, ArrayRef<Value> weights, int64_t slot,
                   ValueRange accs) -> SmallVector<Value> {
    SmallVector<Value> next(accs);
    int64_t parts =
        cast<VectorType>(weights[0].getType()).getNumElements() / kLanes;
    for (int64_t j = 0; j < parts; ++j) {
      Value x = vector::LoadOp::create(
          e.b, v16, a, ValueRange{t, e.add(col, e.cIndex(j * kLanes))});
      int64_t slotOf = (slot * parts + j) % 2;
      for (int64_t r = 0; r < count; ++r) {
        Value part = parts == 1
                         ? weights[r]
                         : vector::ExtractStridedSliceOp::create(
                               e.b, weights[r], ArrayRef<int64_t>{j * kLanes},
                               ArrayRef<int64_t>{kLanes}, ArrayRef<int64_t>{1});
        next[2 * r + slotOf] =
            vector::FMAOp::create(e.b, x, part, next[2 * r + slotOf]);
      }
    }
    return next;
  };
  auto tail = [&](Value col, ArrayRef<Value> weights, int64_t,
                  ValueRange accs) -> SmallVector<Value> {
    SmallVector<Value> next(accs);
    Value x = e.load(a, {t, col});
    for (int64_t r = 0; r < count; ++r)
      next[2 * count + r] = arith::AddFOp::create(
          e.b, accs[2 * count + r], arith::MulFOp::create(e.b, x, weights[r]));
    return next;
  };
  SmallVector<Value> accs =
      foldRows(e, format, bytes, rows, k, inits, piece, tail,
               /*prefetchRows=*/true, farPrefetch);
  SmallVector<Value> sums;
  for (int64_t r = 0; r < count; ++r) {
    Value sum = vector::ReductionOp::create(
        e.b, vector::CombiningKind::ADD,
        arith::AddFOp::create(e.b, accs[2 * r], accs[2 * r + 1]));
    sums.push_back(arith::AddFOp::create(e.b, sum, accs[2 * count + r]));
  }
  return sums;
}

std::string cpu::quantMatmulName(kvrt_weight_format format, bool accumulate) {
  return std::string("matmul_") + kvrt::weightFormatName(format) +
         (accumulate ? "_acc" : "");
}

std::string cpu::int8MatmulName(kvrt_weight_format format, bool accumulate,
                                bool repacked) {
  return std::string("matmul_") + kvrt::weightFormatName(format) +
         (repacked ? "_rows16" : "") + (accumulate ? "_acc" : "");
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

Value cpu::decodeTileRow(ForwardEmitter &e, Value tile, Value tiles,
                         int64_t r) {
  return e.add(tile, e.mul(tiles, e.cIndex(r)));
}

void cpu::prefetchTileRows(ForwardEmitter &e, Value bytes, ArrayRef<Value> rows,
                           Value at, int64_t stepBytes, int64_t aheadBytes) {
  Value ahead = e.add(at, e.cIndex(aheadBytes));
  for (Value row : rows)
    for (int64_t line = 0; line < stepBytes; line += 64)
      memref::PrefetchOp::create(
          e.b, bytes, ValueRange{e.add(row, e.add(ahead, e.cIndex(line)))},
          /*isWrite=*/false, /*localityHint=*/3, /*isDataCache=*/true);
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
/// than kPackedMinRows (decode): parallel over tiles of decodeTileRows
/// outputs, the tile's weight rows widened in registers as they are
/// multiplied with a token's row (emitQuantDots): nothing is packed,
/// converted into memory or copied. More rows (prefill): the weights widened
/// to f32, as many rows at a time as the widen buffer holds (in parallel),
/// then multiplied by the f32 packed kernel (matmul_nt) into those columns
/// of c. Widening is exact, so either way the product is the f32 path's on
/// the dequantised weights.
void cpu::emitQuantMatmul(ForwardEmitter &e, kvrt_weight_format format,
                          bool accumulate, bool farPrefetch) {
  std::string base = quantMatmulName(format, accumulate);
  func::FuncOp fn = beginQuantMatmul(e, base);
  Value a = fn.getArgument(0), bytes = fn.getArgument(1),
        offset = fn.getArgument(2), c = fn.getArgument(3),
        packed = fn.getArgument(4), widen = fn.getArgument(5);
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  Value n = memref::DimOp::create(e.b, a, c0);
  Value m = memref::DimOp::create(e.b, c, c1);
  Value small = e.cmp(arith::CmpIPredicate::ult, n, e.cIndex(kPackedMinRows));
  e.ifElse(
      small,
      [&] {
        DecodeKernel kernel{format, /*int8=*/false, Int8Isa::Vnni512,
                            /*repacked=*/false, farPrefetch};
        parallelFor(e, base + "_dot_task", decodeTileCount(e, kernel, m),
                    {a, bytes, offset, c},
                    [&](ValueRange v, Value lo, Value hi) {
                      // (The task is a function of its own: values of the
                      // caller do not reach it but through `v`.)
                      DecodeInput in;
                      in.a = v[0];
                      in.n = memref::DimOp::create(e.b, v[0], e.cIndex(0));
                      in.k = memref::DimOp::create(e.b, v[0], e.cIndex(1));
                      emitDecodeTiles(e, kernel, in, v[1], v[2], v[3], lo, hi,
                                      accumulate);
                    });
      },
      [&] {
        emitWidenedProduct(e, format, base, a, bytes, offset, c, packed, widen,
                           accumulate);
      });
  e.finishFunction();
}
