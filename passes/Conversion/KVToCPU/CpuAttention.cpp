//===- CpuAttention.cpp - The CPU forward's attention -----------*- C++ -*-===//
//
// attention_kernel: n queries over every run of the view's run table, the
// query rotated once per run, stored keys never rewritten; runs and chunks
// of pages merged by online softmax. A parallel loop over query tokens (a
// prefill) or over ranges of KV heads (a decode step), with the same
// arithmetic per head either way (docs/cpu-backend.md, "Decode attention on
// every core").
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/KVToCPU/CpuKernels.h"
#include "passes/Conversion/KVToCPU/CpuParallel.h"
#include "runtime/core/ForwardABI.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <numeric>

using namespace mlir;
using namespace mlir::kv;
using namespace mlir::kv::cpu;

namespace {

/// Query tokens that share a pass of attention over the keys.
constexpr int64_t kQueryTokens = 4;
/// How many KV heads ahead (in the order a task reads them) attention
/// prefetches K/V, a line at a time.
constexpr int64_t kPrefetchHeads = 4;
constexpr int64_t kCacheLineBytes = 64;
/// Attention of fewer query tokens than this (a decode step) is parallel
/// over KV heads, not over tokens.
constexpr int64_t kHeadParallelTokens = 2 * kQueryTokens;
/// Attention of query tokens over a long context (an edit's or a compose's
/// recomputed segments: at least this many context tokens per query token)
/// is parallel over KV heads too, each task's tokens in groups that share
/// one pass over the keys: per block of kQueryTokens tokens, each pass read
/// the whole context's K/V, far beyond the last-level cache at 8K tokens.
constexpr int64_t kContextPerQuery = 8;
/// The most tokens of a group, and the bytes their state (rotated query,
/// accumulators, running max and sum) may take on a task's stack.
constexpr int64_t kGroupMaxTokens = 64;
constexpr int64_t kGroupStateBytes = 512 * 1024;

/// The most query tokens that share a pass over the keys: as many as
/// kGroupStateBytes hold (a multiple of kQueryTokens, at least one block),
/// at most kGroupMaxTokens.
int64_t groupCapacity(ForwardEmitter &e) {
  int64_t perToken = (2 * e.dim + 2 * e.heads) * int64_t(sizeof(float));
  int64_t tokens = kGroupStateBytes / perToken / kQueryTokens * kQueryTokens;
  return std::clamp(tokens, kQueryTokens, kGroupMaxTokens);
}
/// Attention's online softmax steps over chunks of whole pages of at least
/// this many keys (one page if it has more): on f16/bf16 pages, where decode
/// attention is compute-bound, 64 keys share one step's max, rescale and
/// weights (f16 decode over 128 MiB, one thread: 8.9 -> 7.1 ms); on f32
/// pages, where it is bound by memory, one page per step keeps each page's
/// K/V one sequential stream (chunks of 4 pages took 14.3 ms instead of
/// 13.1 on one thread: bench/results/decode-attention-hw.txt).
int64_t chunkKeys(Type kvElement) {
  return kvElement.getIntOrFloatBitWidth() == 32 ? 16 : 64;
}

/// The sums of the lanes of each of `vectors` (at most 16, of 16 lanes),
/// as lanes 0 .. n-1 of one vector: a transposed halving tree. Each level
/// pairs the vectors (zeros pad them to a power of two) and adds the lower
/// halves of every output's block of lanes to the upper halves, giving
/// half as many vectors with twice as many outputs, each on half as many
/// lanes; within the last vector, the halves of each block are swapped
/// and added. Every output is summed as a halving reduction of its own
/// (lane i + lane i + 8, then + 4, + 2, + 1): the order in which
/// vector.reduction's lowering adds one vector's lanes. `combine` (add when
/// null) may be another associative operation: maxnumf gives each vector's
/// largest lane, in depth 4 where vector.reduction <maxnumf> lowers to a
/// chain of 15 scalar maxss, each with its NaN fix-up.
Value reduceEach(ForwardEmitter &e, ArrayRef<Value> vectors,
                 function_ref<Value(Value, Value)> combine = {}) {
  auto add = [&](Value a, Value b) -> Value {
    return combine ? combine(a, b) : arith::AddFOp::create(e.b, a, b);
  };
  constexpr int64_t n = kLanes;
  assert(!vectors.empty() && int64_t(vectors.size()) <= n);
  SmallVector<Value> level(vectors);
  Value zero = e.splatF32(n, 0.0f);
  level.resize(llvm::PowerOf2Ceil(level.size()), zero);
  // outputs[v]: the inputs whose sums vector v holds, block by block.
  SmallVector<SmallVector<int64_t>> outputs;
  for (int64_t v = 0; v < int64_t(level.size()); ++v)
    outputs.push_back({v});
  int64_t size = n; // lanes per output block
  while (level.size() > 1) {
    int64_t half = size / 2;
    SmallVector<int64_t> lower, upper;
    for (int64_t base = 0; base < n; base += size)
      for (int64_t from : {int64_t(0), n})
        for (int64_t l = 0; l < half; ++l) {
          lower.push_back(from + base + l);
          upper.push_back(from + base + half + l);
        }
    SmallVector<Value> next;
    SmallVector<SmallVector<int64_t>> nextOutputs;
    for (size_t v = 0; v < level.size(); v += 2) {
      Value lo = vector::ShuffleOp::create(e.b, level[v], level[v + 1], lower);
      Value hi = vector::ShuffleOp::create(e.b, level[v], level[v + 1], upper);
      next.push_back(add(lo, hi));
      SmallVector<int64_t> merged;
      for (size_t b = 0; b < outputs[v].size(); ++b) {
        merged.push_back(outputs[v][b]);
        merged.push_back(outputs[v + 1][b]);
      }
      nextOutputs.push_back(merged);
    }
    level = next;
    outputs = nextOutputs;
    size = half;
  }
  Value sums = level.front();
  for (; size > 1; size /= 2) {
    SmallVector<int64_t> swapped;
    for (int64_t l = 0; l < n; ++l)
      swapped.push_back(l ^ (size / 2));
    sums = add(sums, vector::ShuffleOp::create(e.b, sums, sums, swapped));
  }
  // Input i's sum is on the first lane of its block: gather them.
  int64_t blockLanes = n / int64_t(outputs.front().size());
  SmallVector<int64_t> gather(n, 0);
  for (auto [block, input] : llvm::enumerate(outputs.front()))
    gather[input] = int64_t(block) * blockLanes;
  return vector::ShuffleOp::create(e.b, sums, sums, gather);
}

/// The attention of `spans` (query tokens x KV heads) of a task, span i
/// the tokens `span(i)` returns, each in groups of `groupTokens` (<=
/// groupCapacity) that share one pass over the keys, with the query heads
/// of its KV heads (scratch on this task's stack). `wide`: the host has
/// 512-bit vectors (AVX-512), which hold blocks of 4 x 4 scores and V sums
/// in registers, not 2 x 2.
struct Span {
  Value lo, hi, gLo, gHi;
};
void emitAttentionRows(ForwardEmitter &e, bool wide, Value q, Value pos,
                       Value kv, Value pages, Value runs, Value layer, Value pt,
                       Value out, Value tables, Value n, Value spans,
                       function_ref<Span(Value)> spanAt, Value groupTokens) {
  Type h1 = headType(e), tab = ropeTableType(e);
  Value c0 = e.cIndex(0), c1 = e.cIndex(1), c16 = e.cIndex(16);
  Value cHS = e.cIndex(e.headSize), cD = e.cIndex(e.dim),
        cNH = e.cIndex(e.heads), cG = e.cIndex(e.group);
  Value scale = e.scoreScale();
  Value ninf = e.cF32Bits(0xFF800000u), zf = e.cF32(0.0f);
  VectorType v16 = e.vec(kLanes, e.f32());
  VectorType vHS = e.vec(e.headSize, e.f32());
  VectorType m16 = e.vec(kLanes, e.i1());
  Value zv = e.splatF32(e.headSize, 0.0f);
  Value ninf16 = arith::ConstantOp::create(
      e.b, DenseElementsAttr::get(
               v16, e.b.getF32FloatAttr(llvm::bit_cast<float>(0xFF800000u))));
  Value z16 = e.splatF32(kLanes, 0.0f);
  // Keys are read in the pages' element type and widened to f32.
  VectorType k16 = v16.clone(e.kvElement());
  Value zk16 = arith::ConstantOp::create(
      e.b, DenseElementsAttr::get(k16, e.b.getFloatAttr(e.kvElement(), 0.0)));
  Value nruns = memref::DimOp::create(e.b, runs, c0);
  auto stackBuffer = [&](int64_t size, Type element) -> Value {
    return memref::AllocaOp::create(e.b, MemRefType::get({size}, element));
  };
  // Per token of a group: its rotated query, and per query head the
  // running max, sum and accumulator.
  const int64_t capacity = groupCapacity(e);
  Value qrot = stackBuffer(capacity * e.dim, e.f32());
  Value mx = stackBuffer(capacity * e.heads, e.f32());
  Value lsum = stackBuffer(capacity * e.heads, e.f32());
  Value acc = stackBuffer(capacity * e.dim, e.f32());
  // Scores of a chunk of pages, [token x G][chunk pages x page_tokens + 16]:
  // a row has room for the last 16-lane block of the weights.
  Value chunkPages = e.maxu(e.divu(e.cIndex(chunkKeys(e.kvElement())), pt), c1);
  Value scw = e.add(e.mul(chunkPages, pt), c16);
  Value sc = memref::AllocaOp::create(
      e.b, e.buffer(e.f32()),
      ValueRange{e.mul(scw, e.cIndex(kQueryTokens * e.group))});
  Value cs = memref::AllocaOp::create(e.b, cast<MemRefType>(tab));
  Value sn = memref::AllocaOp::create(e.b, cast<MemRefType>(tab));
  auto maskedLoad = [&](Value memref, Value at, Value mask,
                        Value passThrough) -> Value {
    return vector::MaskedLoadOp::create(e.b, v16, memref, ValueRange{at}, mask,
                                        passThrough);
  };
  // A head is cut in 16-lane slices; the last one is masked (by a constant
  // mask) when the head size is not a multiple of 16.
  const int64_t slices = llvm::divideCeil(e.headSize, kLanes);
  const int64_t tailLanes = e.headSize - (slices - 1) * kLanes;
  Value tailMask;
  if (tailLanes != kLanes) {
    SmallVector<bool> bits(kLanes, false);
    std::fill(bits.begin(), bits.begin() + tailLanes, true);
    tailMask =
        arith::ConstantOp::create(e.b, DenseElementsAttr::get(m16, bits));
  }
  auto sliceMask = [&](int64_t c) {
    return c == slices - 1 ? tailMask : Value();
  };
  auto loadF32 = [&](Value memref, Value at, int64_t c) -> Value {
    if (Value mask = sliceMask(c))
      return maskedLoad(memref, at, mask, z16);
    return vector::LoadOp::create(e.b, v16, memref, ValueRange{at});
  };
  auto loadKV = [&](Value at, int64_t c) -> Value {
    if (Value mask = sliceMask(c))
      return e.fromKV(vector::MaskedLoadOp::create(e.b, k16, kv, ValueRange{at},
                                                   mask, zk16));
    return e.fromKV(vector::LoadOp::create(e.b, k16, kv, ValueRange{at}));
  };
  auto storeF32 = [&](Value value, Value memref, Value at, int64_t c) {
    if (Value mask = sliceMask(c))
      vector::MaskedStoreOp::create(e.b, memref, ValueRange{at}, mask, value);
    else
      vector::StoreOp::create(e.b, value, memref, ValueRange{at});
  };
  // Register blocking of the V sums: heads x slices accumulators of 16
  // lanes, plus a V slice each and a broadcast weight (AVX-512: 4 x 4 + 4 +
  // 1 of 32 registers; AVX2, where a 16-lane vector takes two: 2 x 2).
  const int64_t valueHeads = wide ? 4 : 2;
  const int64_t valueSlices = wide ? 4 : 2;
  // Register blocking of the scores: keys x rows accumulators (AVX-512:
  // 4 x 4 + 4 key slices + a query slice; AVX2 2 x 2), at most 16 for one
  // transposed reduction.
  const int64_t scoreKeys = wide ? 4 : 2;
  const int64_t scoreRows = wide ? 4 : 2;
  // K and V are read in the pool's order (a head's K, its V, the next
  // head's K...), but in bursts between which the softmax computes, and the
  // hardware prefetcher does not run far enough ahead to keep the memory
  // busy through them: as each slice is read, the same slot kPrefetchHeads
  // heads further in this task's order (its next heads of the page, then
  // of the run's next page, by the page table) is prefetched into L2 (not
  // L1, which the current head's K/V and scores fill). Measured on decode
  // attention over 256 MiB of f32 pages (bench/results/
  // decode-attention-hw.txt): 0.75-0.84 of the read bandwidth on a quiet
  // machine (0.51 without prefetch, 0.75-0.79 two heads on); into L1 it
  // was slower than no prefetch.
  PageStrides strides = e.pageStrides(pt);
  Value cPF = e.cIndex(kPrefetchHeads);
  // One prefetch per cache line: a slice of 16 f16/bf16 elements is half
  // of one (two prefetches of a line made the queue of outstanding misses
  // the bottleneck of f16 decode).
  const int64_t sliceBytes = kLanes * e.kvElement().getIntOrFloatBitWidth() / 8;
  auto startsLine = [&](int64_t c) {
    return (c * sliceBytes) % kCacheLineBytes == 0;
  };
  // `ahead` is the offset from the current head's K to that head's.
  auto prefetchAhead = [&](Value at, Value ahead) {
    memref::PrefetchOp::create(e.b, kv, ValueRange{e.add(at, ahead)},
                               /*isWrite=*/false, /*localityHint=*/1,
                               /*isDataCache=*/true);
  };
  // The correction factor of each row for this chunk.
  Value cr = stackBuffer(kQueryTokens * e.group, e.f32());
  // A group's query tokens [g0, g1) share one pass over the keys: per
  // chunk of pages and KV head, the chunk's K/V (in L1) serve every block
  // of kQueryTokens tokens of the group (the rest one by one), whose rows
  // (token x query head of the KV head) share each key slice load. A
  // token's keys end at its own causal limit; the pass runs to the group's
  // last token's, and the keys past a token's limit score -inf: weight 0,
  // and a chunk without a key of its own leaves its sums exactly as they
  // were, so a token's result depends neither on its group nor on its
  // block.
  auto tokenGroup = [&](Value g0, Value g1, Value gLo, Value gHi) {
    // The query heads of the span's KV heads.
    Value hLo = e.mul(gLo, cG), hHi = e.mul(gHi, cG);
    Value count = e.sub(g1, g0);
    Value cTB = e.cIndex(kQueryTokens);
    Value blocked = e.add(g0, e.mul(e.divu(count, cTB), cTB));
    // State of token g0 + lt, query head h.
    auto stateAt = [&](Value lt, Value h) { return e.add(e.mul(lt, cNH), h); };
    e.forLoop(c0, e.mul(count, cNH), c1, [&](Value th) {
      e.store(ninf, mx, {th});
      e.store(zf, lsum, {th});
      vector::StoreOp::create(e.b, zv, acc, ValueRange{e.mul(th, cHS)});
    });
    auto positionOf = [&](Value t) {
      return arith::AddIOp::create(e.b, pos, e.toI64(t)).getResult();
    };
    e.forLoop(c0, nruns, c1, [&](Value r) {
      RunRow run = e.loadRun(runs, r);
      // Positions grow with the token: the last one sees the most keys.
      Value most = e.visibleKeys(positionOf(e.sub(g1, c1)), run);
      e.ifThen(e.cmp(arith::CmpIPredicate::sgt, most, e.cI64(0)), [&] {
        // (R(m) q) . (R(Δ) k) = (R(m - Δ) q) . k: one rotation per run and
        // token.
        e.forLoop(g0, g1, c1, [&](Value t) {
          Value qp = arith::SubIOp::create(e.b, positionOf(t), run.delta);
          ropeRowOrTable(e, tables, e.add(e.mul(r, n), t), qp, cs, sn);
          Value qoff = e.mul(t, cD);
          Value roff = e.mul(e.sub(t, g0), cD);
          e.forLoop(hLo, hHi, c1, [&](Value h) {
            Value ho = e.mul(h, cHS);
            auto head = [&](Value memref, Value offset) -> Value {
              return memref::SubViewOp::create(
                  e.b, cast<MemRefType>(h1), memref,
                  ArrayRef<OpFoldResult>{offset},
                  ArrayRef<OpFoldResult>{e.b.getIndexAttr(e.headSize)},
                  ArrayRef<OpFoldResult>{e.b.getIndexAttr(1)});
            };
            call(e, "rope_apply",
                 {head(q, e.add(qoff, ho)), head(qrot, e.add(roff, ho)), cs,
                  sn});
          });
        });
        Value pageOffset = e.toIndex(run.pageOffset);
        Value slotBegin = e.toIndex(run.slotBegin);
        Value send = e.add(slotBegin, e.toIndex(most));
        Value pfirst = e.divu(slotBegin, pt);
        Value pend = e.add(e.divu(e.sub(send, c1), pt), c1);
        // Pages go in chunks of chunkPages (at least chunkKeys keys): the
        // softmax of a chunk (its max, the rescale, the weights) is computed
        // once over the scores of all its pages.
        e.forLoop(pfirst, pend, chunkPages, [&](Value pc) {
          Value pcEnd = e.minu(e.add(pc, chunkPages), pend);
          // Page pi of the chunk: its id, its keys [s0, s1) (key s is key
          // s + keyShift of the run) and the column of its key 0 among the
          // chunk's scores.
          struct PageKeys {
            Value page, s0, s1, keyShift, column;
          };
          auto pageKeys = [&](Value pi) {
            Value lo0 = e.mul(pi, pt);
            Value lo = e.maxu(lo0, slotBegin);
            Value hi = e.minu(e.add(lo0, pt), send);
            return PageKeys{e.pageId(pages, pageOffset, pi), e.sub(lo, lo0),
                            e.sub(hi, lo0), e.toI64(e.sub(lo0, slotBegin)),
                            e.mul(e.sub(pi, pc), pt)};
          };
          // The chunk's scores are the columns [colBegin, colEnd).
          Value chunkLo0 = e.mul(pc, pt);
          Value colBegin = e.sub(e.maxu(chunkLo0, slotBegin), chunkLo0);
          Value colEnd = e.sub(e.minu(e.mul(pcEnd, pt), send), chunkLo0);
          e.forLoop(gLo, gHi, c1, [&](Value g) {
            // The K of head g on page pi, and the offset from it to the
            // K of the head kPrefetchHeads further in this task's order,
            // which takes its heads [gLo, gHi) page by page: head gLo +
            // (i mod H) of the page `hop` = i / H chunks on, for i = g -
            // gLo + kPrefetchHeads and H = gHi - gLo. A task of fewer heads
            // than kPrefetchHeads (a decode step on two threads takes two
            // of four) looks more than one chunk on.
            struct HeadK {
              Value base, ahead;
            };
            auto headOn = [&](Value pi, Value page) {
              Value kb = e.headBase(strides, page, layer, g);
              Value heads = e.sub(gHi, gLo);
              Value i = e.add(e.sub(g, gLo), cPF);
              Value hop = e.divu(i, heads);
              Value here = e.cmp(arith::CmpIPredicate::eq, hop, c0);
              Value later = e.pageId(
                  pages, pageOffset,
                  e.minu(e.add(pi, e.mul(hop, chunkPages)), e.sub(pend, c1)));
              Value target = e.headBase(strides, e.select(here, page, later),
                                        layer, e.add(gLo, e.remu(i, heads)));
              return HeadK{kb, e.sub(target, kb)};
            };
            Value gq = e.mul(g, cG);
            // The block of tb tokens from t0: row r = tt * G + i is token
            // t0 + tt, query head g * G + i of KV head g.
            auto tokenBlock = [&](int64_t tb, Value t0) {
              const int64_t rows = tb * e.group;
              Value lt0 = e.sub(t0, g0);
              SmallVector<Value> visible;
              for (int64_t tt = 0; tt < tb; ++tt)
                visible.push_back(
                    e.visibleKeys(positionOf(e.add(t0, e.cIndex(tt))), run));
              Value qbase = e.add(e.mul(lt0, cD), e.mul(gq, cHS));
              // The offset in qrot and acc of row r's head.
              auto rowOffset = [&](int64_t r) {
                return e.add(qbase, e.cIndex((r / e.group) * e.dim +
                                             (r % e.group) * e.headSize));
              };
              // Scores: each 16-lane slice of a key is loaded (and widened)
              // once and dotted with the same slice of every row, one
              // accumulator per key and row; keys go in groups of scoreKeys
              // and rows in blocks of scoreRows, so that a query slice
              // loaded once serves every key of the group. The group's dots
              // are then summed together by one transposed reduction (a
              // vector of their scores), scaled, and stored row by row.
              auto scoreGroup = [&](ArrayRef<Value> keys, HeadK k,
                                    Value keyShift, Value column) {
                const int64_t kn = keys.size();
                SmallVector<Value> kos;
                for (Value s : keys)
                  kos.push_back(e.add(k.base, e.mul(s, cHS)));
                // The group's key numbers in the run, for the causal mask.
                VectorType kv64 = e.vec(kn, e.i64());
                SmallVector<int64_t> steps(kn);
                std::iota(steps.begin(), steps.end(), 0);
                Value keyIds = arith::AddIOp::create(
                    e.b,
                    vector::BroadcastOp::create(
                        e.b, kv64,
                        arith::AddIOp::create(e.b, keyShift, e.toI64(keys[0]))),
                    arith::ConstantOp::create(
                        e.b, DenseElementsAttr::get(kv64, ArrayRef(steps))));
                for (int64_t r0 = 0; r0 < rows; r0 += scoreRows) {
                  int64_t rn = std::min(scoreRows, rows - r0);
                  // dots[i * kn + j]: row r0 + i, key j.
                  SmallVector<Value> dots(kn * rn, z16);
                  for (int64_t c = 0; c < slices; ++c) {
                    SmallVector<Value> ks;
                    for (Value ko : kos) {
                      Value at = e.add(ko, e.cIndex(c * kLanes));
                      if (r0 == 0 && startsLine(c))
                        prefetchAhead(at, k.ahead);
                      ks.push_back(loadKV(at, c));
                    }
                    for (int64_t i = 0; i < rn; ++i) {
                      Value qv = loadF32(
                          qrot, e.add(rowOffset(r0 + i), e.cIndex(c * kLanes)),
                          c);
                      for (int64_t j = 0; j < kn; ++j)
                        dots[i * kn + j] = vector::FMAOp::create(
                            e.b, qv, ks[j], dots[i * kn + j]);
                    }
                  }
                  Value scores = arith::MulFOp::create(
                      e.b, reduceEach(e, dots),
                      vector::BroadcastOp::create(e.b, v16, scale));
                  for (int64_t i = 0; i < rn; ++i) {
                    Value row = vector::ExtractStridedSliceOp::create(
                        e.b, scores, ArrayRef<int64_t>{i * kn},
                        ArrayRef<int64_t>{kn}, ArrayRef<int64_t>{1});
                    Value seen = arith::CmpIOp::create(
                        e.b, arith::CmpIPredicate::slt, keyIds,
                        vector::BroadcastOp::create(
                            e.b, kv64, visible[(r0 + i) / e.group]));
                    row = arith::SelectOp::create(
                        e.b, seen, row,
                        vector::BroadcastOp::create(e.b, e.vec(kn, e.f32()),
                                                    ninf));
                    vector::StoreOp::create(
                        e.b, row, sc,
                        ValueRange{e.add(e.mul(e.cIndex(r0 + i), scw),
                                         e.add(column, keys[0]))});
                  }
                }
              };
              Value cSK = e.cIndex(scoreKeys);
              e.forLoop(pc, pcEnd, c1, [&](Value pi) {
                PageKeys k = pageKeys(pi);
                HeadK head = headOn(pi, k.page);
                Value groups =
                    e.add(k.s0, e.mul(e.divu(e.sub(k.s1, k.s0), cSK), cSK));
                e.forLoop(k.s0, groups, cSK, [&](Value s) {
                  SmallVector<Value> keys;
                  for (int64_t j = 0; j < scoreKeys; ++j)
                    keys.push_back(e.add(s, e.cIndex(j)));
                  scoreGroup(keys, head, k.keyShift, k.column);
                });
                e.forLoop(groups, k.s1, c1, [&](Value s) {
                  scoreGroup({s}, head, k.keyShift, k.column);
                });
              });
              // Per row: the chunk's max, the rescale of what came before, and
              // the weights exp(score - max) over the scores (a row that has
              // seen no key yet gets weights 0: softmaxRescale's shift). The
              // rows go in batches of up to 16, unrolled: each row's maxima
              // and sums of 16 lanes are taken by one transposed reduction
              // for the batch (the same halving order as vector.reduction's
              // for the sums; a max is exact in any order), and the rows'
              // chains of dependent steps interleave instead of following one
              // another.
              auto scoreAt = [&](int64_t row, Value bl) {
                return e.add(e.mul(e.cIndex(row), scw), bl);
              };
              auto blockMask = [&](Value bl) {
                return vector::CreateMaskOp::create(
                    e.b, m16, ValueRange{e.sub(colEnd, bl)});
              };
              auto maxNum = [&](Value a, Value b) -> Value {
                return arith::MaxNumFOp::create(e.b, a, b);
              };
              for (int64_t b0 = 0; b0 < rows; b0 += kLanes) {
                int64_t bn = std::min(kLanes, rows - b0);
                // The chunk's max, 16 scores at a time (lanes past the chunk
                // read as -inf).
                SmallVector<Value> rowMax;
                for (int64_t row = b0; row < b0 + bn; ++row)
                  rowMax.push_back(e.forLoop(
                      colBegin, colEnd, c16, {ninf16},
                      [&](Value bl, ValueRange vm) -> SmallVector<Value> {
                        Value sv = maskedLoad(sc, scoreAt(row, bl),
                                              blockMask(bl), ninf16);
                        return {maxNum(vm[0], sv)};
                      })[0]);
                Value maxes = reduceEach(e, rowMax, maxNum);
                SmallVector<Value> states, newMaxes, sums, corrs, weights;
                for (int64_t row = b0; row < b0 + bn; ++row) {
                  Value state = stateAt(e.add(lt0, e.cIndex(row / e.group)),
                                        e.add(gq, e.cIndex(row % e.group)));
                  Value chunkMax = vector::ExtractOp::create(
                      e.b, maxes, ArrayRef<int64_t>{row - b0});
                  auto [newMax, shift, corr] = e.softmaxRescale(
                      e.load(mx, {state}), chunkMax, /*skipUnchanged=*/true);
                  Value mb = vector::BroadcastOp::create(e.b, v16, shift);
                  weights.push_back(e.forLoop(
                      colBegin, colEnd, c16, {z16},
                      [&](Value bl, ValueRange ps) -> SmallVector<Value> {
                        Value bi = scoreAt(row, bl);
                        Value sv = maskedLoad(sc, bi, blockMask(bl), ninf16);
                        Value d = arith::SubFOp::create(e.b, sv, mb);
                        Value p = call(e, "exp16", {d}, {v16})[0];
                        vector::StoreOp::create(e.b, p, sc, ValueRange{bi});
                        return {arith::AddFOp::create(e.b, ps[0], p)};
                      })[0]);
                  states.push_back(state);
                  newMaxes.push_back(newMax);
                  corrs.push_back(corr);
                  sums.push_back(
                      arith::MulFOp::create(e.b, e.load(lsum, {state}), corr));
                }
                Value wsums = reduceEach(e, weights);
                for (int64_t i = 0; i < bn; ++i) {
                  Value wsum = vector::ExtractOp::create(e.b, wsums,
                                                         ArrayRef<int64_t>{i});
                  e.store(newMaxes[i], mx, {states[i]});
                  e.store(arith::AddFOp::create(e.b, sums[i], wsum), lsum,
                          {states[i]});
                  e.store(corrs[i], cr, {e.cIndex(b0 + i)});
                }
              }
              // V: per block of rows and of head slices, the accumulators
              // stay in registers over the chunk's keys, page by page; each V
              // slice is loaded (and widened) once per block of rows.
              for (int64_t r0 = 0; r0 < rows; r0 += valueHeads) {
                int64_t rn = std::min(valueHeads, rows - r0);
                for (int64_t c0s = 0; c0s < slices; c0s += valueSlices) {
                  int64_t cn = std::min(valueSlices, slices - c0s);
                  auto accAt = [&](int64_t i, int64_t c) {
                    return e.add(rowOffset(r0 + i),
                                 e.cIndex((c0s + c) * kLanes));
                  };
                  SmallVector<Value> inits;
                  for (int64_t i = 0; i < rn; ++i) {
                    Value corr = vector::BroadcastOp::create(
                        e.b, v16, e.load(cr, {e.cIndex(r0 + i)}));
                    for (int64_t c = 0; c < cn; ++c)
                      inits.push_back(arith::MulFOp::create(
                          e.b, loadF32(acc, accAt(i, c), c0s + c), corr));
                  }
                  SmallVector<Value> sums = e.forLoop(
                      pc, pcEnd, c1, inits,
                      [&](Value pi, ValueRange pa) -> SmallVector<Value> {
                        PageKeys k = pageKeys(pi);
                        HeadK head = headOn(pi, k.page);
                        Value vb = e.add(head.base, strides.kv);
                        return e.forLoop(
                            k.s0, k.s1, c1, pa,
                            [&](Value s, ValueRange aa) -> SmallVector<Value> {
                              Value vo = e.add(vb, e.mul(s, cHS));
                              SmallVector<Value> vs;
                              for (int64_t c = 0; c < cn; ++c) {
                                Value at =
                                    e.add(vo, e.cIndex((c0s + c) * kLanes));
                                if (r0 == 0 && startsLine(c0s + c))
                                  prefetchAhead(at, head.ahead);
                                vs.push_back(loadKV(at, c0s + c));
                              }
                              Value col = e.add(k.column, s);
                              SmallVector<Value> next;
                              for (int64_t i = 0; i < rn; ++i) {
                                Value p = vector::BroadcastOp::create(
                                    e.b, v16,
                                    e.load(sc,
                                           {e.add(e.mul(e.cIndex(r0 + i), scw),
                                                  col)}));
                                for (int64_t c = 0; c < cn; ++c)
                                  next.push_back(vector::FMAOp::create(
                                      e.b, p, vs[c], aa[i * cn + c]));
                              }
                              return next;
                            });
                      });
                  for (int64_t i = 0; i < rn; ++i)
                    for (int64_t c = 0; c < cn; ++c)
                      storeF32(sums[i * cn + c], acc, accAt(i, c), c0s + c);
                }
              }
            };
            e.forLoop(g0, blocked, cTB,
                      [&](Value t0) { tokenBlock(kQueryTokens, t0); });
            e.forLoop(blocked, g1, c1, [&](Value t) { tokenBlock(1, t); });
          });
        });
      });
    });
    // A head that saw no key has sum 0 and accumulator 0: it gets zeros.
    e.forLoop(g0, g1, c1, [&](Value t) {
      Value qoff = e.mul(t, cD);
      Value lt = e.sub(t, g0);
      e.forLoop(hLo, hHi, c1, [&](Value h) {
        Value state = stateAt(lt, h);
        Value inv = e.softmaxNormalizer(e.load(lsum, {state}));
        Value a = vector::LoadOp::create(e.b, vHS, acc,
                                         ValueRange{e.mul(state, cHS)});
        Value o = arith::MulFOp::create(
            e.b, a, vector::BroadcastOp::create(e.b, vHS, inv));
        vector::StoreOp::create(e.b, o, out,
                                ValueRange{e.add(qoff, e.mul(h, cHS))});
      });
    });
  };
  e.forLoop(c0, spans, c1, [&](Value i) {
    Span span = spanAt(i);
    e.forLoop(span.lo, span.hi, groupTokens, [&](Value g0) {
      tokenGroup(g0, e.minu(e.add(g0, groupTokens), span.hi), span.gLo,
                 span.gHi);
    });
  });
}

} // namespace

/// Attention of n query tokens (q: [n][heads][head_size], not rotated;
/// query t at position pos + t) over the runs of layer `layer`. Per run with
/// offset Δ the query is rotated once to m - Δ and scored against the stored
/// keys; the keys of a run that count are a prefix of the run (visibleKeys).
/// Runs and pages are merged by online softmax (running max and sum), one
/// chunk of pages at a time (chunkKeys). Per chunk and KV head: each key
/// slice is read once and scored against every row (a block of up to
/// kQueryTokens tokens x the G query heads of the group) into a score
/// buffer, then the chunk's max and weights are computed 16 lanes at a time
/// (exp16), then V is summed with FMAs in registers. Chunks are walked in
/// order, KV heads inside a chunk; with one page per chunk (f32) a page's
/// K/V are read as one sequential stream (emitAttentionRows).
/// Query tokens are independent, and so are KV heads: many tokens (a
/// prefill) are a parallel loop over tokens, each task with every head; a
/// few (a decode step) a parallel loop over as many ranges of KV heads as
/// there are threads, each task with every token, so that one query uses
/// every core. A head's arithmetic is the same either way: the results are
/// bit-identical for any split.
void cpu::emitAttention(ForwardEmitter &e, int64_t vectorBits) {
  Type v1 = vectorType(e);
  func::FuncOp f = e.beginFunction(
      e.name("attention_kernel"),
      {v1, e.index(), e.i64(), e.buffer(e.kvElement()), e.buffer(e.i32()),
       e.table(KVRT_RUN_WIDTH), e.index(), e.index(), v1, e.buffer(e.f64())},
      false);
  SmallVector<Value> captures(f.getArguments());
  Value n = captures[1], pos = captures[2];
  captures.erase(captures.begin() + 1);
  // The split: for a decode step or tokens over a long context, `ranges`
  // ranges of KV heads (min(threads, KV heads)) times `splits` ranges of
  // tokens (as many as keep every thread busy, of at least kQueryTokens
  // tokens, and at most groupCapacity tokens each), each item one range of
  // each; else (a prefill) 0 ranges: items are tokens, each with every
  // head.
  Value cKVH = e.cIndex(e.kvHeads), c0 = e.cIndex(0), c1 = e.cIndex(1);
  Value cTB = e.cIndex(kQueryTokens);
  Value threads = numThreads(e);
  Value decode =
      e.cmp(arith::CmpIPredicate::ult, n, e.cIndex(kHeadParallelTokens));
  Value longContext = e.cmp(arith::CmpIPredicate::sge, pos,
                            e.toI64(e.mul(n, e.cIndex(kContextPerQuery))));
  Value byHeads = arith::OrIOp::create(e.b, decode, longContext);
  Value headRanges = e.maxu(e.minu(threads, cKVH), c1);
  auto ceilDiv = [&](Value a, Value b) {
    return e.divu(e.add(a, e.sub(b, c1)), b);
  };
  Value splits =
      e.maxu(e.maxu(e.minu(ceilDiv(threads, headRanges), ceilDiv(n, cTB)),
                    ceilDiv(n, e.cIndex(groupCapacity(e)))),
             c1);
  Value ranges = e.select(byHeads, headRanges, c0);
  captures.push_back(n);
  captures.push_back(ranges);
  captures.push_back(splits);
  parallelFor(
      e, "attention_task", e.select(byHeads, e.mul(headRanges, splits), n),
      captures, [&](ValueRange v, Value begin, Value end) {
        Value n = v[9], ranges = v[10], splits = v[11];
        Value zero = e.cIndex(0), one = e.cIndex(1), kvh = e.cIndex(e.kvHeads);
        Value byHeads = e.cmp(arith::CmpIPredicate::ne, ranges, zero);
        // Items [begin, end) are tokens (one span: those tokens, every
        // head), or spans: item i the tokens [s * n / splits, (s + 1) * n /
        // splits) of s = i / ranges and the KV heads [r * KVH / ranges,
        // (r + 1) * KVH / ranges) of r = i % ranges.
        Value divisor = e.maxu(ranges, one);
        auto spanAt = [&](Value i) -> Span {
          Value item = e.add(begin, i);
          Value s = e.divu(item, divisor), r = e.remu(item, divisor);
          auto cut = [&](Value k, Value total, Value parts) {
            return e.divu(e.mul(k, total), parts);
          };
          Value s1 = e.add(s, one), r1 = e.add(r, one);
          return Span{e.select(byHeads, cut(s, n, splits), begin),
                      e.select(byHeads, cut(s1, n, splits), end),
                      e.select(byHeads, cut(r, kvh, divisor), zero),
                      e.select(byHeads, cut(r1, kvh, divisor), kvh)};
        };
        Value spans = e.select(byHeads, e.sub(end, begin), one);
        Value groupTokens = e.select(byHeads, e.cIndex(groupCapacity(e)),
                                     e.cIndex(kQueryTokens));
        emitAttentionRows(e, vectorBits >= 512, v[0], v[1], v[2], v[3], v[4],
                          v[5], v[6], v[7], v[8], n, spans, spanAt,
                          groupTokens);
      });
  e.finishFunction();
}
