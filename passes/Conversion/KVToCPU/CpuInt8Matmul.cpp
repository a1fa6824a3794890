//===- CpuInt8Matmul.cpp - Matmuls by integer dot products ----*- C++ -*-===//
//
// The matmuls of quantised weights by integer dot products, as llama.cpp
// computes them: the activations quantised to int8 per block of 32 (for
// Q8_0 weights) or of 256 (for the K-quants), the weights' quants multiplied
// by AVX-512 VNNI (vpdpbusd; a K-quant decode step's packed to words for
// vpdpwssd by the groups' scales), or a Q8_0 or Q4_K prefill's by AMX tiles
// (tdpbssd, tdpbsud),
// or, on a host without VNNI (Int8Isa::Avx2), a decode step's by AVX2's
// vpmaddubsw and vpmaddwd on the 256-bit halves of the same values, and
// scaled per block (docs/cpu-backend.md, "Quantised weights").
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/KVToCPU/CpuKernels.h"
#include "passes/Conversion/KVToCPU/CpuParallel.h"

#include "mlir/Dialect/AMX/AMXDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::kv;
using namespace mlir::kv::cpu;

namespace {

/// The prefill's register tiles: `kInt8PanelRows` tokens x
/// `kInt8TilePanels` panels of 16 outputs, an i32 and an f32 accumulator
/// each, beside the panel's 8 loads of a block (LLVM hoists them all) and
/// the tokens' quants broadcast from memory into vpdpbusd. Measured on a
/// dim-512 prefill: 6 x 1 spills nothing and is fastest; 2 panels (4 x 2,
/// 3 x 2) spill to unaligned stack slots and took 1.2-1.5x as long, 4, 7
/// and 8 tokens of one panel 1.05-1.2x.
constexpr int64_t kInt8PanelRows = 6, kInt8TilePanels = 1;
/// The AMX prefill's tiles (quant-dot=amx, Q8_0): kAmxRows tokens (an AMX
/// tile's 16 rows) x kAmxTilePanels panels of 16 outputs, an A tile shared
/// by the panels' B and C tiles, and 16 f32 accumulators per panel (32
/// registers for 2: the few that spill cost less than loading A twice).
/// kAmxBlocks blocks' tiles are multiplied together (kAmxBlocks x (1 + 2
/// kAmxTilePanels) of the 8 tile registers: tiles are not renamed, so
/// reusing one waits for the instruction before), and kAmxGroupBlocks
/// blocks' C tiles stored before they are scaled. Measured on the
/// dim-512 Q8_0 prefill (512 tokens, 1 thread, perf samples of the tile
/// tasks on a loaded machine, against int8's 270-285): 1 panel x 1 block,
/// scaled right after its store, 350; grouped by 8 blocks, 2 at a time,
/// with the bias and the token's scale loads out of the scaling (unbiased
/// panels, tdpbssd; scales block-major), and groups pipelined 231-255;
/// groups of 4 the same; 2 panels x 1 block 215-228.
constexpr int64_t kAmxRows = 16, kAmxTilePanels = 2;
/// The weight rows of an AVX2 decode tile (every format): each row's
/// accumulator takes two of the 16 ymm registers.
constexpr int64_t kAvx2TileOutputs = 2;
constexpr int64_t kAmxBlocks = 1, kAmxGroupBlocks = 8;

/// The x86 intrinsic `name` of `operands`, of type `type` (LLVM 22 forms
/// none of those used here from generic vector IR that keeps lanes apart).
Value x86(ForwardEmitter &e, Type type, StringRef name, ValueRange operands) {
  return LLVM::CallIntrinsicOp::create(e.b, type, e.b.getStringAttr(name),
                                       operands)
      .getResult(0);
}

/// `lo` (vector<8xT>) and `hi` side by side.
Value concat(ForwardEmitter &e, Value lo, Value hi) {
  int64_t lanes = cast<VectorType>(lo.getType()).getNumElements();
  SmallVector<int64_t> order;
  for (int64_t i = 0; i < 2 * lanes; ++i)
    order.push_back(i);
  return vector::ShuffleOp::create(e.b, lo, hi, order);
}

/// `op` on the 256-bit halves of `operands` (512-bit vectors), its results
/// side by side: AVX2's instructions on the values the VNNI kernels hold in
/// one register (LLVM keeps the halves in two registers throughout).
Value byHalves(ForwardEmitter &e, ValueRange operands,
               function_ref<Value(ValueRange)> op) {
  SmallVector<Value> results;
  for (int64_t h = 0; h < 2; ++h) {
    SmallVector<Value> halves;
    for (Value v : operands) {
      int64_t lanes = cast<VectorType>(v.getType()).getNumElements() / 2;
      halves.push_back(vector::ExtractStridedSliceOp::create(
          e.b, v, ArrayRef<int64_t>{h * lanes}, ArrayRef<int64_t>{lanes},
          ArrayRef<int64_t>{1}));
    }
    results.push_back(op(halves));
  }
  return concat(e, results[0], results[1]);
}

/// AVX2's vpmaddwd of two vector<16xi16>: lane j a[2j] b[2j] + a[2j + 1]
/// b[2j + 1], i32.
Value maddWords256(ForwardEmitter &e, Value a, Value b) {
  return x86(e, e.vec(8, e.i32()), "llvm.x86.avx2.pmadd.wd", {a, b});
}

/// AVX2's vpmaddubsw of two vector<32xi8>: lane j u[2j] s[2j] + u[2j + 1]
/// s[2j + 1], unsigned by signed, as i16 (saturating).
Value maddBytes256(ForwardEmitter &e, Value u, Value s) {
  return x86(e, e.vec(16, e.b.getI16Type()), "llvm.x86.avx2.pmadd.ub.sw",
             {u, s});
}

/// vector<16xi16> of ones, for vpmaddwd's pairwise sums.
Value oneWords256(ForwardEmitter &e) {
  return arith::ConstantOp::create(
      e.b, DenseElementsAttr::get(e.vec(16, e.b.getI16Type()),
                                  e.b.getI16IntegerAttr(1)));
}

/// vpdpbusd: lane j of `acc` plus the sum over r < 4 of u[4j + r]
/// (unsigned) * s[4j + r] (signed). VNNI: exactly. AVX2 (vpmaddubsw, then
/// vpmaddwd by ones): exactly where no two neighbours' products pass the
/// i16 range (|u s| + |u' s'| <= 32767), as for the activations' sums by
/// 128 (emitQuantizeRows); the Q8_0 tile takes dotSignedBytes.
Value dotBytes(ForwardEmitter &e, Value acc, Value u, Value s, Int8Isa isa) {
  if (isa == Int8Isa::Vnni512)
    return x86(e, e.vec(16, e.i32()), "llvm.x86.avx512.vpdpbusd.512",
               {acc, u, s});
  return arith::AddIOp::create(
      e.b, acc, byHalves(e, {u, s}, [&](ValueRange h) {
        return maddWords256(e, maddBytes256(e, h[0], h[1]), oneWords256(e));
      }));
}

/// AVX2: lane j of `acc` plus the sum over r < 4 of w[4j + r] x[4j + r],
/// both signed, exactly: vpmaddubsw of |w| (as unsigned, 128 for -128) and
/// x with w's sign (vpsignb), whose pairs stay within 2 x 128 x 127, then
/// vpmaddwd by ones (llama.cpp's AVX2 Q8_0 dot).
Value dotSignedBytes(ForwardEmitter &e, Value acc, Value w, Value x) {
  return arith::AddIOp::create(
      e.b, acc, byHalves(e, {w, x}, [&](ValueRange h) {
        Value magnitude = math::AbsIOp::create(e.b, h[0]);
        Value signedX =
            x86(e, e.vec(32, e.byte()), "llvm.x86.avx2.psign.b", {h[1], h[0]});
        return maddWords256(e, maddBytes256(e, magnitude, signedX),
                            oneWords256(e));
      }));
}

/// `value` in every byte of a vector of `type`.
Value splatBytes(ForwardEmitter &e, VectorType type, int8_t value) {
  return arith::ConstantOp::create(
      e.b, DenseElementsAttr::get(type, e.b.getI8IntegerAttr(value)));
}

/// The sum of lanes first .. first + count - 1 of `v` (vector of i32).
Value laneSum(ForwardEmitter &e, Value v, int64_t first, int64_t count) {
  Value lanes = vector::ExtractStridedSliceOp::create(
      e.b, v, ArrayRef<int64_t>{first}, ArrayRef<int64_t>{count},
      ArrayRef<int64_t>{1});
  return vector::ReductionOp::create(e.b, vector::CombiningKind::ADD, lanes);
}

/// Scalars `a` and `b` (f32) as [a x 8 | b x 8].
Value pairScales(ForwardEmitter &e, Value a, Value b) {
  VectorType v8 = e.vec(8, e.f32());
  return concat(e, vector::BroadcastOp::create(e.b, v8, a),
                vector::BroadcastOp::create(e.b, v8, b));
}

/// The f16 scales of a whole pair of 32-element blocks, at bytes 0 and
/// `second` of `bytes` from `at`, as f32 [d0, d1]: two word loads, one
/// conversion. The caller multiplies them by the token's two scales before
/// spreading them to the pair's 16 lanes (spreadPair), so that the 512-bit
/// work a row and pair is the spread alone: a word permute, a 512-bit
/// conversion and a 512-bit multiply took about 8% more of a Q8_0 step
/// that stays in the L3 (docs/cpu-backend.md).
Value pairScalesAt(ForwardEmitter &e, Value bytes, Value at, int64_t second) {
  Type i16 = e.b.getI16Type();
  auto word = [&](Value from) -> Value {
    Value two = vector::LoadOp::create(e.b, e.vec(2, e.byte()), bytes,
                                       ValueRange{from});
    return vector::ExtractOp::create(
        e.b, vector::BitCastOp::create(e.b, e.vec(1, i16), two), int64_t(0));
  };
  Value pair = vector::FromElementsOp::create(
      e.b, e.vec(2, i16),
      ValueRange{word(at), word(e.add(at, e.cIndex(second)))});
  return arith::ExtFOp::create(
      e.b, e.vec(2, e.f32()),
      vector::BitCastOp::create(e.b, e.vec(2, e.b.getF16Type()), pair)
          .getResult());
}

/// A pair's two values `two` (vector<2xf32>) as [two[0] x 8 | two[1] x 8].
Value spreadPair(ForwardEmitter &e, Value two) {
  SmallVector<int64_t> order(8, 0);
  order.append(8, 1);
  return vector::ShuffleOp::create(e.b, two, two, order);
}

/// One register tile of a decode step of Q8_0 or Q4_0 weights: token t (a
/// row of the quantised activations, a scale per 32) against weight rows
/// starting at byte `rowAt` (one per output), over the whole row; returns
/// the sums. Per pair of blocks p and output: Q8_0's 64 quants biased by
/// +128 (xor 0x80) as vpdpbusd's unsigned bytes, the dot started at the
/// token's bias (-128 sum q); Q4_0's 64 nibbles as they are (q in 0 .. 15,
/// an element d (q - 8)), the dot started at the bias / 16 (-8 sum q). So
/// the integer lanes hold sum w q exactly (an odd last block pairs with
/// zeros), converted to f32 and FMA'd with [d0 x 8 | d1 x 8] times the
/// token's scales into the accumulator. Q4_0's block holds elements 0 .. 15
/// in the low nibbles of its 16 bytes and 16 .. 31 in the high ones: the
/// 16 bytes loaded into two 128-bit lanes, the second lane's words shifted
/// right by 4 (vpsrlvw), masked.
SmallVector<Value> emitBlock32DecodeTile(ForwardEmitter &e,
                                         kvrt_weight_format format, Value bytes,
                                         const Int8Activations &act, Value k,
                                         Value t, ArrayRef<Value> rowAt,
                                         Int8Isa isa) {
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  bool q4 = format == KVRT_WEIGHT_Q4_0;
  int64_t blockBytes = q4 ? 18 : 34;
  VectorType v16f = e.vec(16, e.f32()), v16i = e.vec(16, e.i32()),
             v16b = e.vec(16, e.byte()), v32b = e.vec(32, e.byte()),
             v64b = e.vec(64, e.byte()), v32w = e.vec(32, e.b.getI16Type());
  Value flip = splatBytes(e, v64b, -128), zeroBlock = splatBytes(e, v32b, 0);
  Value quantsRow = e.mul(act.pairs, e.cIndex(64));
  Value laneRow = e.mul(act.pairs, e.cIndex(16));
  // Q4_0: a pair's 32 bytes [b0, b0, b1, b1] to its 64 quants.
  auto nibbles = [&](Value q0, Value q1) -> Value {
    SmallVector<int16_t> counts;
    for (int64_t lane = 0; lane < 32; ++lane)
      counts.push_back(lane % 16 < 8 ? 0 : 4);
    Value words = vector::BitCastOp::create(
        e.b, v32w, concat(e, concat(e, q0, q0), concat(e, q1, q1)));
    Value shifted = arith::ShRUIOp::create(
        e.b, words,
        arith::ConstantOp::create(
            e.b, DenseElementsAttr::get(v32w, ArrayRef<int16_t>(counts))));
    return arith::AndIOp::create(e.b,
                                 vector::BitCastOp::create(e.b, v64b, shifted),
                                 splatBytes(e, v64b, 0x0F));
  };
  auto multiply = [&](Value p, bool full, ValueRange accs) {
    Value block0 = e.mul(p, e.cIndex(2 * blockBytes));
    prefetchTileRows(e, bytes, rowAt, block0, 2 * blockBytes);
    Value quants = vector::LoadOp::create(
        e.b, v64b, act.quants,
        ValueRange{e.add(e.mul(t, quantsRow), e.mul(p, e.cIndex(64)))});
    Value lanes = e.add(e.mul(t, laneRow), e.mul(p, e.cIndex(16)));
    // Q8_0 by VNNI: the weights enter vpdpbusd biased (w + 128), the dot
    // started at the token's -128 sum q; AVX2 takes them signed
    // (dotSignedBytes). Q4_0: unsigned as they are, started at -8 sum q.
    Value bias;
    if (q4 || isa == Int8Isa::Vnni512)
      bias = vector::LoadOp::create(e.b, v16i, act.bias, ValueRange{lanes});
    if (q4)
      bias = arith::ShRSIOp::create(e.b, bias, e.splatI32(16, 4));
    // The token's scales of the pair's two blocks (lanes 0 and 8).
    Value d = vector::FromElementsOp::create(
        e.b, e.vec(2, e.f32()),
        ValueRange{e.load(act.scales, {lanes}),
                   e.load(act.scales, {e.add(lanes, e.cIndex(8))})});
    SmallVector<Value> next;
    for (auto [row, acc] : llvm::zip_equal(rowAt, accs)) {
      Value at0 = e.add(row, block0), at1 = e.add(at0, e.cIndex(blockBytes));
      VectorType loaded = q4 ? v16b : v32b;
      Value q0 = vector::LoadOp::create(e.b, loaded, bytes,
                                        ValueRange{e.add(at0, e.cIndex(2))});
      Value q1 =
          full ? vector::LoadOp::create(e.b, loaded, bytes,
                                        ValueRange{e.add(at1, e.cIndex(2))})
                     .getResult()
          : q4 ? splatBytes(e, v16b, 0)
               : zeroBlock;
      // An odd last block: its scale beside a zero.
      Value scales = full ? pairScalesAt(e, bytes, at0, blockBytes)
                          : vector::FromElementsOp::create(
                                e.b, e.vec(2, e.f32()),
                                ValueRange{e.loadF16(bytes, at0), e.cF32(0.0f)})
                                .getResult();
      Value dot;
      if (q4)
        dot = dotBytes(e, bias, nibbles(q0, q1), quants, isa);
      else if (isa == Int8Isa::Vnni512)
        dot = dotBytes(e, bias,
                       arith::XOrIOp::create(e.b, concat(e, q0, q1), flip),
                       quants, isa);
      else
        dot = dotSignedBytes(e, e.splatI32(16, 0), concat(e, q0, q1), quants);
      Value scale = spreadPair(e, arith::MulFOp::create(e.b, scales, d));
      Value wide = arith::SIToFPOp::create(e.b, v16f, dot);
      next.push_back(vector::FMAOp::create(e.b, wide, scale, acc));
    }
    return next;
  };
  SmallVector<Value> accs(rowAt.size(), e.splatF32(16, 0.0f));
  Value blocks = e.divu(k, e.cIndex(32));
  Value fullPairs = e.divu(blocks, e.cIndex(2));
  accs = e.forLoop(c0, fullPairs, c1, accs, [&](Value p, ValueRange accs) {
    return multiply(p, /*full=*/true, accs);
  });
  SmallVector<Type> types(accs.size(), v16f);
  accs = e.ifThenElse(
      e.cmp(arith::CmpIPredicate::ne, e.remu(blocks, e.cIndex(2)), c0), types,
      [&] { return multiply(fullPairs, /*full=*/false, accs); },
      [&] { return accs; });
  SmallVector<Value> sums;
  for (Value acc : accs)
    sums.push_back(
        vector::ReductionOp::create(e.b, vector::CombiningKind::ADD, acc));
  return sums;
}

/// vpmaddubsw (AVX-512 BW, or AVX2 on each half): lane j the sum u[2j]
/// s[2j] + u[2j + 1] s[2j + 1] of unsigned by signed bytes, as i16
/// (saturating: the callers' stay far below it).
Value maddBytes(ForwardEmitter &e, Value u, Value s, Int8Isa isa) {
  if (isa == Int8Isa::Vnni512)
    return x86(e, e.vec(32, e.b.getI16Type()), "llvm.x86.avx512.pmaddubs.w.512",
               {u, s});
  return byHalves(e, {u, s},
                  [&](ValueRange h) { return maddBytes256(e, h[0], h[1]); });
}

/// vpdpwssd (AVX-512 VNNI; AVX2: vpmaddwd and an add on each half): lane j
/// of `acc` plus a[2j] b[2j] + a[2j + 1] b[2j + 1] (signed words), exactly.
Value dotWords(ForwardEmitter &e, Value acc, Value a, Value b, Int8Isa isa) {
  if (isa == Int8Isa::Vnni512)
    return x86(e, e.vec(16, e.i32()), "llvm.x86.avx512.vpdpwssd.512",
               {acc, a, b});
  return arith::AddIOp::create(e.b, acc, byHalves(e, {a, b}, [&](ValueRange h) {
                                 return maddWords256(e, h[0], h[1]);
                               }));
}

/// pmaddwd of `a` and `b` (vector<8xi16> or <16xi16>): lane j a[2j] b[2j] +
/// a[2j + 1] b[2j + 1], i32.
Value maddWords(ForwardEmitter &e, Value a, Value b) {
  int64_t lanes = cast<VectorType>(a.getType()).getNumElements();
  return x86(e, e.vec(lanes / 2, e.i32()),
             lanes == 8 ? "llvm.x86.sse2.pmadd.wd" : "llvm.x86.avx2.pmadd.wd",
             {a, b});
}

/// The bytes of `lanes` (a vector<16xi8> in each 128-bit lane) as a
/// vector<32xi16>: lane j byte `index[j / (32 / index.size())]`,
/// zero-extended (a byte per run of lanes), by one in-lane byte shuffle
/// (vpshufb: no table register to copy, as a two-source byte permute has).
Value spreadBytes(ForwardEmitter &e, Value lanes, ArrayRef<int64_t> index,
                  Int8Isa isa) {
  int64_t run = 32 / index.size();
  SmallVector<int8_t> control;
  for (int64_t word = 0; word < 32; ++word)
    control.append({int8_t(index[word / run]), int8_t(-128)});
  Value mask = arith::ConstantOp::create(
      e.b, DenseElementsAttr::get(e.vec(64, e.byte()), ArrayRef(control)));
  Value spread = isa == Int8Isa::Vnni512
                     ? x86(e, e.vec(64, e.byte()),
                           "llvm.x86.avx512.pshuf.b.512", {lanes, mask})
                     : byHalves(e, {lanes, mask}, [&](ValueRange h) {
                         return x86(e, e.vec(32, e.byte()),
                                    "llvm.x86.avx2.pshuf.b", {h[0], h[1]});
                       });
  return vector::BitCastOp::create(e.b, e.vec(32, e.b.getI16Type()), spread);
}

/// Bits of `v` (vector<64xi8>) moved by `first` places in its first 32
/// bytes and by `second` in its last 32 (left where positive, right where
/// negative; both one way), then masked by `keep`: 16-bit shifts, so a bit
/// crossing into the byte above or below is one `keep` masks off (left by
/// at most the lowest kept bit's place, right by at most 7 less the highest
/// kept bit's).
Value moveBits(ForwardEmitter &e, Value v, int64_t first, int64_t second,
               uint8_t keep) {
  assert((first >= 0 && second >= 0) || (first <= 0 && second <= 0));
  bool left = first > 0 || second > 0;
  VectorType v32w = e.vec(32, e.b.getI16Type()), v64b = e.vec(64, e.byte());
  SmallVector<int16_t> counts(32, std::abs(first));
  std::fill(counts.begin() + 16, counts.end(), std::abs(second));
  Value words = vector::BitCastOp::create(e.b, v32w, v);
  Value amounts = arith::ConstantOp::create(
      e.b, DenseElementsAttr::get(v32w, ArrayRef<int16_t>(counts)));
  Value shifted = left
                      ? arith::ShLIOp::create(e.b, words, amounts).getResult()
                      : arith::ShRUIOp::create(e.b, words, amounts).getResult();
  return arith::AndIOp::create(e.b,
                               vector::BitCastOp::create(e.b, v64b, shifted),
                               splatBytes(e, v64b, keep));
}

/// VNNI: `sum` plus the products of two runs of groups scaled per group:
/// vpdpbusd of `u0` by `s0` and of `u1` by `s1` (unsigned by signed bytes)
/// from zero, the two results' i32 lanes packed to words (vpackssdw: 128-bit
/// lane k holds lanes 4k .. 4k + 3 of the first, then of the second), times
/// `scales` (vector<32xi16>, each word its group's scale) by vpdpwssd. Exact
/// while no lane of the dots passes the i16 range: 4 x 63 x 128 = 32256 for
/// Q6_K's quants (0 .. 63) by Q8_K's (-128 .. 127). Two products per 128
/// bytes, where vpmaddubsw and vpdpwssd took two each.
Value packedGroupDots(ForwardEmitter &e, Value sum, Value u0, Value s0,
                      Value u1, Value s1, Value scales) {
  Value zero = e.splatI32(16, 0);
  Value packed =
      x86(e, e.vec(32, e.b.getI16Type()), "llvm.x86.avx512.packssdw.512",
          {dotBytes(e, zero, u0, s0, Int8Isa::Vnni512),
           dotBytes(e, zero, u1, s1, Int8Isa::Vnni512)});
  return dotWords(e, sum, packed, scales, Int8Isa::Vnni512);
}

/// One register tile of a decode step of Q4_K, Q5_K or Q6_K weights: token t
/// (activations with a scale per 256, llama.cpp's Q8_K) against the weight
/// rows starting at byte `rowAt`, over the whole row; returns the sums. As
/// llama.cpp's ggml_vec_dot_q4_K_q8_K: per 256-element block and row, the
/// quants times the token's, times the groups' integer scales and summed,
/// so that the block's sum is exact in i32; converted to f32 and FMA'd with
/// d x (the token's scale) once per block. VNNI: two runs of quants by
/// vpdpbusd, packed to words, scaled by one vpdpwssd (packedGroupDots);
/// AVX2: vpmaddubsw (pairs of products as i16), scaled by vpmaddwd. The
/// token's 4 vectors of a block's quants are loaded once for all rows.
/// - Q4_K: a 64-byte load of qs holds elements [128h + 0 .. 31 | 128h + 64
///   .. 95] in its low nibbles and [128h + 32 .. 63 | 128h + 96 .. 127] in
///   its high ones (ggml's layout), so the token's quants are shuffled to
///   match; the 6-bit scales and mins decoded from their 12 bytes in
///   integers (ForwardEmitter::kQuantScalesMinsBytes). An element is d sc q -
///   dmin m: the mins enter once per block as dmin dx sum_g m_g (sum of the
///   token's quants over group g), pmaddwd of the mins with the token's sums
///   of 32, into an accumulator of their own per pair of rows (4 lanes a
///   row), added to the row's sum at the end.
/// - Q5_K: Q4_K's scales, mins and nibbles (qs at byte 48, not 16), and a
///   fifth bit per element from qh (bytes 16 .. 47: element 32g + l takes bit
///   g of qh[l]) moved to bit 4 (moveBits), q unsigned 0 .. 31.
/// - Q6_K: a 64-byte load of ql holds elements 128h + 0 .. 63 in its low
///   nibbles and 128h + 64 .. 127 in its high ones, the top two bits from qh
///   (a word shift and a mask each); q is unsigned (0 .. 63, an element d sc
///   (q - 32)), so the block's integer sum is less 32 sum_g sc_g (sum of the
///   token's quants over the 16-element group g).
SmallVector<Value> emitKQuantDecodeTile(ForwardEmitter &e,
                                        kvrt_weight_format format, Value bytes,
                                        const Int8Activations &act, Value k,
                                        Value t, ArrayRef<Value> rowAt,
                                        Int8Isa isa, bool farPrefetch) {
  assert(act.scaleBlock == 256 && "K-quant tiles take Q8_K activations");
  // Q4_K and Q5_K: nibbles, scales and mins; Q6_K otherwise.
  bool q5k = format == KVRT_WEIGHT_Q5_K;
  bool nibbles = format == KVRT_WEIGHT_Q4_K || q5k;
  Type i16 = e.b.getI16Type();
  VectorType v16f = e.vec(16, e.f32()), v16b = e.vec(16, e.byte()),
             v32b = e.vec(32, e.byte()), v64b = e.vec(64, e.byte());
  int64_t blockBytes = format == KVRT_WEIGHT_Q4_K ? 144 : q5k ? 176 : 210;
  int64_t qsAt = q5k ? 48 : 16;
  Value blocks = e.divu(k, e.cIndex(256));
  Value quantsRow = e.mul(act.pairs, e.cIndex(64));
  Value laneRow = e.mul(act.pairs, e.cIndex(16));
  Value sumsRow = e.mul(blocks, e.cIndex(32));
  auto bytesAt = [&](VectorType type, Value at) -> Value {
    return vector::LoadOp::create(e.b, type, bytes, ValueRange{at});
  };
  auto sequence = [](int64_t from, int64_t count) {
    SmallVector<int64_t> order;
    for (int64_t i = 0; i < count; ++i)
      order.push_back(from + i);
    return order;
  };
  // Per row an f32 accumulator of the scaled block sums.
  int64_t rows = rowAt.size();
  SmallVector<Value> inits(rows, e.splatF32(16, 0.0f));
  // Q4_K and Q5_K: per pair of rows, the mins' terms of both (4 lanes a
  // row), apart from the rows' accumulators (see below).
  if (nibbles)
    for (int64_t r = 0; r < rows; r += 2)
      inits.push_back(e.splatF32(r + 1 < rows ? 8 : 4, 0.0f));
  SmallVector<Value> accs = e.forLoop(
      e.cIndex(0), blocks, e.cIndex(1), inits,
      [&](Value b, ValueRange carried) {
        Value blockAt = e.mul(b, e.cIndex(blockBytes));
        prefetchTileRows(
            e, bytes, rowAt, blockAt, blockBytes,
            llvm::alignTo(kQuantTilePrefetchBlocks(farPrefetch) * blockBytes,
                          64));
        Value xAt = e.add(e.mul(t, quantsRow), e.mul(b, e.cIndex(256)));
        SmallVector<Value> x;
        for (int64_t i = 0; i < 4; ++i)
          x.push_back(vector::LoadOp::create(
              e.b, v64b, act.quants, ValueRange{e.add(xAt, e.cIndex(64 * i))}));
        Value dx = e.load(act.scales,
                          {e.add(e.mul(t, laneRow), e.mul(b, e.cIndex(64)))});
        Value sumsAt = e.add(e.mul(t, sumsRow), e.mul(b, e.cIndex(32)));
        SmallVector<Value> next(carried);
        if (nibbles) {
          // The token's quants as the nibbles of a 64-byte load hold them.
          SmallVector<Value> lowX, highX;
          SmallVector<int64_t> lowOrder = sequence(0, 32),
                               highOrder = sequence(32, 32);
          for (int64_t i = 0; i < 32; ++i) {
            lowOrder.push_back(64 + i);
            highOrder.push_back(96 + i);
          }
          for (int64_t h = 0; h < 2; ++h) {
            lowX.push_back(vector::ShuffleOp::create(e.b, x[2 * h],
                                                     x[2 * h + 1], lowOrder));
            highX.push_back(vector::ShuffleOp::create(e.b, x[2 * h],
                                                      x[2 * h + 1], highOrder));
          }
          // [dx, -dx]: d x dx and -dmin x dx in one multiply.
          Value dxPair = vector::FromElementsOp::create(
              e.b, e.vec(2, e.f32()),
              ValueRange{dx, arith::NegFOp::create(e.b, dx)});
          Value sums32 =
              vector::LoadOp::create(e.b, e.vec(8, i16), act.sums,
                                     ValueRange{e.add(sumsAt, e.cIndex(16))});
          Value low = splatBytes(e, v64b, 0x0F), four = splatBytes(e, v64b, 4);
          // Two rows' scales and mins decoded at once, a row per 128-bit
          // lane ([sc 0 .. 7 | m 0 .. 7], kvrt::scaleMinK4, as bytes), and
          // their mins' terms (sum_g m_g x the token's sum over group g,
          // i32) in one vpmaddwd.
          SmallVector<Value> pairScales, pairD;
          Value pairSums = concat(e, sums32, sums32);
          for (int64_t r = 0; r < rows; r += 2) {
            SmallVector<Value> blockAts{e.add(rowAt[r], blockAt)};
            if (r + 1 < rows)
              blockAts.push_back(e.add(rowAt[r + 1], blockAt));
            int64_t n = blockAts.size();
            Value scalesMins = e.kQuantScalesMinsBytes(bytes, blockAts);
            SmallVector<int64_t> minOrder;
            for (int64_t lane = 0; lane < n; ++lane)
              for (int64_t i = 8; i < 16; ++i)
                minOrder.append({16 * lane + i, 16 * n});
            Value mins = vector::BitCastOp::create(
                e.b, e.vec(8 * n, i16),
                vector::ShuffleOp::create(
                    e.b, scalesMins, splatBytes(e, e.vec(16 * n, e.byte()), 0),
                    minOrder));
            pairScales.push_back(scalesMins);
            Value minTerms = arith::SIToFPOp::create(
                e.b, e.vec(4 * n, e.f32()),
                maddWords(e, mins, n == 1 ? sums32 : pairSums));
            // [d, dmin] of the pair's rows (a 4-byte load each), converted
            // and multiplied by [dx, -dx] at once; the mins' terms FMA'd
            // with -dmin dx into the pair's own accumulator, 4 lanes a row,
            // so that a row's 16-lane accumulator takes one FMA a block.
            SmallVector<Value> halves;
            for (Value at : blockAts)
              halves.push_back(
                  vector::BitCastOp::create(e.b, e.vec(2, e.b.getF16Type()),
                                            bytesAt(e.vec(4, e.byte()), at)));
            Value both = arith::MulFOp::create(
                e.b,
                arith::ExtFOp::create(e.b, e.vec(2 * n, e.f32()),
                                      n == 1 ? halves[0]
                                             : concat(e, halves[0], halves[1])),
                n == 1 ? dxPair : concat(e, dxPair, dxPair));
            pairD.push_back(both);
            SmallVector<int64_t> dminOrder;
            for (int64_t lane = 0; lane < n; ++lane)
              dminOrder.append(4, 2 * lane + 1);
            int64_t pair = r / 2;
            next[rows + pair] = vector::FMAOp::create(
                e.b, minTerms,
                vector::ShuffleOp::create(e.b, both, both, dminOrder),
                carried[rows + pair]);
          }
          for (int64_t r = 0; r < rows; ++r) {
            Value at = e.add(rowAt[r], blockAt);
            int64_t lane = r % 2;
            SmallVector<int64_t> laneOrder;
            for (int64_t i = 0; i < 64; ++i)
              laneOrder.push_back(16 * lane + i % 16);
            Value scaleLanes = vector::ShuffleOp::create(
                e.b, pairScales[r / 2], pairScales[r / 2], laneOrder);
            Value sum = e.splatI32(16, 0);
            Value qh2;
            if (q5k) {
              Value qh = bytesAt(v32b, e.add(at, e.cIndex(16)));
              qh2 = concat(e, qh, qh);
            }
            for (int64_t h = 0; h < 2; ++h) {
              Value q = bytesAt(v64b, e.add(at, e.cIndex(qsAt + 64 * h)));
              Value lo = arith::AndIOp::create(e.b, q, low);
              Value hi = arith::ShRUIOp::create(e.b, q, four);
              if (q5k) {
                // Groups 4h, 4h + 2 (lo) and 4h + 1, 4h + 3 (hi): bit g of
                // qh[l] (g in the first 32 bytes, g + 2 in the last) to bit 4.
                auto fifth = [&](int64_t g) {
                  return moveBits(e, qh2, 4 - g, 2 - g, 0x10);
                };
                lo = arith::OrIOp::create(e.b, lo, fifth(4 * h));
                hi = arith::OrIOp::create(e.b, hi, fifth(4 * h + 1));
              }
              // Groups 4h, 4h + 2 (low nibbles) and 4h + 1, 4h + 3: packed,
              // 128-bit lanes 0-1 take 4h then 4h + 1, lanes 2-3 4h + 2
              // then 4h + 3.
              if (isa == Int8Isa::Vnni512) {
                int64_t g = 4 * h;
                sum = packedGroupDots(e, sum, lo, lowX[h], hi, highX[h],
                                      spreadBytes(e, scaleLanes,
                                                  {g, g + 1, g, g + 1, g + 2,
                                                   g + 3, g + 2, g + 3},
                                                  isa));
                continue;
              }
              sum = dotWords(
                  e, sum, maddBytes(e, lo, lowX[h], isa),
                  spreadBytes(e, scaleLanes, {4 * h, 4 * h + 2}, isa), isa);
              sum = dotWords(
                  e, sum, maddBytes(e, hi, highX[h], isa),
                  spreadBytes(e, scaleLanes, {4 * h + 1, 4 * h + 3}, isa), isa);
            }
            Value d = vector::ExtractOp::create(e.b, pairD[r / 2], 2 * lane);
            next[r] = vector::FMAOp::create(
                e.b, arith::SIToFPOp::create(e.b, v16f, sum),
                vector::BroadcastOp::create(e.b, v16f, d), next[r]);
          }
          return next;
        }
        Value sums16 = vector::LoadOp::create(e.b, e.vec(16, i16), act.sums,
                                              ValueRange{sumsAt});
        Value low = splatBytes(e, v64b, 0x0F), four = splatBytes(e, v64b, 4);
        for (int64_t r = 0; r < rows; ++r) {
          Value at = e.add(rowAt[r], blockAt);
          Value scales = bytesAt(v16b, e.add(at, e.cIndex(192)));
          Value scaleWords =
              arith::ExtSIOp::create(e.b, e.vec(16, i16), scales);
          Value sum = e.splatI32(16, 0);
          for (int64_t h = 0; h < 2; ++h) {
            Value ql = bytesAt(v64b, e.add(at, e.cIndex(64 * h)));
            Value qh = bytesAt(v32b, e.add(at, e.cIndex(128 + 32 * h)));
            Value qh2 = concat(e, qh, qh);
            // Elements 128h + 0 .. 31 take qh's bits 0-1, 32 .. 63 bits 2-3,
            // 64 .. 95 bits 4-5, 96 .. 127 bits 6-7, into bits 4-5.
            Value qLow =
                arith::OrIOp::create(e.b, arith::AndIOp::create(e.b, ql, low),
                                     moveBits(e, qh2, 4, 2, 0x30));
            Value qHigh =
                arith::OrIOp::create(e.b, arith::ShRUIOp::create(e.b, ql, four),
                                     moveBits(e, qh2, 0, -2, 0x30));
            if (isa == Int8Isa::Vnni512) {
              // Packed, 128-bit lane k takes group 8h + k (qLow's) then
              // 8h + 4 + k (qHigh's).
              SmallVector<int64_t> order;
              for (int64_t word = 0; word < 32; ++word)
                order.push_back(8 * h + word / 8 + (word % 8 < 4 ? 0 : 4));
              sum = packedGroupDots(e, sum, qLow, x[2 * h], qHigh, x[2 * h + 1],
                                    vector::ShuffleOp::create(
                                        e.b, scaleWords, scaleWords, order));
              continue;
            }
            for (int64_t half = 0; half < 2; ++half) {
              // Groups 8h + 4 half .. + 3, 8 lanes (16 elements) each.
              int64_t g = 8 * h + 4 * half;
              SmallVector<int64_t> order;
              for (int64_t lane = 0; lane < 32; ++lane)
                order.push_back(g + lane / 8);
              Value groupScales =
                  vector::ShuffleOp::create(e.b, scaleWords, scaleWords, order);
              sum = dotWords(
                  e, sum,
                  maddBytes(e, half ? qHigh : qLow, x[2 * h + half], isa),
                  groupScales, isa);
            }
          }
          // Less 32 sum_g sc_g (sum of the token's quants over group g).
          Value offsets = maddWords(e, scaleWords, sums16);
          Value wideOffsets = vector::ShuffleOp::create(
              e.b, offsets, e.splatI32(8, 0), sequence(0, 16));
          sum = arith::SubIOp::create(
              e.b, sum,
              arith::ShLIOp::create(e.b, wideOffsets, e.splatI32(16, 5)));
          Value d = arith::MulFOp::create(
              e.b, e.loadF16(bytes, e.add(at, e.cIndex(208))), dx);
          next[r] = vector::FMAOp::create(
              e.b, arith::SIToFPOp::create(e.b, v16f, sum),
              vector::BroadcastOp::create(e.b, v16f, d), next[r]);
        }
        return next;
      });
  SmallVector<Value> sums;
  for (int64_t r = 0; r < rows; ++r) {
    Value sum =
        vector::ReductionOp::create(e.b, vector::CombiningKind::ADD, accs[r]);
    if (nibbles) {
      // The row's 4 lanes of its pair's mins' terms.
      Value mins = vector::ExtractStridedSliceOp::create(
          e.b, accs[rows + r / 2], ArrayRef<int64_t>{4 * (r % 2)},
          ArrayRef<int64_t>{4}, ArrayRef<int64_t>{1});
      sum = arith::AddFOp::create(
          e.b, sum,
          vector::ReductionOp::create(e.b, vector::CombiningKind::ADD, mins));
    }
    sums.push_back(sum);
  }
  return sums;
}

/// For each of the 16 outputs o of panels lo .. hi-1 of a weight of m rows
/// of `rowBytes` at `offset`: body(p, o, inside, rowAt), rowAt the output's
/// row (the last row for an output past m, where `inside` is false).
void forEachPanelOutput(ForwardEmitter &e, Value offset, Value m,
                        Value rowBytes, Value lo, Value hi,
                        function_ref<void(Value, Value, Value, Value)> body) {
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  e.forLoop(lo, hi, c1, [&](Value p) {
    e.forLoop(c0, e.cIndex(16), c1, [&](Value o) {
      Value output = e.add(e.mul(p, e.cIndex(16)), o);
      Value inside = e.cmp(arith::CmpIPredicate::ult, output, m);
      Value rowAt =
          e.add(offset, e.mul(e.minu(output, e.sub(m, c1)), rowBytes));
      body(p, o, inside, rowAt);
    });
  });
}

/// Stores output o's 32 quants `q` (vector<32xi8>) of block `panelBlock`
/// (panel * blocks + block) into the panels' layout: bytes 4i .. 4i + 3 at
/// (panelBlock * 8 + i) * 64 + 4 o.
void storePanelQuants(ForwardEmitter &e, Value q, Value quants,
                      Value panelBlock, Value o) {
  int64_t pieces = cast<VectorType>(q.getType()).getNumElements() / 4;
  Value base =
      e.add(e.mul(panelBlock, e.cIndex(64 * pieces)), e.mul(o, e.cIndex(4)));
  for (int64_t i = 0; i < pieces; ++i) {
    Value piece = vector::ExtractStridedSliceOp::create(
        e.b, q, ArrayRef<int64_t>{4 * i}, ArrayRef<int64_t>{4},
        ArrayRef<int64_t>{1});
    vector::StoreOp::create(e.b, piece, quants,
                            ValueRange{e.add(base, e.cIndex(64 * i))});
  }
}

/// Repacks panels lo .. hi-1 of Q8_0 or Q4_0 weights (m rows of k) for the
/// prefill's tiles: panel p, block b holds at ((p * blocks + b) * 8 + i) * 64
/// the bytes 4i .. 4i + 3 of the block's quants of the panel's 16 outputs
/// side by side, biased by +128 (xor 0x80), so one 64-byte load gives
/// vpdpbusd four weights of each of 16 outputs; the outputs' scales at
/// (p * blocks + b) * 16. Outputs past m: zero quants and scales. Q4_0's
/// nibbles become the Q8_0 quants q - 8 (elements 0 .. 15 the low nibbles,
/// 16 .. 31 the high), so the tiles are Q8_0's.
void emitInt8PackPanels(ForwardEmitter &e, kvrt_weight_format format,
                        Value bytes, Value offset, Value k, Value m,
                        Value quants, Value scales, Value lo, Value hi,
                        bool biased = true) {
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  bool q4 = format == KVRT_WEIGHT_Q4_0;
  int64_t blockBytes = q4 ? 18 : 34;
  Value blocks = e.divu(k, e.cIndex(32));
  Value rowBytes = e.mul(blocks, e.cIndex(blockBytes));
  VectorType v16b = e.vec(16, e.byte()), v32b = e.vec(32, e.byte());
  Value flip = arith::ConstantOp::create(
      e.b, DenseElementsAttr::get(v32b, e.b.getI8IntegerAttr(-128)));
  Value zeros = arith::ConstantOp::create(
      e.b, DenseElementsAttr::get(v32b, e.b.getI8IntegerAttr(0)));
  forEachPanelOutput(
      e, offset, m, rowBytes, lo, hi,
      [&](Value p, Value o, Value inside, Value rowAt) {
        e.forLoop(c0, blocks, c1, [&](Value b) {
          Value at = e.add(rowAt, e.mul(b, e.cIndex(blockBytes)));
          Value q;
          if (q4) {
            Value packed = vector::LoadOp::create(
                e.b, v16b, bytes, ValueRange{e.add(at, e.cIndex(2))});
            q = arith::SubIOp::create(
                e.b,
                concat(e,
                       arith::AndIOp::create(e.b, packed,
                                             splatBytes(e, v16b, 0x0F)),
                       arith::ShRUIOp::create(e.b, packed,
                                              splatBytes(e, v16b, 4))),
                splatBytes(e, v32b, 8));
          } else {
            q = vector::LoadOp::create(e.b, v32b, bytes,
                                       ValueRange{e.add(at, e.cIndex(2))});
          }
          if (biased)
            q = arith::XOrIOp::create(e.b, q, flip);
          q = e.select(inside, q, zeros);
          Value panelBlock = e.add(e.mul(p, blocks), b);
          storePanelQuants(e, q, quants, panelBlock, o);
          Value d = e.select(inside, e.loadF16(bytes, at), e.cF32(0.0f));
          e.store(d, scales, {e.add(e.mul(panelBlock, e.cIndex(16)), o)});
        });
      });
}

/// The 16 f16 at byte `at` of `bytes` as a vector<16xf32>.
Value widenHalves(ForwardEmitter &e, Value bytes, Value at) {
  Value halves = vector::BitCastOp::create(
      e.b, e.vec(16, e.b.getF16Type()),
      vector::LoadOp::create(e.b, e.vec(32, e.byte()), bytes, ValueRange{at})
          .getResult());
  return arith::ExtFOp::create(e.b, e.vec(16, e.f32()), halves);
}

/// Panels lo .. hi-1 of Q8_0 weights for the prefill's tiles, as
/// emitInt8PackPanels packs them (biased, for vpdpbusd), from the rows the
/// runtime repacked for decode at byte `offset` of `bytes` (decode_rows,
/// kvrt::repackQ8Rows16) instead of the file's: a panel of 16 outputs is a
/// group of 16 rows there, its quants already in the panel's order (+ 128),
/// so a block's 512 bytes are copied and its 16 f16 scales widened. The
/// rows past m are the group's zero rows.
void emitRepackedQ8PackPanels(ForwardEmitter &e, Value bytes, Value offset,
                              Value k, Value quants, Value scales, Value lo,
                              Value hi) {
  constexpr int64_t kGroupBlockBytes = kvrt::kQ8Rows16 * 34;
  Value c1 = e.cIndex(1);
  Value blocks = e.divu(k, e.cIndex(32));
  VectorType v64b = e.vec(64, e.byte());
  e.forLoop(lo, hi, c1, [&](Value p) {
    e.forLoop(e.cIndex(0), blocks, c1, [&](Value b) {
      Value panelBlock = e.add(e.mul(p, blocks), b);
      Value at = e.add(offset, e.mul(panelBlock, e.cIndex(kGroupBlockBytes)));
      for (int64_t i = 0; i < 8; ++i) {
        Value run = vector::LoadOp::create(
            e.b, v64b, bytes, ValueRange{e.add(at, e.cIndex(32 + 64 * i))});
        vector::StoreOp::create(
            e.b, run, quants,
            ValueRange{e.mul(e.add(e.mul(panelBlock, e.cIndex(8)), e.cIndex(i)),
                             e.cIndex(64))});
      }
      vector::StoreOp::create(e.b, widenHalves(e, bytes, at), scales,
                              ValueRange{e.mul(panelBlock, e.cIndex(16))});
    });
  });
}

/// Panels lo .. hi-1 of Q4_K weights for the prefill's tiles, as
/// emitKQuantPackPanels packs them for vpdpbusd, from the rows the runtime
/// repacked for decode at byte `offset` of `bytes` (decode_rows,
/// kvrt::repackQ4KRows16): a panel is a group there, whose sub-block's 256
/// bytes of quants are already the panel's, copied; the run's scale A = d sc
/// and min B = dmin m computed as groupScale computes them (an f16 widened
/// times the integer as f32), so the panels are the file path's bit for bit.
/// The rows past m are the group's zero rows.
void emitRepackedQ4KPackPanels(ForwardEmitter &e, Value bytes, Value offset,
                               Value k, Value quants, Value scales, Value lo,
                               Value hi) {
  Value c1 = e.cIndex(1);
  Value superBlocks = e.divu(k, e.cIndex(256));
  Value blocks = e.divu(k, e.cIndex(32));
  VectorType v64b = e.vec(64, e.byte()), v32b = e.vec(32, e.byte()),
             v16b = e.vec(16, e.byte()), v16f = e.vec(16, e.f32()),
             v16i = e.vec(16, e.i32());
  auto asF32 = [&](Value sixteenBytes) -> Value {
    return arith::UIToFPOp::create(
        e.b, v16f, arith::ExtUIOp::create(e.b, v16i, sixteenBytes));
  };
  e.forLoop(lo, hi, c1, [&](Value p) {
    e.forLoop(e.cIndex(0), superBlocks, c1, [&](Value sb) {
      Value at = e.add(offset, e.mul(e.add(e.mul(p, superBlocks), sb),
                                     e.cIndex(kvrt::kQ4KRows16BlockBytes)));
      Value d = widenHalves(e, bytes, at),
            dmin = widenHalves(e, bytes, e.add(at, e.cIndex(32)));
      for (int64_t s = 0; s < 8; ++s) {
        Value panelBlock =
            e.add(e.mul(p, blocks), e.add(e.mul(sb, e.cIndex(8)), e.cIndex(s)));
        for (int64_t i = 0; i < 4; ++i)
          vector::StoreOp::create(
              e.b,
              vector::LoadOp::create(
                  e.b, v64b, bytes,
                  ValueRange{e.add(at, e.cIndex(320 + 256 * s + 64 * i))}),
              quants,
              ValueRange{
                  e.mul(e.add(e.mul(panelBlock, e.cIndex(4)), e.cIndex(i)),
                        e.cIndex(64))});
        Value sc = vector::LoadOp::create(
            e.b, v16b, bytes, ValueRange{e.add(at, e.cIndex(64 + 16 * s))});
        Value pair = vector::LoadOp::create(
            e.b, v32b, bytes,
            ValueRange{e.add(at, e.cIndex(192 + 32 * (s / 2)))});
        SmallVector<int64_t> order;
        for (int64_t r = 0; r < kvrt::kQ8Rows16; ++r)
          order.push_back(2 * r + s % 2);
        Value m = vector::ShuffleOp::create(e.b, pair, pair, order);
        Value scaleAt = e.mul(panelBlock, e.cIndex(32));
        vector::StoreOp::create(e.b, arith::MulFOp::create(e.b, d, asF32(sc)),
                                scales, ValueRange{scaleAt});
        vector::StoreOp::create(e.b, arith::MulFOp::create(e.b, dmin, asF32(m)),
                                scales,
                                ValueRange{e.add(scaleAt, e.cIndex(16))});
      }
    });
  });
}

/// Repacks panels lo .. hi-1 of Q4_K or Q6_K weights (m rows of k, k whole
/// 256-element blocks) for the prefill's tiles, as emitInt8PackPanels does
/// Q8_0's, per 32 elements b of the row (block b / 8, its 32-element run
/// b % 8; pb = p * blocks + b), the quants unsigned as the format holds them:
/// - Q6_K: q in 0 .. 63 (its element being A (q - 32)), as Q8_0's: at
///   (pb * 8 + i) * 64 the quants 4i .. 4i + 3 of the panel's 16 outputs.
/// - Q4_K: q in 0 .. 15, two a byte, so a panel takes half the cache: at
///   (pb * 4 + i) * 64 the quants 4i .. 4i + 3 in the low nibbles and
///   4i + 16 .. 4i + 19 in the high ones.
/// At pb * 32 two 16-output vectors of f32: Q4_K the run's scale A and min B
/// (an element is A q - B), Q6_K the scales A of its two 16-element groups.
/// Quants and scales are ForwardEmitter's groupQuant and groupScale (the
/// runtime's dequantisation, operation for operation), so the weights are
/// the f32 path's exactly. Outputs past m: zero quants and scales.
void emitKQuantPackPanels(ForwardEmitter &e, kvrt_weight_format format,
                          Value bytes, Value offset, Value k, Value m,
                          Value quants, Value scales, Value lo, Value hi,
                          bool nibbles = true) {
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  bool q4k = format == KVRT_WEIGHT_Q4_K;
  Value superBlocks = e.divu(k, e.cIndex(256));
  Value blocks = e.divu(k, e.cIndex(32));
  Value rowBytes = weightRowBytes(e, format, k);
  Value blockBytes = e.cIndex(q4k ? 144 : 210);
  VectorType v32b = e.vec(32, e.byte());
  Value zeros = arith::ConstantOp::create(
      e.b, DenseElementsAttr::get(v32b, e.b.getI8IntegerAttr(0)));
  // Lanes of groupQuant (exact small integers in f32) as bytes.
  auto asBytes = [&](Value q, float offsetBy) -> Value {
    auto type = cast<VectorType>(q.getType());
    if (offsetBy != 0)
      q = arith::AddFOp::create(e.b, q,
                                e.splatF32(type.getNumElements(), offsetBy));
    Value i =
        arith::FPToSIOp::create(e.b, e.vec(type.getNumElements(), e.i32()), q);
    return arith::TruncIOp::create(e.b, e.vec(type.getNumElements(), e.byte()),
                                   i);
  };
  forEachPanelOutput(
      e, offset, m, rowBytes, lo, hi,
      [&](Value p, Value o, Value inside, Value rowAt) {
        e.forLoop(c0, superBlocks, c1, [&](Value sb) {
          Value at = e.add(rowAt, e.mul(sb, blockBytes));
          for (int64_t run = 0; run < 8; ++run) {
            Value q, first, second;
            if (q4k) {
              q = asBytes(
                  e.groupQuant(format, bytes, at, e.cIndex(run), c0, 32), 0);
              std::tie(first, second) =
                  e.groupScale(format, bytes, at, e.cIndex(run));
            } else {
              // Q6_K's groupQuant is q - 32: +32 gives the unsigned q.
              Value g0 = e.cIndex(2 * run), g1 = e.cIndex(2 * run + 1);
              q = concat(
                  e, asBytes(e.groupQuant(format, bytes, at, g0, c0, 16), 32),
                  asBytes(e.groupQuant(format, bytes, at, g1, c0, 16), 32));
              first = e.groupScale(format, bytes, at, g0).first;
              second = e.groupScale(format, bytes, at, g1).first;
            }
            Value panelBlock = e.add(
                e.mul(p, blocks), e.add(e.mul(sb, e.cIndex(8)), e.cIndex(run)));
            q = e.select(inside, q, zeros);
            if (q4k && nibbles) {
              // Two quants a byte: q[l] low, q[l + 16] high.
              auto half = [&](int64_t from) -> Value {
                return vector::ExtractStridedSliceOp::create(
                    e.b, q, ArrayRef<int64_t>{from}, ArrayRef<int64_t>{16},
                    ArrayRef<int64_t>{1});
              };
              Value four = arith::ConstantOp::create(
                  e.b, DenseElementsAttr::get(e.vec(16, e.byte()),
                                              e.b.getI8IntegerAttr(4)));
              q = arith::OrIOp::create(
                  e.b, half(0), arith::ShLIOp::create(e.b, half(16), four));
            }
            storePanelQuants(e, q, quants, panelBlock, o);
            Value scaleAt = e.add(e.mul(panelBlock, e.cIndex(32)), o);
            e.store(e.select(inside, first, e.cF32(0.0f)), scales, {scaleAt});
            e.store(e.select(inside, second, e.cF32(0.0f)), scales,
                    {e.add(scaleAt, e.cIndex(16))});
          }
        });
      });
}

/// What the prefill's tiles of Q4_K and Q6_K take per token beyond the
/// quantised activations, for rows lo .. hi-1, into `sums`:
/// - Q4_K, f32 [n][pairs * 2]: per 32-element block, -(sum of the token's
///   quants) = blockBias / 128 (exact), which the run's min B multiplies.
/// - Q6_K, i32 [n][pairs * 4]: per 16-element group, -32 * (sum of the
///   token's quants in it) = (sum of its 4 bias lanes) / 4 (exact: each lane
///   is a multiple of 128), which starts the group's dot product of the
///   unsigned q, so the integer holds sum (q - 32) q_x.
void emitKQuantTokenSums(ForwardEmitter &e, kvrt_weight_format format,
                         const Int8Activations &act, Value sums, Value lo,
                         Value hi) {
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  Value blocks = e.mul(act.pairs, e.cIndex(2));
  e.forLoop(lo, hi, c1, [&](Value t) {
    if (format == KVRT_WEIGHT_Q4_K) {
      e.forLoop(c0, blocks, c1, [&](Value b) {
        Value at = e.add(e.mul(t, blocks), b);
        Value bias =
            arith::SIToFPOp::create(e.b, e.f32(), e.load(act.blockBias, {at}));
        e.store(arith::MulFOp::create(e.b, bias, e.cF32(1.0f / 128)), sums,
                {at});
      });
      return;
    }
    Value laneRow = e.mul(act.pairs, e.cIndex(16));
    e.forLoop(c0, act.pairs, c1, [&](Value p) {
      Value lanes = vector::LoadOp::create(
          e.b, e.vec(16, e.i32()), act.bias,
          ValueRange{e.add(e.mul(t, laneRow), e.mul(p, e.cIndex(16)))});
      Value groupAt =
          e.add(e.mul(t, e.mul(act.pairs, e.cIndex(4))), e.mul(p, e.cIndex(4)));
      for (int64_t g = 0; g < 4; ++g) {
        Value four = vector::ExtractStridedSliceOp::create(
            e.b, lanes, ArrayRef<int64_t>{4 * g}, ArrayRef<int64_t>{4},
            ArrayRef<int64_t>{1});
        Value sum =
            vector::ReductionOp::create(e.b, vector::CombiningKind::ADD, four);
        e.store(arith::ShRSIOp::create(e.b, sum, e.cI32(2)), sums,
                {e.add(groupAt, e.cIndex(g))});
      }
    });
  });
}

/// A prefill tile's `panels` panels from panel0 (the last one, lastPanel,
/// for those past it) and the activations' row strides: quants, scales,
/// block biases.
struct PanelTileIndex {
  SmallVector<Value> panels;
  Value quantsRow, scaleRow, biasRow;
};
PanelTileIndex panelTileIndex(ForwardEmitter &e, const Int8Activations &act,
                              Value panel0, Value lastPanel, int64_t panels) {
  PanelTileIndex index;
  for (int64_t p = 0; p < panels; ++p)
    index.panels.push_back(e.minu(e.add(panel0, e.cIndex(p)), lastPanel));
  index.quantsRow = e.mul(act.pairs, e.cIndex(64));
  index.scaleRow = e.mul(act.pairs, e.cIndex(16));
  index.biasRow = e.mul(act.pairs, e.cIndex(2));
  return index;
}

/// A tile's tokens t .. t + rows - 1, those from t1 on clamped to t1 - 1.
SmallVector<Value> tileTokens(ForwardEmitter &e, Value t, Value t1,
                              int64_t rows) {
  SmallVector<Value> tokens;
  for (int64_t r = 0; r < rows; ++r)
    tokens.push_back(e.minu(e.add(t, e.cIndex(r)), e.sub(t1, e.cIndex(1))));
  return tokens;
}

/// Stores into `c` (adds, with `accumulate`) the prefill tile's f32
/// accumulators `accs`, token-major: `rows` tokens from t x `panels` panels
/// of 16 outputs from panel0; tokens from t1 on and outputs from m on are
/// not stored.
void storePanelTile(ForwardEmitter &e, Value c, Value m, ArrayRef<Value> accs,
                    Value t, Value t1, Value panel0, int64_t rows,
                    int64_t panels, bool accumulate) {
  Value c0 = e.cIndex(0);
  VectorType v16f = e.vec(16, e.f32()), m16 = e.vec(16, e.i1());
  for (int64_t r = 0; r < rows; ++r) {
    Value row = e.add(t, e.cIndex(r));
    e.ifThen(e.cmp(arith::CmpIPredicate::ult, row, t1), [&] {
      for (int64_t p = 0; p < panels; ++p) {
        Value col = e.mul(e.add(panel0, e.cIndex(p)), e.cIndex(16));
        Value inside = e.cmp(arith::CmpIPredicate::ult, col, m);
        Value count = e.select(inside, e.minu(e.sub(m, col), e.cIndex(16)), c0);
        Value mask = vector::CreateMaskOp::create(e.b, m16, ValueRange{count});
        Value value = accs[r * panels + p];
        Value safeCol = e.select(inside, col, c0);
        if (accumulate) {
          Value old = vector::MaskedLoadOp::create(e.b, v16f, c,
                                                   ValueRange{row, safeCol},
                                                   mask, e.splatF32(16, 0.0f));
          value = arith::AddFOp::create(e.b, old, value);
        }
        vector::MaskedStoreOp::create(e.b, c, ValueRange{row, safeCol}, mask,
                                      value);
      }
    });
  }
}

/// The prefill's register tiles over repacked panels (emitInt8PackPanels,
/// emitKQuantPackPanels): kInt8PanelRows tokens from t0 (while below t1) x
/// kInt8TilePanels panels from `panel0`. Per 32-element block: each i32
/// accumulator starts at the block's integer start; per 4 bytes of the
/// block, one vpdpbusd per token and panel (the panel's 64 bytes against
/// the token's 4 quants in every lane: 16 outputs, four weights each); then,
/// once per block, converted to f32, scaled and added into the f32
/// accumulator:
/// - Q8_0: started at the token's block bias (the weights biased by +128),
///   FMA'd with the weights' scales times the token's.
/// - Q4_K: started at 0 (q unsigned as it is), bytes 4i .. 4i + 3 and
///   4i + 16 .. 4i + 19 one after the other (the low and high nibbles of one
///   load); A I + B s with s = -(sum of the token's quants) from `sums`
///   (emitKQuantTokenSums), then FMA'd with the token's scale: sum (A q - B)
///   x.
/// - Q6_K: two accumulators per token, one per 16-element group (bytes 0-15,
///   16-31), each started at -32 times the token's sum over the group
///   (`sums`), so each holds sum (q - 32) q_x; A0 I0 + A1 I1, FMA'd with the
///   token's scale.
/// Q6_K's two accumulators take their vpdpbusd alternately (integer sums:
/// the order does not change them). Measured on the TinyLlama-shaped Q4_K_M
/// prefill (512 tokens, 1 thread, CPU time): 8 tokens were as fast as 6, two
/// alternating accumulators for Q4_K too as fast as one, the nibbles took 7%
/// less than a byte a quant; scaling block b - 1 after block b's vpdpbusd
/// (software pipelining) changed nothing.
/// Tokens past t1 and outputs past m are clamped when read and not stored.
void emitInt8PanelTiles(ForwardEmitter &e, kvrt_weight_format format,
                        const Int8Activations &act, Value sums, Value quants,
                        Value scales, Value c, Value k, Value t0, Value t1,
                        Value panel0, bool accumulate) {
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  Value m = memref::DimOp::create(e.b, c, c1);
  Value blocks = e.divu(k, e.cIndex(32));
  Value lastPanel = e.sub(e.divu(e.add(m, e.cIndex(15)), e.cIndex(16)), c1);
  VectorType v16f = e.vec(16, e.f32()), v16i = e.vec(16, e.i32()),
             v64b = e.vec(64, e.byte()), v4b = e.vec(4, e.byte());
  bool q4k = format == KVRT_WEIGHT_Q4_K, q6k = format == KVRT_WEIGHT_Q6_K;
  auto splatBytes = [&](VectorType type, int8_t value) {
    return ::splatBytes(e, type, value);
  };
  // Floats of a panel's scales per block (emitKQuantPackPanels: two vectors).
  int64_t scaleStride = q4k || q6k ? 32 : 16;
  int64_t rows = kInt8PanelRows, panels = kInt8TilePanels;
  PanelTileIndex index = panelTileIndex(e, act, panel0, lastPanel, panels);
  ArrayRef<Value> panelIndex = index.panels;
  Value quantsRow = index.quantsRow, scaleRow = index.scaleRow,
        biasRow = index.biasRow;
  Value groupRow = q6k ? e.mul(act.pairs, e.cIndex(4)) : Value();
  e.forLoop(t0, t1, e.cIndex(rows), [&](Value t) {
    SmallVector<Value> tokens = tileTokens(e, t, t1, rows);
    SmallVector<Value> inits(rows * panels, e.splatF32(16, 0.0f));
    SmallVector<Value> accs = e.forLoop(
        c0, blocks, c1, inits,
        [&](Value b, ValueRange faccs) -> SmallVector<Value> {
          SmallVector<Value> panelBlock;
          for (int64_t p = 0; p < panels; ++p)
            panelBlock.push_back(e.add(e.mul(panelIndex[p], blocks), b));
          // The integer accumulators' starts, of 16-element group `half`
          // for Q6_K.
          auto starts = [&](int64_t half) {
            SmallVector<Value> iaccs;
            for (Value token : tokens) {
              Value start;
              if (q4k)
                start = e.splatI32(16, 0);
              else if (q6k)
                start = vector::BroadcastOp::create(
                    e.b, v16i,
                    e.load(sums, {e.add(e.mul(token, groupRow),
                                        e.add(e.mul(b, e.cIndex(2)),
                                              e.cIndex(half)))}));
              else
                start = vector::BroadcastOp::create(
                    e.b, v16i,
                    e.load(act.blockBias, {e.add(e.mul(token, biasRow), b)}));
              iaccs.append(panels, start);
            }
            return iaccs;
          };
          // Q4_K and Q6_K: bytes 4i .. and 4i + 16 .. in turn (Q4_K: both
          // nibbles of a load); Q6_K into two accumulators per token, one
          // per 16-element group (its two scales).
          bool split = q4k || q6k;
          SmallVector<Value> halves[2] = {starts(0), {}};
          if (q6k)
            halves[1] = starts(1);
          for (int64_t step = 0; step < 8; ++step) {
            int64_t i = split ? step / 2 + 4 * (step % 2) : step;
            SmallVector<Value> &iaccs = halves[q6k ? i / 4 : 0];
            SmallVector<Value> w;
            for (int64_t p = 0; p < panels; ++p) {
              if (!q4k) {
                w.push_back(vector::LoadOp::create(
                    e.b, v64b, quants,
                    ValueRange{e.add(e.mul(panelBlock[p], e.cIndex(512)),
                                     e.cIndex(64 * i))}));
                continue;
              }
              // Q4_K's nibbles: bytes 4i .. 4i + 3 low, 4i + 16 .. high.
              Value both = vector::LoadOp::create(
                  e.b, v64b, quants,
                  ValueRange{e.add(e.mul(panelBlock[p], e.cIndex(256)),
                                   e.cIndex(64 * (i % 4)))});
              if (i >= 4)
                both = arith::ShRUIOp::create(e.b, both, splatBytes(v64b, 4));
              w.push_back(
                  arith::AndIOp::create(e.b, both, splatBytes(v64b, 0x0F)));
            }
            for (int64_t r = 0; r < rows; ++r) {
              Value at = e.add(e.mul(tokens[r], quantsRow),
                               e.add(e.mul(b, e.cIndex(32)), e.cIndex(4 * i)));
              Value four =
                  vector::LoadOp::create(e.b, v4b, act.quants, ValueRange{at});
              Value word = vector::ExtractOp::create(
                  e.b, vector::BitCastOp::create(e.b, e.vec(1, e.i32()), four),
                  ArrayRef<int64_t>{0});
              Value x = vector::BitCastOp::create(
                  e.b, v64b, vector::BroadcastOp::create(e.b, v16i, word));
              for (int64_t p = 0; p < panels; ++p)
                iaccs[r * panels + p] = dotBytes(e, iaccs[r * panels + p], w[p],
                                                 x, Int8Isa::Vnni512);
            }
          }
          SmallVector<Value> next;
          SmallVector<Value> firstScales, secondScales;
          for (int64_t p = 0; p < panels; ++p) {
            Value at = e.mul(panelBlock[p], e.cIndex(scaleStride));
            firstScales.push_back(
                vector::LoadOp::create(e.b, v16f, scales, ValueRange{at}));
            if (q4k || q6k)
              secondScales.push_back(vector::LoadOp::create(
                  e.b, v16f, scales, ValueRange{e.add(at, e.cIndex(16))}));
          }
          for (int64_t r = 0; r < rows; ++r) {
            Value d = e.load(act.scales, {e.add(e.mul(tokens[r], scaleRow),
                                                e.mul(b, e.cIndex(8)))});
            Value ds = vector::BroadcastOp::create(e.b, v16f, d);
            Value tokenSum;
            if (q4k)
              tokenSum = vector::BroadcastOp::create(
                  e.b, v16f,
                  e.load(sums, {e.add(e.mul(tokens[r], biasRow), b)}));
            for (int64_t p = 0; p < panels; ++p) {
              int64_t at = r * panels + p;
              if (!q4k && !q6k) {
                Value scale = arith::MulFOp::create(e.b, firstScales[p], ds);
                Value wide = arith::SIToFPOp::create(e.b, v16f, halves[0][at]);
                next.push_back(
                    vector::FMAOp::create(e.b, wide, scale, faccs[at]));
                continue;
              }
              auto wide = [&](Value v) -> Value {
                return arith::SIToFPOp::create(e.b, v16f, v);
              };
              Value sum;
              if (q4k) {
                sum = arith::MulFOp::create(e.b, wide(halves[0][at]),
                                            firstScales[p]);
                sum =
                    vector::FMAOp::create(e.b, secondScales[p], tokenSum, sum);
              } else {
                sum = arith::MulFOp::create(e.b, wide(halves[0][at]),
                                            firstScales[p]);
                sum = vector::FMAOp::create(e.b, wide(halves[1][at]),
                                            secondScales[p], sum);
              }
              next.push_back(vector::FMAOp::create(e.b, sum, ds, faccs[at]));
            }
          }
          return next;
        });
    storePanelTile(e, c, m, accs, t, t1, panel0, rows, panels, accumulate);
  });
}

/// Asks Linux for this process's permission to use the AMX tile data
/// (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), libc's
/// variadic syscall: the generated code may run in a process other than the
/// compiler's, e.g. an object from kv-aot); i1 true where granted. Granting
/// is idempotent and covers every thread of the process.
Value requestAmx(ForwardEmitter &e) {
  constexpr int64_t kArchPrctl = 158, kReqXcompPerm = 0x1023, kXtileData = 18;
  auto type = LLVM::LLVMFunctionType::get(e.i64(), {e.i64()},
                                          /*isVarArg=*/true);
  if (!e.module.lookupSymbol("syscall")) {
    OpBuilder::InsertionGuard guard(e.b);
    e.b.setInsertionPointToEnd(e.module.getBody());
    LLVM::LLVMFuncOp::create(e.b, e.b.getLoc(), "syscall", type);
  }
  Value result =
      LLVM::CallOp::create(e.b, e.b.getLoc(), type, "syscall",
                           ValueRange{e.cI64(kArchPrctl), e.cI64(kReqXcompPerm),
                                      e.cI64(kXtileData)})
          .getResult();
  return e.cmp(arith::CmpIPredicate::eq, result, e.cI64(0));
}

/// The Q8_0 or Q4_K prefill's tiles on AMX (quant-dot=amx) over
/// emitInt8PackPanels' panels packed unbiased (Q8_0) or emitKQuantPackPanels'
/// a quant a byte (Q4_K): kAmxRows tokens from t0 (while below t1) x
/// kAmxTilePanels panels from `panel0`. A panel's block is already AMX's B
/// tile (8 rows of 64 bytes: bytes 4i .. 4i + 3 of 16 outputs) and the
/// tokens' quants of a block an A tile (16 rows of 32 bytes, the row stride
/// apart), so per block and panel one tdpbssd (Q8_0, signed x signed) or
/// tdpbsud (Q4_K's unsigned q) into a zeroed C tile gives sum w q, exactly
/// the int32 of emitInt8PanelTiles' vpdpbusd chain (which starts Q8_0's
/// biased weights at the block bias, Q4_K's at 0); stored to a slot of
/// `cTiles` (2 x kAmxGroupBlocks x kAmxTilePanels x 16 x 16 i32 on the
/// stack), each token's row is scaled and added into the f32 accumulators
/// by the same operations in the same order (Q4_K: (A I + B s) d, s from
/// `sumsT`): the results are bit-identical to quant-dot=int8. The tokens'
/// scales (and Q4_K's s) come block-major from `scalesT` (`sumsT`),
/// [blocks][quantRows], quantRows the tokens rounded up to 16: a tile's at
/// one address. The A tile's rows past t1 read other tokens or the zeroed
/// padding of the quants and are not stored; outputs past m are zeros in the
/// panels and not stored.
void emitAmxPanelTiles(ForwardEmitter &e, kvrt_weight_format format,
                       const Int8Activations &act, Value quants, Value scales,
                       Value scalesT, Value quantRows, Value sumsT, Value c,
                       Value cTiles, Value k, Value t0, Value t1, Value panel0,
                       bool accumulate) {
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  Value m = memref::DimOp::create(e.b, c, c1);
  Value blocks = e.divu(k, e.cIndex(32));
  Value lastPanel = e.sub(e.divu(e.add(m, e.cIndex(15)), e.cIndex(16)), c1);
  VectorType v16f = e.vec(16, e.f32()), v16i = e.vec(16, e.i32());
  auto aType = amx::TileType::get({kAmxRows, 32}, e.byte());
  auto bType = amx::TileType::get({8, 64}, e.byte());
  auto cType = amx::TileType::get({kAmxRows, 16}, e.i32());
  int64_t rows = kAmxRows, panels = kAmxTilePanels;
  bool q4k = format == KVRT_WEIGHT_Q4_K;
  // Floats of a panel's scales per block (emitKQuantPackPanels: two vectors).
  int64_t scaleStride = q4k ? 32 : 16;
  PanelTileIndex index = panelTileIndex(e, act, panel0, lastPanel, panels);
  ArrayRef<Value> panelIndex = index.panels;
  Value quantsRow = index.quantsRow;
  e.forLoop(t0, t1, e.cIndex(rows), [&](Value t) {
    // Slot i of the half of cTiles at `half`: a block's C tiles.
    auto slot = [&](Value half, int64_t i) {
      return e.add(half, e.cIndex(i * panels * 256));
    };
    // Blocks `bs` together, each in tiles of its own: the tile registers
    // are not renamed, so a block reusing the last one's would wait for its
    // store.
    auto multiply = [&](ArrayRef<Value> bs, Value half, int64_t firstSlot) {
      SmallVector<Value> xs, ws, dots;
      for (Value b : bs)
        xs.push_back(amx::TileLoadOp::create(
            e.b, e.b.getLoc(), aType, act.quants,
            ValueRange{e.add(e.mul(t, quantsRow), e.mul(b, e.cIndex(32)))},
            quantsRow));
      for (Value b : bs)
        for (int64_t p = 0; p < panels; ++p)
          ws.push_back(amx::TileLoadOp::create(
              e.b, e.b.getLoc(), bType, quants,
              ValueRange{
                  e.mul(e.add(e.mul(panelIndex[p], blocks), b), e.cIndex(512))},
              e.cIndex(64)));
      for (size_t i = 0; i < ws.size(); ++i)
        dots.push_back(amx::TileMulIOp::create(
            e.b, e.b.getLoc(), cType, xs[i / panels], ws[i],
            amx::TileZeroOp::create(e.b, e.b.getLoc(), cType),
            /*isZextLhs=*/false, /*isZextRhs=*/q4k));
      for (size_t i = 0; i < dots.size(); ++i)
        amx::TileStoreOp::create(
            e.b, e.b.getLoc(), cTiles,
            ValueRange{e.add(slot(half, firstSlot + i / panels),
                             e.cIndex(256 * (i % panels)))},
            dots[i], e.cIndex(16));
    };
    auto scale = [&](Value b, Value half, int64_t from, ValueRange faccs) {
      SmallVector<Value> firstScales, secondScales;
      for (int64_t p = 0; p < panels; ++p) {
        Value at = e.mul(e.add(e.mul(panelIndex[p], blocks), b),
                         e.cIndex(scaleStride));
        firstScales.push_back(
            vector::LoadOp::create(e.b, v16f, scales, ValueRange{at}));
        if (q4k)
          secondScales.push_back(vector::LoadOp::create(
              e.b, v16f, scales, ValueRange{e.add(at, e.cIndex(16))}));
      }
      SmallVector<Value> next;
      Value scalesAt = e.add(e.mul(b, quantRows), t);
      for (int64_t r = 0; r < rows; ++r) {
        Value tokenAt = e.add(scalesAt, e.cIndex(r));
        Value ds =
            vector::BroadcastOp::create(e.b, v16f, e.load(scalesT, {tokenAt}));
        Value tokenSum;
        if (q4k)
          tokenSum =
              vector::BroadcastOp::create(e.b, v16f, e.load(sumsT, {tokenAt}));
        for (int64_t p = 0; p < panels; ++p) {
          Value dot = vector::LoadOp::create(
              e.b, v16i, cTiles,
              ValueRange{e.add(slot(half, from), e.cIndex(256 * p + 16 * r))});
          Value wide = arith::SIToFPOp::create(e.b, v16f, dot);
          Value acc = faccs[r * panels + p];
          if (!q4k) {
            Value scale = arith::MulFOp::create(e.b, firstScales[p], ds);
            next.push_back(vector::FMAOp::create(e.b, wide, scale, acc));
            continue;
          }
          // emitInt8PanelTiles' Q4_K: (A I + B s) d, s = -(sum q_x).
          Value sum = arith::MulFOp::create(e.b, wide, firstScales[p]);
          sum = vector::FMAOp::create(e.b, secondScales[p], tokenSum, sum);
          next.push_back(vector::FMAOp::create(e.b, sum, ds, acc));
        }
      }
      return next;
    };
    // Groups of kAmxGroupBlocks blocks, software-pipelined: group g's
    // products (kAmxBlocks at a time) into one half of cTiles while group
    // g - 1's, in the other, are scaled, in block order; the rest one by
    // one. The tile unit and the vector units then work side by side, and a
    // load of a tile store, which waits until the store retires and drains
    // to the cache, comes long after it.
    Value groups = e.divu(blocks, e.cIndex(kAmxGroupBlocks));
    auto halfOf = [&](Value g) {
      return e.mul(e.remu(g, e.cIndex(2)),
                   e.cIndex(kAmxGroupBlocks * panels * 256));
    };
    auto groupBlocks = [&](Value g) {
      SmallVector<Value> bs;
      for (int64_t i = 0; i < kAmxGroupBlocks; ++i)
        bs.push_back(e.add(e.mul(g, e.cIndex(kAmxGroupBlocks)), e.cIndex(i)));
      return bs;
    };
    auto multiplyGroup = [&](Value g) {
      SmallVector<Value> bs = groupBlocks(g);
      for (int64_t i = 0; i < kAmxGroupBlocks; i += kAmxBlocks)
        multiply(ArrayRef<Value>(bs).slice(i, kAmxBlocks), halfOf(g), i);
    };
    auto scaleGroup = [&](Value g, ValueRange faccs) {
      SmallVector<Value> bs = groupBlocks(g), next(faccs);
      for (int64_t i = 0; i < kAmxGroupBlocks; ++i)
        next = scale(bs[i], halfOf(g), i, next);
      return next;
    };
    SmallVector<Value> inits(rows * panels, e.splatF32(16, 0.0f));
    Value some = e.cmp(arith::CmpIPredicate::ugt, groups, c0);
    e.ifThen(some, [&] { multiplyGroup(c0); });
    SmallVector<Value> accs =
        e.forLoop(c1, groups, c1, inits,
                  [&](Value g, ValueRange faccs) -> SmallVector<Value> {
                    multiplyGroup(g);
                    return scaleGroup(e.sub(g, c1), faccs);
                  });
    SmallVector<Type> types(accs.size(), v16f);
    accs = e.ifThenElse(
        some, types, [&] { return scaleGroup(e.sub(groups, c1), accs); },
        [&] { return accs; });
    accs = e.forLoop(e.mul(groups, e.cIndex(kAmxGroupBlocks)), blocks, c1, accs,
                     [&](Value b, ValueRange faccs) -> SmallVector<Value> {
                       multiply({b}, c0, 0);
                       return scale(b, c0, 0, faccs);
                     });
    storePanelTile(e, c, m, accs, t, t1, panel0, rows, panels, accumulate);
  });
}

} // namespace

/// The decode's tiles (fewer than kPackedMinRows rows): one token at a time
/// against this many weight rows (decodeTileRow's), one 16-lane f32
/// accumulator each, beside the rows' biased weights and scales. Measured
/// on TinyLlama's files, one thread, ms a decode step (alternated runs, idle
/// machine):
/// - Q8_0 12: 71.6-74.2 against 75.4-80.1 with 8 (10 and 14 no better, 16
///   78.6-79.1);
/// - Q4_K 6 and Q6_K 4 (the Q4_K_M step): 45.4-46.6, against 52.0-53.4 with
///   2 and 2, 49.3-50.3 with 4 and 4, 47.1-47.9 with 6 and 6, 49.0-49.9 with
///   8 and 4; on two threads 25.1 against 28.2 with 2 and 2.
/// Before decodeTileRow, with a tile's rows consecutive, Q8_0 did best with
/// 8 and the K-quants with 2. With the K-quants' tiles on Q8_K activations
/// (emitKQuantDecodeTile), Q4_K tiles of 5, 6 and 7 rows were within the
/// machine's noise of each other (Zen 4, 1 thread: medians 42.3, 41.9,
/// 40.8 ms a step of four alternated runs each), 8 rows slower (47-50).
/// Q5_K (the Q5_K_M step, Q6_K at 4; Zen 4, 1 thread, medians of four
/// alternated runs): 6 rows 49.4 against 53.3 with 4, 48.7 against 64.7
/// with 8. Q4_0 (its classifier Q6_K; medians of four alternated runs
/// each): 12 rows 44.1 against 49.0 with 8, 44.2 against 68.5 with 16.
int64_t cpu::int8TileOutputs(kvrt_weight_format format, Int8Isa isa) {
  if (isa == Int8Isa::Avx2)
    return kAvx2TileOutputs;
  switch (format) {
  case KVRT_WEIGHT_Q8_0:
  case KVRT_WEIGHT_Q4_0:
    return 12;
  case KVRT_WEIGHT_Q4_K:
  case KVRT_WEIGHT_Q5_K:
    return 6;
  default:
    return 4;
  }
}
/// Quantises rows lo .. hi-1 of `a` [n][k] into `act`, block by block as
/// llama.cpp's Q8_0 activations: d = max |x| / 127, q = x * (127 / max |x|)
/// rounded to nearest even (all zeros and d = 0 for a block of zeros), so
/// |x - d q| <= d / 2 (docs/cpu-backend.md, "Integer dot products"); the
/// scale is kept in f32 (llama.cpp rounds it to f16). With scaleBlock 256,
/// max |x| is over the 256-element block (llama.cpp's Q8_K, its scale f32
/// too), and the block's sums of 16 and 32 quants are stored beside.
void cpu::emitQuantizeRows(ForwardEmitter &e, Value a,
                           const Int8Activations &act, Value lo, Value hi,
                           Int8Isa isa) {
  Value c0 = e.cIndex(0), c1 = e.cIndex(1), c32 = e.cIndex(32);
  Value k = memref::DimOp::create(e.b, a, c1);
  Value blocks = e.divu(k, c32);
  VectorType v32f = e.vec(32, e.f32()), v32b = e.vec(32, e.byte()),
             v64b = e.vec(64, e.byte());
  Value zero = e.cF32(0.0f), n127 = e.cF32(127.0f);
  auto largest = [&](Value x) -> Value {
    return vector::ReductionOp::create(e.b, vector::CombiningKind::MAXIMUMF,
                                       math::AbsFOp::create(e.b, x));
  };
  // x's quants at the scale of a block whose max |x| is amax, and the scale.
  auto quantise = [&](Value x, Value amax) -> std::pair<Value, Value> {
    Value nonzero =
        arith::CmpFOp::create(e.b, arith::CmpFPredicate::ONE, amax, zero);
    Value inverse =
        e.select(nonzero, arith::DivFOp::create(e.b, n127, amax), zero);
    Value scaled = arith::MulFOp::create(
        e.b, x, vector::BroadcastOp::create(e.b, v32f, inverse));
    Value q = arith::FPToSIOp::create(e.b, e.vec(32, e.i32()),
                                      math::RoundEvenOp::create(e.b, scaled));
    return {arith::TruncIOp::create(e.b, v32b, q),
            arith::DivFOp::create(e.b, amax, n127)};
  };
  auto block = [&](Value t, Value col) -> std::pair<Value, Value> {
    Value x = vector::LoadOp::create(e.b, v32f, a, ValueRange{t, col});
    return quantise(x, largest(x));
  };
  Value quantsRow = e.mul(act.pairs, e.cIndex(64));
  Value laneRow = e.mul(act.pairs, e.cIndex(16));
  // Stores pair p of row t: quants q0, q1 and scales d0, d1 of its blocks;
  // returns its bias lanes.
  auto storePair = [&](Value t, Value p, Value q0, Value d0, Value q1,
                       Value d1) {
    Value quants = concat(e, q0, q1);
    Value at = e.add(e.mul(t, quantsRow), e.mul(p, e.cIndex(64)));
    vector::StoreOp::create(e.b, quants, act.quants, ValueRange{at});
    Value ones = arith::ConstantOp::create(
        e.b, DenseElementsAttr::get(v64b, e.b.getI8IntegerAttr(-128)));
    Value sums = dotBytes(e, e.splatI32(16, 0), ones, quants, isa);
    Value bias = arith::SubIOp::create(e.b, e.splatI32(16, 0), sums);
    Value lanes = e.add(e.mul(t, laneRow), e.mul(p, e.cIndex(16)));
    vector::StoreOp::create(e.b, bias, act.bias, ValueRange{lanes});
    vector::StoreOp::create(e.b, pairScales(e, d0, d1), act.scales,
                            ValueRange{lanes});
    Value blockAt =
        e.add(e.mul(t, e.mul(act.pairs, e.cIndex(2))), e.mul(p, e.cIndex(2)));
    for (int64_t half = 0; half < 2; ++half)
      e.store(laneSum(e, bias, 8 * half, 8), act.blockBias,
              {e.add(blockAt, e.cIndex(half))});
    return bias;
  };
  if (act.scaleBlock == 256) {
    // k is whole 256-element blocks (the K-quants' rows are).
    Value superBlocks = e.divu(k, e.cIndex(256));
    Value sumsRow = e.mul(superBlocks, e.cIndex(32));
    Type i16 = e.b.getI16Type();
    e.forLoop(lo, hi, c1, [&](Value t) {
      e.forLoop(c0, superBlocks, c1, [&](Value sb) {
        SmallVector<Value> x;
        Value amax;
        for (int64_t i = 0; i < 8; ++i) {
          Value col = e.add(e.mul(sb, e.cIndex(256)), e.cIndex(32 * i));
          x.push_back(vector::LoadOp::create(e.b, v32f, a, ValueRange{t, col}));
          Value m = largest(x.back());
          amax = i ? arith::MaximumFOp::create(e.b, amax, m).getResult() : m;
        }
        Value sumsAt = e.add(e.mul(t, sumsRow), e.mul(sb, e.cIndex(32)));
        // The sums of runs of 16 quants, -(4 bias lanes) / 128 exactly.
        SmallVector<Value> sixteens;
        for (int64_t j = 0; j < 4; ++j) {
          auto [q0, d0] = quantise(x[2 * j], amax);
          auto [q1, d1] = quantise(x[2 * j + 1], amax);
          Value bias = storePair(t, e.add(e.mul(sb, e.cIndex(4)), e.cIndex(j)),
                                 q0, d0, q1, d1);
          for (int64_t run = 0; run < 4; ++run)
            sixteens.push_back(arith::ShRSIOp::create(
                e.b,
                arith::SubIOp::create(e.b, e.cI32(0),
                                      laneSum(e, bias, 4 * run, 4)),
                e.cI32(7)));
        }
        auto storeSum = [&](Value sum, int64_t slot) {
          e.store(arith::TruncIOp::create(e.b, i16, sum), act.sums,
                  {e.add(sumsAt, e.cIndex(slot))});
        };
        for (int64_t run = 0; run < 16; ++run)
          storeSum(sixteens[run], run);
        for (int64_t run = 0; run < 8; ++run)
          storeSum(arith::AddIOp::create(e.b, sixteens[2 * run],
                                         sixteens[2 * run + 1]),
                   16 + run);
      });
    });
    return;
  }
  e.forLoop(lo, hi, c1, [&](Value t) {
    e.forLoop(c0, act.pairs, c1, [&](Value p) {
      Value first = e.mul(p, e.cIndex(2));
      auto [q0, d0] = block(t, e.mul(first, c32));
      Value second = e.add(first, c1);
      Value present = e.cmp(arith::CmpIPredicate::ult, second, blocks);
      SmallVector<Value> q1d1 = e.ifThenElse(
          present, TypeRange{v32b, e.f32()},
          [&] {
            auto [q1, d1] = block(t, e.mul(second, c32));
            return SmallVector<Value>{q1, d1};
          },
          [&] {
            Value zeros = arith::ConstantOp::create(
                e.b, DenseElementsAttr::get(v32b, e.b.getI8IntegerAttr(0)));
            return SmallVector<Value>{zeros, e.cF32(0.0f)};
          });
      storePair(t, p, q0, d0, q1d1[0], q1d1[1]);
    });
  });
}

int64_t cpu::int8ScaleBlock(kvrt_weight_format format) {
  return format == KVRT_WEIGHT_Q8_0 || format == KVRT_WEIGHT_Q4_0 ? 32 : 256;
}

SmallVector<Value> Int8Activations::buffers() const {
  SmallVector<Value> result{quants, bias, scales, blockBias};
  if (scaleBlock == 256)
    result.push_back(sums);
  return result;
}

Int8Activations Int8Activations::fromBuffers(ForwardEmitter &e,
                                             ValueRange buffers, Value k,
                                             int64_t scaleBlock) {
  Int8Activations act{buffers[0],
                      buffers[1],
                      buffers[2],
                      buffers[3],
                      e.divu(e.add(k, e.cIndex(63)), e.cIndex(64)),
                      Value(),
                      scaleBlock};
  if (scaleBlock == 256)
    act.sums = buffers[4];
  return act;
}

Int8Activations cpu::allocInt8Activations(ForwardEmitter &e, Value n,
                                          Value quantRows, Value k,
                                          int64_t scaleBlock) {
  Value pairs = e.divu(e.add(k, e.cIndex(63)), e.cIndex(64));
  auto alloc = [&](Type element, Value count) -> Value {
    return memref::AllocOp::create(e.b, e.buffer(element), ValueRange{count},
                                   e.b.getI64IntegerAttr(64));
  };
  Value lanes = e.mul(e.mul(n, pairs), e.cIndex(16));
  Int8Activations act{
      alloc(e.byte(), e.mul(e.mul(quantRows, pairs), e.cIndex(64))),
      alloc(e.i32(), lanes),
      alloc(e.f32(), lanes),
      alloc(e.i32(), e.mul(e.mul(n, pairs), e.cIndex(2))),
      pairs,
      Value(),
      scaleBlock};
  if (scaleBlock == 256)
    act.sums = alloc(e.b.getI16Type(),
                     e.mul(e.mul(n, e.divu(k, e.cIndex(256))), e.cIndex(32)));
  return act;
}

void cpu::freeInt8Activations(ForwardEmitter &e, const Int8Activations &act) {
  for (Value buffer : act.buffers())
    memref::DeallocOp::create(e.b, buffer);
}

/// The 4 bytes (or 2 words) of `buffer` at element `at` as one i32 in every
/// lane of a vector<16xi32> (one vpbroadcastd from memory, which LLVM folds
/// into a single user's broadcast operand).
Value broadcastWord(ForwardEmitter &e, Value buffer, VectorType fourBytes,
                    Value at) {
  Value four = vector::LoadOp::create(e.b, fourBytes, buffer, ValueRange{at});
  Value word = vector::ExtractOp::create(
      e.b, vector::BitCastOp::create(e.b, e.vec(1, e.i32()), four),
      ArrayRef<int64_t>{0});
  return vector::BroadcastOp::create(e.b, e.vec(16, e.i32()), word);
}

/// The lanes of a tile's accumulators in order, 16 a group.
SmallVector<Value> groupLanes(ForwardEmitter &e, ValueRange accs) {
  SmallVector<Value> sums;
  for (Value acc : accs)
    for (int64_t lane = 0; lane < kvrt::kQ8Rows16; ++lane)
      sums.push_back(
          vector::ExtractOp::create(e.b, acc, ArrayRef<int64_t>{lane}));
  return sums;
}

/// emitRepackedDecodeTile for Q4_K rows (kvrt::repackQ4KRows16) on Q8_K
/// activations (a scale per 256, the sums of runs of 32 beside). Per block,
/// sub-block s and group: four 64-byte loads of quants, each masked by 0x0F
/// (4 quants of 16 rows) and by 0xF0 (4 more, times 16), dotted (vpdpbusd)
/// against the token's quants 4i .. and 4i + 16 .. of the sub-block
/// broadcast, two chains; the sub-block's sum the first plus the second
/// shifted right by 4 (exact: a multiple of 16), times the rows' scales
/// (bytes widened, vpmulld), added up in i32 over the block (|sum| < 2^25).
/// The mins' term sum_s m_s (the token's sum over s) in i32 by vpdpwssd, two
/// sub-blocks at a time (the mins as words, the sums as a word pair). Per
/// block and group two FMAs: the sum by d dx and the mins' term by -dmin dx
/// (the 16 rows' d and dmin each widened from f16 by one conversion).
SmallVector<Value> emitRepackedQ4KDecodeTile(ForwardEmitter &e, Value bytes,
                                             const Int8Activations &act,
                                             Value k, Value t,
                                             ArrayRef<Value> groupAt) {
  assert(act.scaleBlock == 256 && "Q4_K tiles take Q8_K activations");
  VectorType v16f = e.vec(16, e.f32()), v16i = e.vec(16, e.i32()),
             v64b = e.vec(64, e.byte()), v32b = e.vec(32, e.byte()),
             v16b = e.vec(16, e.byte()), v32w = e.vec(32, e.b.getI16Type());
  Value blocks = e.divu(k, e.cIndex(256));
  Value quantsRow = e.mul(act.pairs, e.cIndex(64));
  Value laneRow = e.mul(act.pairs, e.cIndex(16));
  Value sumsRow = e.mul(blocks, e.cIndex(32));
  Value lowMask = splatBytes(e, v64b, 0x0F);
  Value highMask = splatBytes(e, v64b, int8_t(0xF0));
  SmallVector<Value> inits(groupAt.size(), e.splatF32(16, 0.0f));
  SmallVector<Value> accs = e.forLoop(
      e.cIndex(0), blocks, e.cIndex(1), inits,
      [&](Value b, ValueRange accs) -> SmallVector<Value> {
        Value xAt = e.add(e.mul(t, quantsRow), e.mul(b, e.cIndex(256)));
        Value dx = e.load(act.scales,
                          {e.add(e.mul(t, laneRow), e.mul(b, e.cIndex(64)))});
        Value sumsAt = e.add(e.mul(t, sumsRow), e.mul(b, e.cIndex(32)));
        SmallVector<Value> at, sums, mins;
        for (Value group : groupAt) {
          at.push_back(
              e.add(group, e.mul(b, e.cIndex(kvrt::kQ4KRows16BlockBytes))));
          sums.push_back(e.splatI32(16, 0));
          mins.push_back(e.splatI32(16, 0));
        }
        for (int64_t s = 0; s < 8; ++s) {
          SmallVector<Value> lowX, highX;
          for (int64_t i = 0; i < 4; ++i) {
            Value runAt = e.add(xAt, e.cIndex(32 * s + 4 * i));
            auto four = e.vec(4, e.byte());
            lowX.push_back(vector::BitCastOp::create(
                e.b, v64b, broadcastWord(e, act.quants, four, runAt)));
            highX.push_back(vector::BitCastOp::create(
                e.b, v64b,
                broadcastWord(e, act.quants, four,
                              e.add(runAt, e.cIndex(16)))));
          }
          for (size_t g = 0; g < at.size(); ++g) {
            Value low = e.splatI32(16, 0), high = e.splatI32(16, 0);
            for (int64_t i = 0; i < 4; ++i) {
              Value w = vector::LoadOp::create(
                  e.b, v64b, bytes,
                  ValueRange{e.add(at[g], e.cIndex(320 + 256 * s + 64 * i))});
              low = dotBytes(e, low, arith::AndIOp::create(e.b, w, lowMask),
                             lowX[i], Int8Isa::Vnni512);
              high = dotBytes(e, high, arith::AndIOp::create(e.b, w, highMask),
                              highX[i], Int8Isa::Vnni512);
            }
            Value dot = arith::AddIOp::create(
                e.b, low, arith::ShRSIOp::create(e.b, high, e.splatI32(16, 4)));
            Value scales = arith::ExtUIOp::create(
                e.b, v16i,
                vector::LoadOp::create(
                    e.b, v16b, bytes,
                    ValueRange{e.add(at[g], e.cIndex(64 + 16 * s))}));
            sums[g] = arith::AddIOp::create(
                e.b, sums[g], arith::MulIOp::create(e.b, dot, scales));
          }
        }
        Value dxLanes = vector::BroadcastOp::create(e.b, v16f, dx);
        Value minusDx = arith::NegFOp::create(e.b, dxLanes);
        SmallVector<Value> next;
        for (size_t g = 0; g < at.size(); ++g) {
          for (int64_t pair = 0; pair < 4; ++pair) {
            Value m = arith::ExtUIOp::create(
                e.b, v32w,
                vector::LoadOp::create(
                    e.b, v32b, bytes,
                    ValueRange{e.add(at[g], e.cIndex(192 + 32 * pair))}));
            Value x = vector::BitCastOp::create(
                e.b, v32w,
                broadcastWord(e, act.sums, e.vec(2, e.b.getI16Type()),
                              e.add(sumsAt, e.cIndex(16 + 2 * pair))));
            mins[g] = dotWords(e, mins[g], m, x, Int8Isa::Vnni512);
          }
          Value d =
              arith::MulFOp::create(e.b, widenHalves(e, bytes, at[g]), dxLanes);
          Value dmin = arith::MulFOp::create(
              e.b, widenHalves(e, bytes, e.add(at[g], e.cIndex(32))), minusDx);
          Value acc = vector::FMAOp::create(
              e.b, arith::SIToFPOp::create(e.b, v16f, sums[g]), d, accs[g]);
          next.push_back(vector::FMAOp::create(
              e.b, arith::SIToFPOp::create(e.b, v16f, mins[g]), dmin, acc));
        }
        return next;
      });
  return groupLanes(e, accs);
}

SmallVector<Value>
cpu::emitRepackedDecodeTile(ForwardEmitter &e, kvrt_weight_format format,
                            Value bytes, const Int8Activations &act, Value k,
                            Value t, ArrayRef<Value> groupAt) {
  if (format == KVRT_WEIGHT_Q4_K)
    return emitRepackedQ4KDecodeTile(e, bytes, act, k, t, groupAt);
  assert(format == KVRT_WEIGHT_Q8_0 && "rows repacked are Q8_0's or Q4_K's");
  constexpr int64_t kGroupBlockBytes = kvrt::kQ8Rows16 * 34;
  VectorType v16f = e.vec(16, e.f32()), v16i = e.vec(16, e.i32()),
             v64b = e.vec(64, e.byte());
  Value quantsRow = e.mul(act.pairs, e.cIndex(64));
  Value scaleRow = e.mul(act.pairs, e.cIndex(16));
  Value biasRow = e.mul(act.pairs, e.cIndex(2));
  SmallVector<Value> inits(groupAt.size(), e.splatF32(16, 0.0f));
  SmallVector<Value> accs = e.forLoop(
      e.cIndex(0), e.divu(k, e.cIndex(32)), e.cIndex(1), inits,
      [&](Value b, ValueRange accs) -> SmallVector<Value> {
        // The token's block: its 8 runs of 4 quants, each in every lane;
        // the dot started at its -128 sum q; its scale in every lane.
        SmallVector<Value> x;
        Value quantsAt = e.add(e.mul(t, quantsRow), e.mul(b, e.cIndex(32)));
        for (int64_t run = 0; run < 8; ++run)
          x.push_back(vector::BitCastOp::create(
              e.b, v64b,
              broadcastWord(e, act.quants, e.vec(4, e.byte()),
                            e.add(quantsAt, e.cIndex(4 * run)))));
        Value bias = vector::BroadcastOp::create(
            e.b, v16i, e.load(act.blockBias, {e.add(e.mul(t, biasRow), b)}));
        Value d = vector::BroadcastOp::create(
            e.b, v16f,
            e.load(act.scales,
                   {e.add(e.mul(t, scaleRow), e.mul(b, e.cIndex(8)))}));
        SmallVector<Value> next;
        for (auto [group, acc] : llvm::zip_equal(groupAt, accs)) {
          Value at = e.add(group, e.mul(b, e.cIndex(kGroupBlockBytes)));
          // Two chains of dots, so that they overlap.
          Value chains[2] = {bias, e.splatI32(16, 0)};
          for (int64_t run = 0; run < 8; ++run) {
            Value w = vector::LoadOp::create(
                e.b, v64b, bytes,
                ValueRange{e.add(at, e.cIndex(32 + 64 * run))});
            chains[run % 2] =
                dotBytes(e, chains[run % 2], w, x[run], Int8Isa::Vnni512);
          }
          Value dot = arith::AddIOp::create(e.b, chains[0], chains[1]);
          Value scales =
              arith::MulFOp::create(e.b, widenHalves(e, bytes, at), d);
          next.push_back(vector::FMAOp::create(
              e.b, arith::SIToFPOp::create(e.b, v16f, dot), scales, acc));
        }
        return next;
      });
  return groupLanes(e, accs);
}

SmallVector<Value> cpu::int8DecodeSums(ForwardEmitter &e,
                                       kvrt_weight_format format, Value bytes,
                                       const Int8Activations &act, Value k,
                                       Value t, ArrayRef<Value> rows,
                                       Int8Isa isa, bool farPrefetch) {
  if (int8ScaleBlock(format) == 32)
    return emitBlock32DecodeTile(e, format, bytes, act, k, t, rows, isa);
  return emitKQuantDecodeTile(e, format, bytes, act, k, t, rows, isa,
                              farPrefetch);
}

/// Q8_0, Q4_0, Q4_K, Q5_K and Q6_K (the others widen).
bool cpu::hasInt8Dot(kvrt_weight_format format) {
  return format == KVRT_WEIGHT_Q8_0 || format == KVRT_WEIGHT_Q4_0 ||
         format == KVRT_WEIGHT_Q4_K || format == KVRT_WEIGHT_Q5_K ||
         format == KVRT_WEIGHT_Q6_K;
}

/// Q8_0, Q4_0 (as Q8_0's), Q4_K and Q6_K (a Q5_K prefill widens).
bool cpu::hasInt8Panels(kvrt_weight_format format) {
  return format == KVRT_WEIGHT_Q8_0 || format == KVRT_WEIGHT_Q4_0 ||
         format == KVRT_WEIGHT_Q4_K || format == KVRT_WEIGHT_Q6_K;
}

/// c[t][o] (+)= sum_i a[t][i] * b[o][i] for Q8_0, Q4_0, Q4_K, Q5_K or Q6_K
/// weights b,
/// by integer dot products: the rows of a quantised per block of 32
/// (emitQuantizeRows, parallel over rows), then, for fewer than
/// kPackedMinRows rows (decode), tiles of one token x int8TileOutputs rows
/// over the file's blocks (int8DecodeSums), parallel over groups of outputs;
/// for more (prefill), the weights repacked into panels (emitInt8PackPanels,
/// emitKQuantPackPanels, parallel over panels), the K-quants' sums of the
/// tokens' quants (emitKQuantTokenSums, parallel over rows), and tiles over
/// the panels (emitInt8PanelTiles), parallel over groups of panels x chunks
/// of kChunkRows tokens; with `amx`, a Q8_0 or Q4_K prefill asks for the
/// tile state and, where granted, packs the panels for AMX (Q8_0 unbiased,
/// Q4_K a quant a byte) and takes the AMX tiles instead (emitAmxPanelTiles).
/// The arguments are emitQuantMatmul's; its pack and widen buffers are not
/// used (the activations' and the panels' buffers are allocated per call).
void cpu::emitInt8Matmul(ForwardEmitter &e, kvrt_weight_format format,
                         bool accumulate, Int8Isa isa, bool farPrefetch,
                         bool amx, bool repacked) {
  assert(hasInt8Dot(format) && "a format without an integer dot product");
  assert((!repacked || readsDecodeRows(format, true, isa)) &&
         "repacked rows are Q8_0's or Q4_K's, for VNNI");
  std::string base = int8MatmulName(format, accumulate, repacked);
  // Repacked rows hold VNNI's biased quants: no AMX tiles over them.
  amx = amx && !repacked;
  func::FuncOp fn = beginQuantMatmul(e, base);
  Value a = fn.getArgument(0), bytes = fn.getArgument(1),
        offset = fn.getArgument(2), c = fn.getArgument(3);
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  Value n = memref::DimOp::create(e.b, a, c0);
  Value k = memref::DimOp::create(e.b, a, c1);
  Value m = memref::DimOp::create(e.b, c, c1);
  Value small = e.cmp(arith::CmpIPredicate::ult, n, e.cIndex(kPackedMinRows));
  // Everything on the quantised activations: a decode step and a prefill.
  auto int8 = [&](bool decodeOnly) {
    // AMX's A tiles read whole groups of kAmxRows tokens: the quants' rows
    // rounded up (the padding zeroed before the tiles).
    bool amxTiles =
        amx && (format == KVRT_WEIGHT_Q8_0 || format == KVRT_WEIGHT_Q4_K);
    Value quantRows = amxTiles ? e.mul(e.divu(e.add(n, e.cIndex(kAmxRows - 1)),
                                              e.cIndex(kAmxRows)),
                                       e.cIndex(kAmxRows))
                               : n;
    int64_t scaleBlock = int8ScaleBlock(format);
    Int8Activations act = allocInt8Activations(e, n, quantRows, k, scaleBlock);
    Value pairs = act.pairs;
    auto alloc = [&](Type element, Value count) -> Value {
      return memref::AllocOp::create(e.b, e.buffer(element), ValueRange{count},
                                     e.b.getI64IntegerAttr(64));
    };
    parallelFor(
        e, base + "_quantize_task", n,
        [&] {
          SmallVector<Value> captures{a};
          captures.append(act.buffers());
          return captures;
        }(),
        [&](ValueRange v, Value lo, Value hi) {
          Value k = memref::DimOp::create(e.b, v[0], e.cIndex(1));
          emitQuantizeRows(
              e, v[0],
              Int8Activations::fromBuffers(e, v.drop_front(1), k, scaleBlock),
              lo, hi, isa);
        });
    DecodeKernel kernel{format, /*int8=*/true, isa, repacked, farPrefetch};
    Value groups = decodeTileCount(e, kernel, m);
    SmallVector<Value> captures{bytes,      offset, act.quants, act.bias,
                                act.scales, c,      a,          act.blockBias};
    // The activations as a task receives them, and k (from a's shape); the
    // K-quants' sums where the task's captures end with them (decode).
    auto unpack = [&](ValueRange v, Value &k, Value sums = Value()) {
      k = memref::DimOp::create(e.b, v[6], e.cIndex(1));
      Int8Activations act = Int8Activations::fromBuffers(
          e, ValueRange{v[2], v[3], v[4], v[7]}, k, 32);
      act.scaleBlock = scaleBlock;
      act.sums = sums;
      return act;
    };

    auto decode = [&] {
      SmallVector<Value> decodeCaptures(captures);
      if (scaleBlock == 256)
        decodeCaptures.push_back(act.sums);
      parallelFor(e, base + "_dot_task", groups, decodeCaptures,
                  [&](ValueRange v, Value lo, Value hi) {
                    DecodeInput in;
                    Int8Activations act =
                        unpack(v, in.k, scaleBlock == 256 ? v[8] : Value());
                    (scaleBlock == 256 ? in.actK : in.act) = act;
                    in.a = v[6];
                    in.n = memref::DimOp::create(e.b, v[6], e.cIndex(0));
                    emitDecodeTiles(e, kernel, in, v[0], v[1], v[5], lo, hi,
                                    accumulate);
                  });
    };
    auto prefill = [&] {
      // The weights repacked into panels of 16 outputs (their scales
      // beside), then register tiles over them; Q4_K and Q6_K take sums of
      // the tokens' quants too (emitKQuantTokenSums).
      bool kQuant = int8ScaleBlock(format) == 256;
      Value blocks = e.divu(k, e.cIndex(32));
      Value panels = e.divu(e.add(m, e.cIndex(15)), e.cIndex(16));
      Value panelBlocks = e.mul(panels, blocks);
      // Q4_K: two quants a byte, or one for AMX (a B tile's bytes).
      Value packedQuants = alloc(
          e.byte(),
          e.mul(panelBlocks,
                e.cIndex(format == KVRT_WEIGHT_Q4_K && !amxTiles ? 256 : 512)));
      Value packedScales =
          alloc(e.f32(), e.mul(panelBlocks, e.cIndex(kQuant ? 32 : 16)));
      // For vpdpbusd (Q8_0's quants biased, Q4_K's two a byte) or for AMX
      // (unbiased, one a byte).
      auto pack = [&](StringRef task, bool forVnni) {
        parallelFor(
            e, base + task.str(), panels,
            {bytes, offset, packedQuants, packedScales, c, a},
            [&](ValueRange v, Value lo, Value hi) {
              Value k = memref::DimOp::create(e.b, v[5], e.cIndex(1));
              Value m = memref::DimOp::create(e.b, v[4], e.cIndex(1));
              if (repacked && kQuant)
                emitRepackedQ4KPackPanels(e, v[0], v[1], k, v[2], v[3], lo, hi);
              else if (repacked)
                emitRepackedQ8PackPanels(e, v[0], v[1], k, v[2], v[3], lo, hi);
              else if (kQuant)
                emitKQuantPackPanels(e, format, v[0], v[1], k, m, v[2], v[3],
                                     lo, hi, forVnni);
              else
                emitInt8PackPanels(e, format, v[0], v[1], k, m, v[2], v[3], lo,
                                   hi, forVnni);
            });
      };
      if (!amxTiles)
        pack("_pack_task", /*forVnni=*/true);
      Value sums;
      if (kQuant) {
        bool q4k = format == KVRT_WEIGHT_Q4_K;
        sums = alloc(q4k ? e.f32() : e.i32(),
                     e.mul(e.mul(n, pairs), e.cIndex(q4k ? 2 : 4)));
        SmallVector<Value> sumCaptures(captures);
        sumCaptures.push_back(sums);
        parallelFor(e, base + "_sums_task", n, sumCaptures,
                    [&](ValueRange v, Value lo, Value hi) {
                      Value k;
                      Int8Activations act = unpack(v, k);
                      emitKQuantTokenSums(e, format, act, v[8], lo, hi);
                    });
      }
      Value chunkRows = e.cIndex(kChunkRows);
      Value chunks = e.divu(e.add(n, e.sub(chunkRows, c1)), chunkRows);
      SmallVector<Value> tileCaptures(captures);
      tileCaptures.append({chunks, packedQuants, packedScales});
      if (kQuant)
        tileCaptures.push_back(sums);
      // The tiles: task `task` over groups of `tilePanels` panels x chunks
      // of kChunkRows tokens, `tile` per item (v the captures, `scratch`
      // what `perTask` made once per task, if any).
      auto tileTask = [&](StringRef task, ValueRange taskCaptures,
                          int64_t tilePanels, function_ref<Value()> perTask,
                          function_ref<void(
                              ValueRange v, const Int8Activations &act, Value k,
                              Value t0, Value t1, Value panel0, Value scratch)>
                              tile) {
        Value group = e.cIndex(tilePanels);
        Value groups = e.divu(e.add(panels, e.sub(group, c1)), group);
        parallelFor(e, base + task.str(), e.mul(groups, chunks), taskCaptures,
                    [&](ValueRange v, Value lo, Value hi) {
                      Value k;
                      Int8Activations act = unpack(v, k);
                      Value n = memref::DimOp::create(e.b, v[6], e.cIndex(0));
                      Value scratch = perTask ? perTask() : Value();
                      e.forLoop(lo, hi, e.cIndex(1), [&](Value item) {
                        Value g = e.divu(item, v[8]);
                        Value t0 =
                            e.mul(e.remu(item, v[8]), e.cIndex(kChunkRows));
                        Value t1 = e.minu(n, e.add(t0, e.cIndex(kChunkRows)));
                        tile(v, act, k, t0, t1, e.mul(g, e.cIndex(tilePanels)),
                             scratch);
                      });
                    });
      };
      auto vnniTiles = [&] {
        tileTask("_tile_task", tileCaptures, kInt8TilePanels, nullptr,
                 [&](ValueRange v, const Int8Activations &act, Value k,
                     Value t0, Value t1, Value panel0, Value) {
                   emitInt8PanelTiles(e, format, act, kQuant ? v[11] : Value(),
                                      v[9], v[10], v[5], k, t0, t1, panel0,
                                      accumulate);
                 });
      };
      if (!amxTiles) {
        vnniTiles();
      } else {
        // AMX where this process is granted it (the compiler's is:
        // hostHasAmx), else the same products by VNNI.
        e.ifElse(
            requestAmx(e),
            [&] {
              pack("_amx_pack_task", /*forVnni=*/false);
              // The quants' padding rows, read by the last A tiles.
              Value quantsRow = e.mul(pairs, e.cIndex(64));
              e.forLoop(e.mul(n, quantsRow), e.mul(quantRows, quantsRow),
                        e.cIndex(64), [&](Value at) {
                          vector::StoreOp::create(
                              e.b,
                              arith::ConstantOp::create(
                                  e.b, DenseElementsAttr::get(
                                           e.vec(64, e.byte()),
                                           e.b.getI8IntegerAttr(0))),
                              act.quants, ValueRange{at});
                        });
              // The tokens' scales (and Q4_K's sums) block-major,
              // [blocks][quantRows] (zeros for the padding), so a tile's 16
              // are side by side.
              Value scalesT = alloc(e.f32(), e.mul(blocks, quantRows));
              Value sumsT =
                  kQuant ? alloc(e.f32(), e.mul(blocks, quantRows)) : Value();
              Value laneRow = e.mul(pairs, e.cIndex(16));
              Value sumsRow = e.mul(pairs, e.cIndex(2));
              e.forLoop(c0, quantRows, c1, [&](Value t) {
                Value real = e.cmp(arith::CmpIPredicate::ult, t, n);
                Value token = e.minu(t, e.sub(n, c1));
                e.forLoop(c0, blocks, c1, [&](Value b) {
                  Value at = e.add(e.mul(b, quantRows), t);
                  Value d = e.load(act.scales, {e.add(e.mul(token, laneRow),
                                                      e.mul(b, e.cIndex(8)))});
                  e.store(e.select(real, d, e.cF32(0.0f)), scalesT, {at});
                  if (kQuant) {
                    Value s = e.load(sums, {e.add(e.mul(token, sumsRow), b)});
                    e.store(e.select(real, s, e.cF32(0.0f)), sumsT, {at});
                  }
                });
              });
              SmallVector<Value> amxCaptures(tileCaptures);
              amxCaptures.append({scalesT, quantRows});
              if (kQuant)
                amxCaptures.push_back(sumsT);
              size_t first = tileCaptures.size();
              auto cTiles = [&]() -> Value {
                return memref::AllocaOp::create(
                    e.b,
                    MemRefType::get(
                        {2 * kAmxGroupBlocks * kAmxTilePanels * kAmxRows * 16},
                        e.i32()),
                    e.b.getI64IntegerAttr(64));
              };
              tileTask("_amx_tile_task", amxCaptures, kAmxTilePanels, cTiles,
                       [&](ValueRange v, const Int8Activations &act, Value k,
                           Value t0, Value t1, Value panel0, Value cTiles) {
                         emitAmxPanelTiles(
                             e, format, act, v[9], v[10], v[first],
                             v[first + 1], kQuant ? v[first + 2] : Value(),
                             v[5], cTiles, k, t0, t1, panel0, accumulate);
                       });
              memref::DeallocOp::create(e.b, scalesT);
              if (kQuant)
                memref::DeallocOp::create(e.b, sumsT);
            },
            [&] {
              pack("_pack_task", /*forVnni=*/true);
              vnniTiles();
            });
      }
      memref::DeallocOp::create(e.b, packedQuants);
      memref::DeallocOp::create(e.b, packedScales);
      if (kQuant)
        memref::DeallocOp::create(e.b, sums);
    };
    if (decodeOnly)
      decode();
    else
      e.ifElse(small, decode, prefill);
    freeInt8Activations(e, act);
  };
  if (isa == Int8Isa::Avx2 || !hasInt8Panels(format)) {
    // AVX2 has no vpdpbusd for the prefill's panels, Q5_K no panels:
    // integer dots for a decode step, the weights widened for a prefill.
    e.ifElse(
        small, [&] { int8(/*decodeOnly=*/true); },
        [&] {
          emitWidenedProduct(e, format, base, a, bytes, offset, c,
                             fn.getArgument(4), fn.getArgument(5), accumulate);
        });
  } else {
    int8(/*decodeOnly=*/false);
  }
  e.finishFunction();
}
