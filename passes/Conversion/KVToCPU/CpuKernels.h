//===- CpuKernels.h - The CPU forward's kernels, file by file ---*- C++ -*-===//
//
// Internal to KVToCPU. The stages of CpuTarget.cpp call private functions
// ("kernels") that one file per job emits: CpuMath.cpp (rmsnorm, rope_table,
// rope_apply, swiglu, exp16), CpuMatmul.cpp (the f32 packed and dot-product
// matmuls), CpuQuantMatmul.cpp (every other weight format, widened to f32),
// CpuInt8Matmul.cpp (quantised formats by integer dot products),
// CpuAttention.cpp (attention_kernel) and CpuKVPages.cpp (store_kv,
// materialize_kernel); CpuParallel.h is the parallel loop several of them use.
// This header is what they share: the vector width, the memref types of the
// kernels' arguments, the function being emitted and the call of a kernel.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_PASSES_CONVERSION_KVTOCPU_CPUKERNELS_H
#define KVIR_PASSES_CONVERSION_KVTOCPU_CPUKERNELS_H

#include "passes/Conversion/Forward/ForwardEmitter.h"
#include "runtime/core/WeightFormat.h"

namespace mlir::kv::cpu {

/// Lanes of the f32 vectors the kernels use (AVX-512; LLVM splits them on
/// narrower hosts).
constexpr int64_t kLanes = 16;

/// memref<?x?xf32, strided<[?, 1], offset: ?>>: rows of a matrix.
MemRefType matrixType(ForwardEmitter &e);
/// memref<?xf32, strided<[1], offset: ?>>.
MemRefType vectorType(ForwardEmitter &e);
/// memref<head_size x f32, strided<[1], offset: ?>>: one head.
MemRefType headType(ForwardEmitter &e);
/// memref<half x f64>: the cos or sin table of one position.
MemRefType ropeTableType(ForwardEmitter &e);

/// The function the builder is inserting into: its entry block is where
/// buffers that serve the whole function go.
func::FuncOp enclosingFunction(ForwardEmitter &e);

/// A call of the kernel `<prefix>_<kernel>`.
SmallVector<Value> call(ForwardEmitter &e, StringRef kernel,
                        ValueRange operands, TypeRange results = {});

//===----------------------------------------------------------------------===//
// The kernels, in the order CpuTarget::emitKernels emits them. `vectorBits`
// (512: AVX-512, 256: AVX2) sets the register blocking.
//===----------------------------------------------------------------------===//

/// CpuMath.cpp: rmsnorm.
void emitRmsnorm(ForwardEmitter &e);
/// CpuMatmul.cpp: matmul_nt, or matmul_nt_acc with `accumulate`.
void emitMatmul(ForwardEmitter &e, int64_t vectorBits, bool accumulate);
/// CpuMatmul.cpp: matmul_nt_panels (or matmul_nt_acc_panels), the packed
/// path's tiles over weights packed before the call (a, panels, c).
void emitPanelMatmul(ForwardEmitter &e, int64_t vectorBits, bool accumulate);
/// CpuMatmul.cpp: outputs per panel of the packed matmul for `vectorBits`
/// (the panel_width of weights packed once per model, ForwardABI.def).
int64_t panelWidth(int64_t vectorBits);
/// CpuQuantMatmul.cpp: matmul_<format> (or _acc) of weights in a format other
/// than f32, (a, bytes, byte offset, c); quantMatmulName names it.
void emitQuantMatmul(ForwardEmitter &e, kvrt_weight_format format,
                     bool accumulate, bool farPrefetch);
std::string quantMatmulName(kvrt_weight_format format, bool accumulate);
/// The instructions of the integer-dot kernels: AVX-512 VNNI on 512-bit
/// vectors (vpdpbusd, vpdpwssd), or AVX2's vpmaddubsw and vpmaddwd on the
/// 256-bit halves of the same values (a decode step only: with Avx2 a
/// prefill widens, emitInt8Matmul).
enum class Int8Isa { Vnni512, Avx2 };
/// CpuInt8Matmul.cpp: the same function (name, arguments, result) by integer
/// dot products on the weights' blocks, the activations quantised per block
/// of 32 to int8 (llama.cpp's Q8_0 activations): AVX-512 VNNI (vpdpbusd).
/// Only for formats where hasInt8Dot holds: Q8_0, Q4_0, Q4_K, Q5_K and Q6_K; a
/// prefill repacks the weights into panels per call where hasInt8Panels
/// holds, and widens them (emitQuantMatmul's prefill) where not. With `amx`
/// (the host has it: hostHasAmx), a Q8_0 or Q4_K prefill multiplies on AMX
/// tiles where the running process is granted them, VNNI where not. With
/// Int8Isa::Avx2 the decode step's tiles take AVX2's instructions and a
/// prefill widens the weights (emitQuantMatmul's prefill).
/// With `repacked` (Q8_0, Q4_K by VNNI, readsDecodeRows), `bytes` and the
/// offset are the rows the runtime repacked for decode (decode_rows): a decode
/// step takes emitRepackedDecodeTile's tiles, a prefill copies its panels
/// from them (no AMX); int8MatmulName names the kernel.
void emitInt8Matmul(ForwardEmitter &e, kvrt_weight_format format,
                    bool accumulate, Int8Isa isa, bool farPrefetch,
                    bool amx = false, bool repacked = false);
std::string int8MatmulName(kvrt_weight_format format, bool accumulate,
                           bool repacked);
bool hasInt8Dot(kvrt_weight_format format);
bool hasInt8Panels(kvrt_weight_format format);
/// CpuQuantMatmul.cpp: the prefill half of emitQuantMatmul (the weights
/// widened to f32 into `widen`, then the packed f32 kernel), inside the
/// function `base` of emitQuantMatmul's arguments.
void emitWidenedProduct(ForwardEmitter &e, kvrt_weight_format format,
                        StringRef base, Value a, Value bytes, Value offset,
                        Value c, Value packed, Value widen, bool accumulate);
/// CpuMath.cpp: rope_table, rope_rows, rope_row, rope_apply, swiglu,
/// add_bias (configs with qkv_bias only).
void emitRopeTable(ForwardEmitter &e);
void emitRopeRows(ForwardEmitter &e);
void emitRopeRow(ForwardEmitter &e);
void emitRopeApply(ForwardEmitter &e);
/// The bound of one prefill's RoPE tables (rope_rows): they are built
/// where they fit, a few KiB for an edit's segments, 8 MiB for 8K tokens
/// over one run of head size 64.
constexpr int64_t kRopeTablesMaxBytes = int64_t(16) << 20;
/// The rows of rope_rows' tables for n tokens over `runs` (index), 0 where
/// they would take more than kRopeTablesMaxBytes: the stages then compute
/// each table where they use it (rope_table).
Value ropeTableRows(ForwardEmitter &e, Value n, Value runs);
/// The rotation pair (cs, sn) of query or key row `row` of the call's
/// tables, where `tables` has any; else rope_table of position `pos`.
void ropeRowOrTable(ForwardEmitter &e, Value tables, Value row, Value pos,
                    Value cs, Value sn);
void emitSwiglu(ForwardEmitter &e);
void emitAddBias(ForwardEmitter &e);
/// CpuKVPages.cpp: store_kv.
void emitStoreKV(ForwardEmitter &e);
/// CpuMath.cpp: exp16.
void emitExp16(ForwardEmitter &e);
/// CpuAttention.cpp: attention_kernel.
void emitAttention(ForwardEmitter &e, int64_t vectorBits);
/// CpuKVPages.cpp: materialize_kernel.
void emitMaterialize(ForwardEmitter &e);

/// CpuMatmul.cpp: floats of the buffer a function's matmuls pack weights
/// into (their fourth argument).
int64_t packBufferFloats(ForwardEmitter &e, int64_t vectorBits);

//===----------------------------------------------------------------------===//
// What the three matmul files share
//===----------------------------------------------------------------------===//

/// The packed matmul: a product of fewer rows than this takes the
/// dot-product kernel instead (packing the weights would cost more than it
/// saves), which keeps single-token decoding memory-bound on the weights.
constexpr int64_t kPackedMinRows = 4;
/// Rows of a work item of the packed matmul (a multiple of every tile's rows).
constexpr int64_t kChunkRows = 96;
/// How far ahead each row of a decode step's tile prefetches its weights,
/// into L1. A tile's rows are decodeTileRow's, each a stream through the
/// weight, so the prefetch runs on past a row's end into the same row of the
/// next tile. Measured on TinyLlama's F16 file (rows of 4 and 11 KiB, 2 GB,
/// far beyond the L3), tiles of 4 rows, one thread, in CPU time on a loaded
/// machine: 1 KiB ahead 14.2 GB/s, 2 KiB 14.1-14.4, 3 KiB 13.8, 4 KiB 13.3, a
/// whole tile ahead into L2 13.0-13.5, none 12.6; a plain read of 4 streams
/// 14.2-15. Once weights sat on 2 MiB pages (HugePages.h), 1 KiB did better
/// than 2: kv-run --greedy on TinyLlama's files, one thread, idle machine,
/// ms a step, 2 KiB / 1 KiB / 768 bytes: Q8_0 (tiles of 8) on 2 MiB pages
/// 83.5-85.2 / 81.4-83.1 / 80.6-81.8, on 4 KiB pages 85.7-89.0 / 85.8-86.8 /
/// 85.3-86.4; F16 150.0-153.5 / 146.6-149.6 / 148.0-150.5; Q4_K_M
/// 83.4-84.3 / 81.4-83.2 / 88.7-90.0. (All of these with a tile's rows
/// consecutive, before decodeTileRow.) On an AMD EPYC (Zen 4) 2-core
/// machine, with decodeTileRow's rows and the fused products, 512 bytes did
/// better than 1 KiB on every file and thread count: kv-run --greedy 32
/// after 64 tokens, ms a step, four alternated runs, median 1 KiB / 512:
/// F16 one thread 158.4 / 127.7, two 92.0 / 82.3; Q8_0 60.9 / 57.8 and
/// 45.9 / 41.3; Q4_K_M 54.0 / 51.3 and 30.4 / 27.7. 256 bytes was worse
/// for Q8_0 (65-68 on one thread); for F16 it did better in one set
/// (103-126) and the same as 512 in another (four alternated runs each,
/// one-thread medians 136.8 / 137.5), so every format kept 512. 2 and 4 KiB
/// as 1 KiB; none at all 121-148 for F16. The K-quants' integer tiles take
/// kQuantTilePrefetchBlocks instead, F16 and BF16 rows
/// halfDecodeTilePrefetchBytes.
constexpr int64_t kDecodeTilePrefetchBytes = 512;
/// Whether this host's decode tiles prefetch their 16-bit float rows and
/// their K-quant blocks far ahead (halfDecodeTilePrefetchBytes,
/// kQuantTilePrefetchBlocks): where the L1 data cache has 12 ways or more,
/// or says nothing (hostL1DataWays), as on the Intel Xeons measured, whose
/// memory answers a core later than the AMD EPYC's (Zen 4, 8 ways) and so
/// wants more lines in flight. The L1's ways are what tells the two
/// families measured apart here, not the cause.
bool decodePrefetchesFar();
/// How far ahead a decode tile's row of 16-bit floats (F16, BF16)
/// prefetches: 256 bytes near, 512 `far` (DecodePrefetch, CpuTarget.h).
/// Near: the Zen 4 machine on 2026-12-04, TinyLlama's F16 file,
/// kv-run --greedy 32 after 64 tokens, ms a step, medians of alternated runs
/// beside llama.cpp's own step on the same file (it reads one row at a time,
/// no prefetch): one thread, 512 / 256 / llama.cpp 80.7 / 76.3 / 76.7 (six
/// runs), 95.6 / 85.3 / - in a slower hour (128: 83.6, 192: 90.8); two
/// threads 66.5 / 58.1 / 64.7 (six), 66.2 / 62.9 / 64.4 (five). A C model of
/// the tile on the mapped file agreed: 4 spread rows read 27.2-29.9 GB/s
/// with 256 bytes, 20.9-26.5 with 512 and 24.8-29.1 with none (four rounds).
/// Far: an Intel Xeon with AMX (2 cores, 48 KiB 12-way L1) on 2026-12-05,
/// the same file and command after 64 ids, 48 steps, two alternated rounds
/// (bench/results/intel-xeon-decode-prefetch.txt): one thread 256 bytes
/// 179.5-180.8 ms, none 142.4-144.0, 384 124.1-129.6, 512 118.7-121.2, 768
/// 122.8-126.8, 1 KiB 122.6-126.8, 2 KiB 125.1-126.2 (8 rows; 4 rows at 512:
/// 130.9-133.2); two threads 256 95.2-96.0, 512 64.0-64.3, 768 65.9-66.7.
/// BF16 shares the loop and was measured on neither.
int64_t halfDecodeTilePrefetchBytes(bool far);
/// How many of its 256-element blocks ahead a row of a K-quant integer decode
/// tile (emitKQuantDecodeTile) prefetches, the distance rounded up to whole
/// lines: one near, eight `far` (DecodePrefetch, CpuTarget.h).
/// Near: these tiles spend the most instructions a byte, so 512 bytes
/// (3.5 Q4_K blocks) reached too far on the Zen 4 machine: kv-run --greedy
/// 96 after 64 tokens, TinyLlama-shape files, one thread, alternated runs,
/// medians: Q4_K_M with Q4_K / Q6_K blocks prefetched 512 / 512 bytes ahead
/// 35.6 ms a step, 216 / 210 30.7, 192 / 256 (one block) 29.9; Q4_K alone
/// 144 31.6, 216 30.7, 288 33.7, 360 34.7, 512 34.3, 1 KiB 34.8, none 35.4;
/// Q5_K_M 512 / 512 38.5, 176 / 210 33.4. On two threads Q4_K 144-512 all
/// took 21.4-21.7 ms. (Q8_0's and Q4_0's tiles: 256 bytes did worse, 768
/// no better; they keep 512.)
/// Far: the Intel Xeon above, TinyLlama-shape Q4_K_M, 48 steps after 64 ids,
/// two alternated rounds a set, ms a step, blocks ahead: one thread 1
/// 43.6-44.3, 2 42.1-42.3, 3 41.2-42.4, 4 39.8-40.3, 6 39.7-40.7, 8
/// 37.7-39.0, 12 38.6-38.8, 16 37.8-38.9; two threads 1 23.1-23.5, 2 22.6,
/// 4 20.9-21.4, 8 20.2-21.4, 12 20.6-20.9, 16 20.5-20.7.
int64_t kQuantTilePrefetchBlocks(bool far);
/// Weight row `r` of decode tile `tile` of `tiles`: tile + r * tiles. A
/// tile's rows are `tiles` rows apart, so that row r of every tile, in tile
/// order, is one sequential stream through the weight, and a task of
/// consecutive tiles reads as many such streams as a tile has rows. Tiles
/// of consecutive rows read those rows side by side, two or three of them
/// in each 4 KiB page, a pattern the hardware's streamer follows badly: a
/// TinyLlama-shape decode step, one thread, Q8_0 (tiles of 8) took
/// 86.9-88.8 ms with consecutive rows and 78.8-80.4 spread; Q4_K_M (tiles
/// of 2) 62.9-63.9 and 55.8-57.1; two threads, Q8_0 47.2 and 42.0-43.8
/// (alternated runs, idle machine).
Value decodeTileRow(ForwardEmitter &e, Value tile, Value tiles, int64_t r);
/// CpuQuantMatmul.cpp: prefetches the lines of the `stepBytes` bytes from
/// byte `at` of each of a decode tile's rows (their byte offsets,
/// decodeTileRow's) `aheadBytes` ahead in the row's stream.
void prefetchTileRows(ForwardEmitter &e, Value bytes, ArrayRef<Value> rows,
                      Value at, int64_t stepBytes,
                      int64_t aheadBytes = kDecodeTilePrefetchBytes);
/// CpuQuantMatmul.cpp: begins `base`, a matmul of weights in a format other
/// than f32, with the arguments every such kernel takes: (a, bytes, byte
/// offset of b, c, pack buffer, widen buffer).
func::FuncOp beginQuantMatmul(ForwardEmitter &e, StringRef base);
/// CpuQuantMatmul.cpp: bytes of a row of `k` (index) weights in `format`.
Value weightRowBytes(ForwardEmitter &e, kvrt_weight_format format, Value k);

//===----------------------------------------------------------------------===//
// A decode step's tiles, which the matmul kernels and the fused products
// (CpuDecodeProducts.cpp) share
//===----------------------------------------------------------------------===//

/// The activations of an integer-dot matmul, quantised once per call, per
/// row and pair of 32-element blocks p (rows padded to whole pairs with zero
/// blocks): `quants` [n][pairs * 64] int8, the pair's 64 quants; `bias`
/// [n][pairs * 16] i32, lane j = -128 * (sum of quants 4j .. 4j + 3), which
/// starts the pair's dot product (the weights enter it as w + 128, see
/// vpdpbusd below); `scales` [n][pairs * 16] f32, the first block's scale in
/// lanes 0-7, the second's in 8-15; `blockBias` [n][pairs * 2] i32, -128 *
/// (sum of a block's quants), which starts a block's dot product in the
/// prefill's kernel (emitInt8PanelTiles).
/// A scale covers `scaleBlock` elements: 32 for Q8_0 weights (llama.cpp's
/// Q8_0 activations), 256 for the K-quants (its Q8_K: the 8 blocks of 32 of
/// a 256-element block share one scale, held in each block's lanes as
/// above), whose decode tiles then scale a block's integer sums once
/// (emitKQuantDecodeTile). With 256, `sums` [n][blocks256 * 32] i16: per
/// 256-element block the sums of its quants over its 16 runs of 16, then
/// over its 8 runs of 32 (the last 8 slots unused: a block's sums fill one
/// 64-byte line).
struct Int8Activations {
  Value quants, bias, scales, blockBias, pairs, sums;
  int64_t scaleBlock = 32;

  /// The buffers, in the order fromBuffers takes them (a task's captures).
  SmallVector<Value> buffers() const;
  /// The activations of rows of k (index) elements from their buffers.
  static Int8Activations fromBuffers(ForwardEmitter &e, ValueRange buffers,
                                     Value k, int64_t scaleBlock);
};

/// CpuInt8Matmul.cpp: elements per activation scale for `format`'s integer
/// dots: 32 for Q8_0 and Q4_0, 256 for the K-quants (Q4_K, Q5_K, Q6_K).
int64_t int8ScaleBlock(kvrt_weight_format format);
/// CpuInt8Matmul.cpp: buffers (memref.alloc) for the quantised activations
/// of n rows of k (index) elements, the quants of `quantRows` rows (n, or
/// more for tiles that read whole groups of rows), a scale per
/// `scaleBlock`; freeInt8Activations frees them.
Int8Activations allocInt8Activations(ForwardEmitter &e, Value n,
                                     Value quantRows, Value k,
                                     int64_t scaleBlock);
void freeInt8Activations(ForwardEmitter &e, const Int8Activations &act);
/// CpuInt8Matmul.cpp: rows lo .. hi-1 of `a` [n][k] quantised into `act`,
/// block by block as llama.cpp's Q8_0 (scaleBlock 32) or Q8_K (256)
/// activations.
void emitQuantizeRows(ForwardEmitter &e, Value a, const Int8Activations &act,
                      Value lo, Value hi, Int8Isa isa);
/// CpuInt8Matmul.cpp: the weight rows of a decode tile by integer dots
/// (VNNI: Q8_0 and Q4_0 12, Q4_K and Q5_K 6, Q6_K 4; AVX2, 16 registers: 2),
/// and the sums of token t's quantised activations (a scale per
/// int8ScaleBlock(format)) with each of the rows that start at the byte offsets
/// `rows` of `bytes`.
int64_t int8TileOutputs(kvrt_weight_format format, Int8Isa isa);
SmallVector<Value> int8DecodeSums(ForwardEmitter &e, kvrt_weight_format format,
                                  Value bytes, const Int8Activations &act,
                                  Value k, Value t, ArrayRef<Value> rows,
                                  Int8Isa isa, bool farPrefetch);
/// CpuQuantMatmul.cpp: the weight rows of a decode tile widened to f32 (F16
/// 8, or 4 where the L1 has fewer than 12 ways; others 4), and the sums of row
/// t of `a` ([n][k]) with each of the rows that start at the byte offsets
/// `rows` of `bytes`, widened in registers.
int64_t decodeTileRows(kvrt_weight_format format);
SmallVector<Value> emitQuantDots(ForwardEmitter &e, kvrt_weight_format format,
                                 Value a, Value bytes, ArrayRef<Value> rows,
                                 Value t, Value k, bool farPrefetch);

/// CpuInt8Matmul.cpp: a decode tile over Q8_0 rows repacked for decode
/// (decode_rows; kvrt::repackQ8Rows16): token t (a row of the quantised
/// activations, a scale per 32) against the groups of kvrt::kQ8Rows16 rows
/// starting at the byte offsets `groupAt` of `bytes`. Per block and group,
/// eight 64-byte loads, each 4 quants of all 16 rows, dotted (vpdpbusd, the
/// weights stored + 128) against the token's 4 quants in every lane, the
/// dot started at the token's -128 sum q: lane r holds row r's sum, scaled
/// by the group's 16 f16 scales times the token's in one conversion, one
/// multiply and one FMA for the 16 rows. Returns the sums of every group's
/// rows in order (16 a group). AVX-512 VNNI only. Q4_K rows
/// (kvrt::repackQ4KRows16) take Q8_K activations (a scale per 256) and the
/// same tile over their nibbles, scales and mins (CpuInt8Matmul.cpp).
SmallVector<Value> emitRepackedDecodeTile(ForwardEmitter &e,
                                          kvrt_weight_format format,
                                          Value bytes,
                                          const Int8Activations &act, Value k,
                                          Value t, ArrayRef<Value> groupAt);
/// The groups of kvrt::kQ8Rows16 rows a tile of emitRepackedDecodeTile
/// reads: two, spread as decodeTileRow spreads rows (group j of tile t of
/// `tiles` is t + j tiles).
constexpr int64_t kRepackedTileGroups = 2;

/// How a decode step multiplies weights of `format` (not f32): by integer
/// dots on the quantised activations (`int8`) or widened to f32; with
/// `repacked`, over the rows the runtime repacked for decode (decode_rows:
/// Q8_0 and Q4_K by AVX-512 VNNI dots, readsDecodeRows) instead of the
/// file's.
struct DecodeKernel {
  kvrt_weight_format format;
  bool int8;
  /// The instructions of its integer dots.
  Int8Isa isa = Int8Isa::Vnni512;
  bool repacked = false;
  /// Whether its tiles prefetch far ahead (DecodePrefetch, CpuTarget.h).
  bool farPrefetch = false;
  /// The weight rows of one of its tiles.
  int64_t tileRows() const {
    if (repacked)
      return kRepackedTileGroups * kvrt::kQ8Rows16;
    return int8 ? int8TileOutputs(format, isa) : decodeTileRows(format);
  }
  /// Its name in the names of the kernels that take it ("q8_0",
  /// "q8_0_rows16").
  std::string name() const;
};

/// Whether a decode kernel multiplying `format` by integer dots (`int8`)
/// of `isa` can read the rows repacked for decode: Q8_0 and Q4_K by
/// VNNI-512.
inline bool readsDecodeRows(kvrt_weight_format format, bool int8, Int8Isa isa) {
  return kvrt::decodeGroupBlockBytes(format) > 0 && int8 &&
         isa == Int8Isa::Vnni512;
}

/// The input of a decode step's product as a kernel sees it: the rows of a
/// ([n][k]), and their quantised activations where a kernel takes integer
/// dots: `act` with a scale per 32 elements (Q8_0), `actK` per 256 (the
/// K-quants), each only where a kernel takes it.
struct DecodeInput {
  Value a, n, k;
  Int8Activations act, actK;

  /// The activations the integer dots of `format` take.
  const Int8Activations &activationsFor(kvrt_weight_format format) const {
    return int8ScaleBlock(format) == 256 ? actK : act;
  }
};

/// What emitDecodeTiles stores of an output: combine(what c holds, the sum).
using CombineFn = function_ref<Value(Value held, Value sum)>;
/// CpuDecodeProducts.cpp: the decode tiles of a weight of m rows (index),
/// and the tiles lo .. hi-1 of the product of `in` with the weight at byte
/// `offset` of `bytes`, into c ([n][m], its columns the weight's rows):
/// stored, added to c with `accumulate`, or combined with c by `combine`.
/// A tile's rows are decodeTileRow's; an output past m reads the last row
/// and is not stored.
Value decodeTileCount(ForwardEmitter &e, const DecodeKernel &kernel, Value m);
void emitDecodeTiles(ForwardEmitter &e, const DecodeKernel &kernel,
                     const DecodeInput &in, Value bytes, Value offset, Value c,
                     Value lo, Value hi, bool accumulate,
                     CombineFn combine = nullptr);

/// CpuDecodeProducts.cpp: `<base>(a, (bytes, byte offset, c) per kernel)`,
/// the products of a decode step's rows of a (fewer than kPackedMinRows)
/// with several weights, c_i = a · b_iᵀ, as one parallel loop over the
/// decode tiles of them all, the activations quantised once where a kernel
/// takes integer dots; productsName names it.
void emitDecodeProducts(ForwardEmitter &e, StringRef base,
                        ArrayRef<DecodeKernel> kernels);
std::string productsName(ArrayRef<DecodeKernel> kernels);
/// CpuDecodeProducts.cpp: `<base>(a, gate bytes, gate offset, up bytes, up
/// offset, h)`, h = silu(a · gateᵀ) * (a · upᵀ) for a decode step's rows of
/// a, both weights multiplied by `kernel`, one parallel loop over their
/// tiles: a claimed block's gate tiles into h, then its up tiles combined
/// with them; gatedName names it.
void emitDecodeGated(ForwardEmitter &e, StringRef base, DecodeKernel kernel);
std::string gatedName(DecodeKernel kernel);

} // namespace mlir::kv::cpu

#endif // KVIR_PASSES_CONVERSION_KVTOCPU_CPUKERNELS_H
