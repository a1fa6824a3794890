//===- CpuTarget.cpp - The forward's stages on a CPU ------------*- C++ -*-===//
//
// Every stage is a private function of loops over 16-lane f32 vectors,
// specialised for the config (every model dimension is a constant for LLVM).
// The float operations and their order are the oracle's where it matters
// (f64 RoPE and RMSNorm sums, libm exp for SwiGLU and the softmax rescale);
// the attention weights use `exp16`, a bounded-error vector exp
// (docs/cpu-backend.md).
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/KVToCPU/CpuTarget.h"
#include "runtime/core/ForwardABI.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/TargetParser/Host.h"

#include <numeric>

using namespace mlir;
using namespace mlir::kv;

namespace {

/// Lanes of the f32 vectors the kernels use (AVX-512; LLVM splits them on
/// narrower hosts).
constexpr int64_t kLanes = 16;
/// Query tokens that share a pass of attention over the keys.
constexpr int64_t kQueryTokens = 4;
/// How many KV heads ahead (in the order a task reads them) attention
/// prefetches K/V, a line at a time.
constexpr int64_t kPrefetchHeads = 4;
constexpr int64_t kCacheLineBytes = 64;
/// Attention of fewer query tokens than this (a decode step) is parallel
/// over KV heads, not over tokens.
constexpr int64_t kHeadParallelTokens = 2 * kQueryTokens;
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

/// The runtime's parallel loop and its thread count
/// (runtime/core/KVParallel.h).
constexpr llvm::StringLiteral kParallelFor = "kvrt_parallel_for";
constexpr llvm::StringLiteral kNumThreads = "kvrt_get_num_threads";

/// The packed matmul: a product of fewer rows than this takes the
/// dot-product kernel instead (packing the weights would cost more than it
/// saves), which keeps single-token decoding memory-bound on the weights.
constexpr int64_t kPackedMinRows = 4;
/// Rows of a work item of the packed matmul (a multiple of every tile's rows).
constexpr int64_t kChunkRows = 96;
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

/// 512 where the host has AVX-512F, else 256.
int64_t hostVectorBits() {
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  auto it = features.find("avx512f");
  return it != features.end() && it->second ? 512 : 256;
}

class CpuTarget final : public ForwardTarget {
public:
  explicit CpuTarget(int64_t vectorBits)
      : tile(tileFor(vectorBits ? vectorBits : hostVectorBits())) {}

  StringRef name() const override { return "CPU"; }

  std::string checkConfig(const kvrt_model_config &config) const override {
    int64_t headSize = config.dim / config.n_heads;
    if (headSize > 1024)
      return "head size " + std::to_string(headSize) +
             " exceeds 1024, the largest the CPU attention kernel holds in "
             "registers";
    return "";
  }

  void emitKernels(ForwardEmitter &e) override;

  void rmsnorm(ForwardEmitter &e, BufferRef x, WeightRef w, BufferRef out,
               Value n) override {
    requireF32(w, "the CPU rmsnorm");
    call(e, "rmsnorm",
         {rows(e, x, n, e.dim), vector(e, w, e.cIndex(e.dim)),
          rows(e, out, n, e.dim)});
  }

  void matmul(ForwardEmitter &e, BufferRef a, WeightRef b, BufferRef c, Value n,
              int64_t m, int64_t k, bool accumulate) override {
    requireF32(b, "the CPU matmul");
    call(e, accumulate ? "matmul_nt_acc" : "matmul_nt",
         {rows(e, a, n, k), rows(e, b, e.cIndex(m), k), rows(e, c, n, m),
          packBuffer(e)});
  }

  void storeKV(ForwardEmitter &e, BufferRef k, BufferRef v, Value n, Value pos,
               const KVTables &kv, Value layer) override {
    call(e, "store_kv",
         {rows(e, k, n, e.kvDim), rows(e, v, n, e.kvDim), pos, kv.kv, kv.pages,
          kv.runs, layer, kv.pageTokens});
  }

  void attention(ForwardEmitter &e, BufferRef q, BufferRef out, Value n,
                 Value pos, const KVTables &kv, Value layer) override {
    Value size = e.mul(n, e.cIndex(e.dim));
    call(e, "attention_kernel",
         {vector(e, q, size), n, pos, kv.kv, kv.pages, kv.runs, layer,
          kv.pageTokens, vector(e, out, size)});
  }

  void swiglu(ForwardEmitter &e, BufferRef h1, BufferRef h3,
              Value count) override {
    call(e, "swiglu", {vector(e, h1, count), vector(e, h3, count)});
  }

  void materialize(ForwardEmitter &e, const KVTables &kv,
                   Value dstPages) override {
    call(e, "materialize_kernel",
         {kv.kv, kv.pages, kv.runs, dstPages, kv.pageTokens});
  }

  /// Each intermediate value in a buffer of its own (memref.alloc): to
  /// LLVM's alias analysis distinct allocations cannot overlap, so the
  /// inlined stages keep values in registers across stores into another
  /// buffer, which regions of one scratch buffer at offsets known only at
  /// run time do not allow (1.25x on a dim-512 prefill).
  BufferRef temporary(ForwardEmitter &e, Value, Value, Value size) override {
    auto type = MemRefType::get({ShapedType::kDynamic}, e.f32());
    Value buffer = memref::AllocOp::create(e.b, type, ValueRange{size});
    temporaries.push_back(buffer);
    return BufferRef{buffer, e.cIndex(0)};
  }
  void releaseTemporaries(ForwardEmitter &e) override {
    for (Value buffer : temporaries)
      memref::DeallocOp::create(e.b, buffer);
    temporaries.clear();
    packBuffers.clear();
  }

private:
  MatmulTile tile;
  SmallVector<Value> temporaries;
  /// The packed-weights buffer of each function that multiplies.
  llvm::DenseMap<Operation *, Value> packBuffers;

  /// The buffer the matmuls of the function being emitted pack weights into,
  /// allocated once at its entry (a temporary): room for the largest weight
  /// matrix of the forward, rows padded to whole panels, up to
  /// kPackCapFloats (but at least one panel of the longest rows).
  Value packBuffer(ForwardEmitter &e) {
    Operation *function =
        e.b.getInsertionBlock()->getParentOp()->getParentOfType<func::FuncOp>();
    if (auto f = dyn_cast<func::FuncOp>(e.b.getInsertionBlock()->getParentOp()))
      function = f;
    Value &buffer = packBuffers[function];
    if (buffer)
      return buffer;
    int64_t nr = tile.columns();
    auto padded = [&](int64_t m) { return (m + nr - 1) / nr * nr; };
    int64_t largest =
        std::max({padded(e.dim) * e.dim, padded(e.kvDim) * e.dim,
                  padded(e.hidden) * e.dim, padded(e.dim) * e.hidden,
                  padded(e.vocab) * e.dim});
    int64_t floats = std::max(std::min(largest, kPackCapFloats),
                              nr * std::max(e.dim, e.hidden));
    OpBuilder::InsertionGuard guard(e.b);
    e.b.setInsertionPointToStart(
        &cast<func::FuncOp>(function).getBody().front());
    buffer = memref::AllocOp::create(e.b, MemRefType::get({floats}, e.f32()),
                                     e.b.getI64IntegerAttr(64));
    Value dynamic = memref::CastOp::create(e.b, e.buffer(e.f32()), buffer);
    temporaries.push_back(buffer);
    buffer = dynamic;
    return buffer;
  }

  /// The storage of a captured value in a task's context struct: a memref
  /// descriptor as the LLVM lowering lays it out, or i64.
  static Type captureStorage(ForwardEmitter &e, Type type) {
    auto memref = dyn_cast<MemRefType>(type);
    if (!memref)
      return e.i64();
    MLIRContext *ctx = e.b.getContext();
    Type ptr = LLVM::LLVMPointerType::get(ctx);
    Type sizes = LLVM::LLVMArrayType::get(e.i64(), memref.getRank());
    return LLVM::LLVMStructType::getLiteral(ctx,
                                            {ptr, ptr, e.i64(), sizes, sizes});
  }

  /// A parallel loop over `count` work items: `body` becomes the task
  /// `<prefix>_<task>(context, begin, end)`, emitted as a function of its
  /// own, which receives `captures` (memrefs, index and i64 values) through
  /// a context struct on the caller's stack and emits the work of items
  /// [begin, end); the call site hands it to the runtime's
  /// kvrt_parallel_for, which runs it on several threads.
  void parallelFor(
      ForwardEmitter &e, StringRef task, Value count, ValueRange captures,
      function_ref<void(ValueRange captures, Value begin, Value end)> body) {
    MLIRContext *ctx = e.b.getContext();
    Type ptr = LLVM::LLVMPointerType::get(ctx);
    SmallVector<Type> storage;
    for (Value v : captures)
      storage.push_back(captureStorage(e, v.getType()));
    Type context = LLVM::LLVMStructType::getLiteral(ctx, storage);
    std::string name = e.name(task);
    FunctionType taskType = e.b.getFunctionType({ptr, e.i64(), e.i64()}, {});
    {
      OpBuilder::InsertionGuard guard(e.b);
      func::FuncOp f = e.beginFunction(name, taskType.getInputs(), false);
      SmallVector<Value> unpacked;
      for (auto [i, v] : llvm::enumerate(captures)) {
        Value address =
            LLVM::GEPOp::create(e.b, ptr, context, f.getArgument(0),
                                ArrayRef<LLVM::GEPArg>{0, int32_t(i)});
        Value stored = LLVM::LoadOp::create(e.b, storage[i], address);
        if (v.getType().isIndex())
          stored = e.toIndex(stored);
        else if (isa<MemRefType>(v.getType()))
          stored = UnrealizedConversionCastOp::create(e.b, v.getType(), stored)
                       .getResult(0);
        unpacked.push_back(stored);
      }
      body(unpacked, e.toIndex(f.getArgument(1)), e.toIndex(f.getArgument(2)));
      e.finishFunction();
    }
    Value buffer;
    {
      OpBuilder::InsertionGuard guard(e.b);
      Operation *parent = e.b.getInsertionBlock()->getParentOp();
      auto function = isa<func::FuncOp>(parent)
                          ? cast<func::FuncOp>(parent)
                          : parent->getParentOfType<func::FuncOp>();
      e.b.setInsertionPointToStart(&function.getBody().front());
      buffer = LLVM::AllocaOp::create(e.b, ptr, context, e.cI64(1));
    }
    for (auto [i, v] : llvm::enumerate(captures)) {
      Value address = LLVM::GEPOp::create(
          e.b, ptr, context, buffer, ArrayRef<LLVM::GEPArg>{0, int32_t(i)});
      Value stored = v;
      if (v.getType().isIndex())
        stored = e.toI64(v);
      else if (isa<MemRefType>(v.getType()))
        stored =
            UnrealizedConversionCastOp::create(e.b, storage[i], v).getResult(0);
      LLVM::StoreOp::create(e.b, stored, address);
    }
    Value fn = func::ConstantOp::create(e.b, taskType,
                                        FlatSymbolRefAttr::get(ctx, name));
    Value fnPtr = UnrealizedConversionCastOp::create(e.b, ptr, fn).getResult(0);
    Value n = count.getType().isIndex() ? e.toI64(count) : count;
    func::CallOp::create(e.b, kParallelFor, TypeRange{},
                         ValueRange{n, fnPtr, buffer});
  }

  /// The transpose of a 16 x 16 block given as 16 row vectors: four
  /// stages of two-source shuffles (vector.shuffle), each swapping the
  /// off-diagonal b x b blocks of every 2b x 2b block (b = 8, 4, 2, 1).
  static SmallVector<Value> transpose16(ForwardEmitter &e,
                                        SmallVector<Value> rows) {
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
        next[r + b] =
            vector::ShuffleOp::create(e.b, rows[r], rows[r + b], lower);
      }
      rows = next;
    }
    return rows;
  }

  /// The sums of the lanes of each of `vectors` (at most 16, of 16 lanes),
  /// as lanes 0 .. n-1 of one vector: a transposed halving tree. Each level
  /// pairs the vectors (zeros pad them to a power of two) and adds the lower
  /// halves of every output's block of lanes to the upper halves, giving
  /// half as many vectors with twice as many outputs, each on half as many
  /// lanes; within the last vector, the halves of each block are swapped
  /// and added. Every output is summed as a halving reduction of its own
  /// (lane i + lane i + 8, then + 4, + 2, + 1): the order in which
  /// vector.reduction's lowering adds one vector's lanes.
  static Value reduceEach(ForwardEmitter &e, ArrayRef<Value> vectors) {
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
        Value lo =
            vector::ShuffleOp::create(e.b, level[v], level[v + 1], lower);
        Value hi =
            vector::ShuffleOp::create(e.b, level[v], level[v + 1], upper);
        next.push_back(arith::AddFOp::create(e.b, lo, hi));
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
      sums = arith::AddFOp::create(
          e.b, sums, vector::ShuffleOp::create(e.b, sums, sums, swapped));
    }
    // Input i's sum is on the first lane of its block: gather them.
    int64_t blockLanes = n / int64_t(outputs.front().size());
    SmallVector<int64_t> gather(n, 0);
    for (auto [block, input] : llvm::enumerate(outputs.front()))
      gather[input] = int64_t(block) * blockLanes;
    return vector::ShuffleOp::create(e.b, sums, sums, gather);
  }

  /// scf.if with an else branch and no results.
  static void ifElse(ForwardEmitter &e, Value condition,
                     function_ref<void()> then,
                     function_ref<void()> otherwise) {
    auto op = scf::IfOp::create(e.b, TypeRange{}, condition,
                                /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(e.b);
    e.b.setInsertionPoint(op.thenBlock()->getTerminator());
    then();
    e.b.setInsertionPoint(op.elseBlock()->getTerminator());
    otherwise();
  }

  /// memref<?x?xf32, strided<[?, 1], offset: ?>>: rows of a matrix.
  static MemRefType matrixType(ForwardEmitter &e) {
    int64_t d = ShapedType::kDynamic;
    return MemRefType::get({d, d}, e.f32(),
                           StridedLayoutAttr::get(e.b.getContext(), d, {d, 1}));
  }
  /// memref<?xf32, strided<[1], offset: ?>>.
  static MemRefType vectorType(ForwardEmitter &e) {
    int64_t d = ShapedType::kDynamic;
    return MemRefType::get({d}, e.f32(),
                           StridedLayoutAttr::get(e.b.getContext(), d, {1}));
  }
  /// memref<head_size x f32, strided<[1], offset: ?>>: one head.
  static MemRefType headType(ForwardEmitter &e) {
    return MemRefType::get(
        {e.headSize}, e.f32(),
        StridedLayoutAttr::get(e.b.getContext(), ShapedType::kDynamic, {1}));
  }
  /// memref<half x f64>: the cos or sin table of one position.
  static MemRefType ropeTableType(ForwardEmitter &e) {
    return MemRefType::get({e.half}, e.f64());
  }

  /// `ref` as `rowCount` rows of `columns` floats.
  static Value rows(ForwardEmitter &e, BufferRef ref, Value rowCount,
                    int64_t columns) {
    return memref::ReinterpretCastOp::create(
        e.b, matrixType(e), ref.memref, OpFoldResult(ref.offset),
        ArrayRef<OpFoldResult>{rowCount, e.b.getIndexAttr(columns)},
        ArrayRef<OpFoldResult>{e.b.getIndexAttr(columns), e.b.getIndexAttr(1)});
  }
  /// `size` floats of `ref`.
  static Value vector(ForwardEmitter &e, BufferRef ref, Value size) {
    return memref::ReinterpretCastOp::create(
        e.b, vectorType(e), ref.memref, OpFoldResult(ref.offset),
        ArrayRef<OpFoldResult>{size},
        ArrayRef<OpFoldResult>{e.b.getIndexAttr(1)});
  }

  /// A call of the kernel `<prefix>_<kernel>`.
  static SmallVector<Value> call(ForwardEmitter &e, StringRef kernel,
                                 ValueRange operands, TypeRange results = {}) {
    return SmallVector<Value>(
        func::CallOp::create(e.b, e.name(kernel), results, operands)
            .getResults());
  }

  void emitRmsnorm(ForwardEmitter &e);
  void emitMatmul(ForwardEmitter &e, bool accumulate);
  void emitDotRows(ForwardEmitter &e, Value a, Value b, Value c, Value lo,
                   Value hi, bool accumulate);
  void emitPackPanels(ForwardEmitter &e, Value b, Value packed, Value g0,
                      Value lo, Value hi);
  void emitPackedTiles(ForwardEmitter &e, Value a, Value packed, Value c,
                       Value g0, Value chunks, Value lo, Value hi,
                       bool accumulate);
  void emitRopeTable(ForwardEmitter &e);
  void emitRopeApply(ForwardEmitter &e);
  void emitSwiglu(ForwardEmitter &e);
  void emitStoreKV(ForwardEmitter &e);
  void emitExp16(ForwardEmitter &e);
  void emitAttention(ForwardEmitter &e);
  void emitAttentionRows(ForwardEmitter &e, Value q, Value pos, Value kv,
                         Value pages, Value runs, Value layer, Value pt,
                         Value out, Value lo, Value hi, Value gLo, Value gHi);
  void emitMaterialize(ForwardEmitter &e);
};

void CpuTarget::emitKernels(ForwardEmitter &e) {
  {
    OpBuilder::InsertionGuard guard(e.b);
    e.b.setInsertionPointToEnd(e.module.getBody());
    Type ptr = LLVM::LLVMPointerType::get(e.b.getContext());
    auto parallel = func::FuncOp::create(
        e.b, kParallelFor, e.b.getFunctionType({e.i64(), ptr, ptr}, {}));
    parallel.setPrivate();
    auto threads = func::FuncOp::create(
        e.b, kNumThreads, e.b.getFunctionType({}, {e.b.getI32Type()}));
    threads.setPrivate();
  }
  emitRmsnorm(e);
  emitMatmul(e, /*accumulate=*/false);
  emitMatmul(e, /*accumulate=*/true);
  emitRopeTable(e);
  emitRopeApply(e);
  emitSwiglu(e);
  emitStoreKV(e);
  emitExp16(e);
  emitAttention(e);
  emitMaterialize(e);
}

/// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, the sum of squares in f64.
void CpuTarget::emitRmsnorm(ForwardEmitter &e) {
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
void CpuTarget::emitMatmul(ForwardEmitter &e, bool accumulate) {
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
  ifElse(
      e, small,
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
                        emitPackPanels(e, v[0], v[1], v[2], lo, hi);
                      });
          parallelFor(e, base + "_tile_task", e.mul(count, chunks),
                      {a, packed, c, g0, chunks},
                      [&](ValueRange v, Value lo, Value hi) {
                        emitPackedTiles(e, v[0], v[1], v[2], v[3], v[4], lo, hi,
                                        accumulate);
                      });
        });
      });
  e.finishFunction();
}

/// The dot-product kernel for outputs lo .. hi-1 of every row: the weight
/// row stays in L1 while every token passes over it; four independent
/// 16-lane accumulators.
void CpuTarget::emitDotRows(ForwardEmitter &e, Value a, Value b, Value c,
                            Value lo, Value hi, bool accumulate) {
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
void CpuTarget::emitPackPanels(ForwardEmitter &e, Value b, Value packed,
                               Value g0, Value lo, Value hi) {
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
        ifElse(
            e, full,
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
/// registers over the whole k loop; rows past n are clamped when loaded and
/// skipped when stored, outputs past m are masked.
void CpuTarget::emitPackedTiles(ForwardEmitter &e, Value a, Value packed,
                                Value c, Value g0, Value chunks, Value lo,
                                Value hi, bool accumulate) {
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  Value n = memref::DimOp::create(e.b, a, c0);
  Value k = memref::DimOp::create(e.b, a, c1);
  Value m = memref::DimOp::create(e.b, c, c1);
  int64_t lanes = tile.lanes, mr = tile.rows, nv = tile.vectors;
  Value nr = e.cIndex(tile.columns());
  VectorType vt = e.vec(lanes, e.f32());
  VectorType mt = e.vec(lanes, e.i1());
  Value zero = e.splatF32(lanes, 0.0f);
  Value lastRow = e.sub(n, c1);
  e.forLoop(lo, hi, c1, [&](Value item) {
    Value p = e.divu(item, chunks);
    Value chunk = e.remu(item, chunks);
    Value panelBase = e.mul(e.mul(p, k), nr);
    Value firstOutput = e.mul(e.add(g0, p), nr);
    Value t0 = e.mul(chunk, e.cIndex(kChunkRows));
    Value t1 = e.minu(n, e.add(t0, e.cIndex(kChunkRows)));
    e.forLoop(t0, t1, e.cIndex(mr), [&](Value t) {
      SmallVector<Value> rowIndex;
      for (int64_t r = 0; r < mr; ++r)
        rowIndex.push_back(e.minu(e.add(t, e.cIndex(r)), lastRow));
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
              Value x = e.load(a, {rowIndex[r], i});
              Value xb = vector::BroadcastOp::create(e.b, vt, x);
              for (int64_t v = 0; v < nv; ++v)
                next.push_back(
                    vector::FMAOp::create(e.b, xb, w[v], accs[r * nv + v]));
            }
            return next;
          });
      for (int64_t r = 0; r < mr; ++r) {
        Value row = e.add(t, e.cIndex(r));
        e.ifThen(e.cmp(arith::CmpIPredicate::ult, row, n), [&] {
          for (int64_t v = 0; v < nv; ++v) {
            Value col = e.add(firstOutput, e.cIndex(v * lanes));
            Value inside = e.cmp(arith::CmpIPredicate::ult, col, m);
            Value count = e.select(inside, e.sub(m, col), c0);
            Value mask =
                vector::CreateMaskOp::create(e.b, mt, ValueRange{count});
            Value value = acc[r * nv + v];
            if (accumulate) {
              Value old = vector::MaskedLoadOp::create(
                  e.b, vt, c, ValueRange{row, col}, mask, zero);
              value = arith::AddFOp::create(e.b, old, value);
            }
            vector::MaskedStoreOp::create(e.b, c, ValueRange{row, col}, mask,
                                          value);
          }
        });
      }
    });
  });
}

/// The cos/sin table of position `pos` (i64): one entry per RoPE pair.
void CpuTarget::emitRopeTable(ForwardEmitter &e) {
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

/// dst = R(table) src for one head (dst may alias src).
void CpuTarget::emitRopeApply(ForwardEmitter &e) {
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
void CpuTarget::emitSwiglu(ForwardEmitter &e) {
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

/// Rotates the new K of layer `layer` to positions pos + t and writes K and
/// V into the pages of the last run of the table (the run being prefilled).
void CpuTarget::emitStoreKV(ForwardEmitter &e) {
  Type m2 = matrixType(e), tab = ropeTableType(e), h1 = headType(e);
  func::FuncOp f = e.beginFunction(e.name("store_kv"),
                                   {m2, m2, e.i64(), e.buffer(e.kvElement()),
                                    e.buffer(e.i32()), e.table(KVRT_RUN_WIDTH),
                                    e.index(), e.index()},
                                   false);
  Value k = f.getArgument(0), v = f.getArgument(1), pos = f.getArgument(2),
        kv = f.getArgument(3), pages = f.getArgument(4),
        runs = f.getArgument(5), layer = f.getArgument(6),
        pt = f.getArgument(7);
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  PageStrides strides = e.pageStrides(pt);
  Value last = e.sub(memref::DimOp::create(e.b, runs, c0), c1);
  RunRow run = e.loadRun(runs, last);
  Value pageOffset = e.toIndex(run.pageOffset);
  Value slotBegin = e.toIndex(run.slotBegin);
  Value n = memref::DimOp::create(e.b, k, c0);
  Value cs = memref::AllocaOp::create(e.b, cast<MemRefType>(tab));
  Value sn = memref::AllocaOp::create(e.b, cast<MemRefType>(tab));
  VectorType head = e.vec(e.headSize, e.f32());
  e.forLoop(c0, n, c1, [&](Value t) {
    Value p = arith::AddIOp::create(e.b, pos, e.toI64(t));
    call(e, "rope_table", {p, cs, sn});
    Value slot = e.add(slotBegin, t);
    Value page = e.pageId(pages, pageOffset, e.divu(slot, pt));
    Value slotOffset = e.mul(e.remu(slot, pt), e.cIndex(e.headSize));
    e.forLoop(c0, e.cIndex(e.kvHeads), c1, [&](Value g) {
      Value go = e.mul(g, e.cIndex(e.headSize));
      Value kh = memref::SubViewOp::create(
          e.b, cast<MemRefType>(h1), k, ArrayRef<OpFoldResult>{t, go},
          ArrayRef<OpFoldResult>{e.b.getIndexAttr(1),
                                 e.b.getIndexAttr(e.headSize)},
          ArrayRef<OpFoldResult>{e.b.getIndexAttr(1), e.b.getIndexAttr(1)});
      call(e, "rope_apply", {kh, kh, cs, sn});
      Value ko = e.add(e.headBase(strides, page, layer, g), slotOffset);
      Value vo = e.add(ko, strides.kv);
      Value kvec = vector::LoadOp::create(e.b, head, k, ValueRange{t, go});
      Value vvec = vector::LoadOp::create(e.b, head, v, ValueRange{t, go});
      // Rotated in f32, then rounded once to the pages' element type.
      vector::StoreOp::create(e.b, e.toKV(kvec), kv, ValueRange{ko});
      vector::StoreOp::create(e.b, e.toKV(vvec), kv, ValueRange{vo});
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
void CpuTarget::emitExp16(ForwardEmitter &e) {
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
void CpuTarget::emitAttention(ForwardEmitter &e) {
  Type v1 = vectorType(e);
  func::FuncOp f = e.beginFunction(
      e.name("attention_kernel"),
      {v1, e.index(), e.i64(), e.buffer(e.kvElement()), e.buffer(e.i32()),
       e.table(KVRT_RUN_WIDTH), e.index(), e.index(), v1},
      false);
  SmallVector<Value> captures(f.getArguments());
  Value n = captures[1];
  captures.erase(captures.begin() + 1);
  // The split: `ranges` ranges of KV heads (min(threads, KV heads)), each
  // with every token, for a few tokens; 0 (by tokens, each with every
  // head) for more.
  Value cKVH = e.cIndex(e.kvHeads), c0 = e.cIndex(0);
  Value threads =
      e.toIndex(func::CallOp::create(e.b, kNumThreads,
                                     TypeRange{e.b.getI32Type()}, ValueRange{})
                    .getResult(0));
  Value byHeads =
      e.cmp(arith::CmpIPredicate::ult, n, e.cIndex(kHeadParallelTokens));
  Value headRanges = e.maxu(e.minu(threads, cKVH), e.cIndex(1));
  Value ranges = e.select(byHeads, headRanges, c0);
  captures.push_back(n);
  captures.push_back(ranges);
  parallelFor(e, "attention_task", e.select(byHeads, headRanges, n), captures,
              [&](ValueRange v, Value begin, Value end) {
                Value n = v[8], ranges = v[9];
                Value zero = e.cIndex(0), kvh = e.cIndex(e.kvHeads);
                Value byHeads = e.cmp(arith::CmpIPredicate::ne, ranges, zero);
                // Items [begin, end) are tokens, or ranges of heads: range i is
                // the heads [i * KVH / ranges, (i + 1) * KVH / ranges).
                Value divisor = e.maxu(ranges, e.cIndex(1));
                auto head = [&](Value item) {
                  return e.divu(e.mul(item, kvh), divisor);
                };
                emitAttentionRows(e, v[0], v[1], v[2], v[3], v[4], v[5], v[6],
                                  v[7], e.select(byHeads, zero, begin),
                                  e.select(byHeads, n, end),
                                  e.select(byHeads, head(begin), zero),
                                  e.select(byHeads, head(end), kvh));
              });
  e.finishFunction();
}

/// Query tokens lo .. hi-1 of the attention, the query heads of KV heads
/// gLo .. gHi-1 (scratch on this task's stack), in blocks of kQueryTokens,
/// the rest one at a time.
void CpuTarget::emitAttentionRows(ForwardEmitter &e, Value q, Value pos,
                                  Value kv, Value pages, Value runs,
                                  Value layer, Value pt, Value out, Value lo,
                                  Value hi, Value gLo, Value gHi) {
  Type h1 = headType(e), tab = ropeTableType(e);
  Value c0 = e.cIndex(0), c1 = e.cIndex(1), c16 = e.cIndex(16);
  Value cHS = e.cIndex(e.headSize), cD = e.cIndex(e.dim),
        cNH = e.cIndex(e.heads), cG = e.cIndex(e.group);
  // The query heads of this task's KV heads.
  Value hLo = e.mul(gLo, cG), hHi = e.mul(gHi, cG);
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
  // Per token of a block: its rotated query, and per query head the
  // running max, sum and accumulator.
  Value qrot = stackBuffer(kQueryTokens * e.dim, e.f32());
  Value mx = stackBuffer(kQueryTokens * e.heads, e.f32());
  Value lsum = stackBuffer(kQueryTokens * e.heads, e.f32());
  Value acc = stackBuffer(kQueryTokens * e.dim, e.f32());
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
  const int64_t valueHeads = tile.lanes == 16 ? 4 : 2;
  const int64_t valueSlices = tile.lanes == 16 ? 4 : 2;
  // Register blocking of the scores: keys x rows accumulators (AVX-512:
  // 4 x 4 + 4 key slices + a query slice; AVX2 2 x 2), at most 16 for one
  // transposed reduction.
  const int64_t scoreKeys = tile.lanes == 16 ? 4 : 2;
  const int64_t scoreRows = tile.lanes == 16 ? 4 : 2;
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
  // Query tokens go in blocks of kQueryTokens (the rest one by one): a
  // block's rows (token x query head of a group) share each pass over the
  // keys. A token's keys end at its own causal limit; in a block the pass
  // runs to the last token's, and the keys past a token's limit score -inf:
  // weight 0, and a chunk without a key of its own leaves its sums exactly
  // as they were, so a token's result does not depend on its block.
  auto tokenBlock = [&](int64_t tb, Value t0) {
    const int64_t rows = tb * e.group;
    SmallVector<Value> tok, m;
    for (int64_t tt = 0; tt < tb; ++tt) {
      tok.push_back(e.add(t0, e.cIndex(tt)));
      m.push_back(arith::AddIOp::create(e.b, pos, e.toI64(tok.back())));
    }
    // Row r = tt * G + i: token tt, query head g * G + i of KV head g.
    auto stateAt = [&](Value tt, Value h) { return e.add(e.mul(tt, cNH), h); };
    e.forLoop(c0, e.cIndex(tb * e.heads), c1, [&](Value th) {
      e.store(ninf, mx, {th});
      e.store(zf, lsum, {th});
      vector::StoreOp::create(e.b, zv, acc, ValueRange{e.mul(th, cHS)});
    });
    e.forLoop(c0, nruns, c1, [&](Value r) {
      RunRow run = e.loadRun(runs, r);
      SmallVector<Value> visible;
      for (int64_t tt = 0; tt < tb; ++tt)
        visible.push_back(e.visibleKeys(m[tt], run));
      // Positions grow with the token: the last one sees the most keys.
      Value most = visible.back();
      e.ifThen(e.cmp(arith::CmpIPredicate::sgt, most, e.cI64(0)), [&] {
        // (R(m) q) . (R(Δ) k) = (R(m - Δ) q) . k: one rotation per run and
        // token.
        for (int64_t tt = 0; tt < tb; ++tt) {
          Value qp = arith::SubIOp::create(e.b, m[tt], run.delta);
          call(e, "rope_table", {qp, cs, sn});
          Value qoff = e.mul(tok[tt], cD);
          Value roff = e.cIndex(tt * e.dim);
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
        }
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
            // K of the head kPrefetchHeads further in this task's order:
            // on the same page, or (as many heads past this task's last)
            // on the page a chunk on.
            struct HeadK {
              Value base, ahead;
            };
            auto headOn = [&](Value pi, Value page) {
              Value kb = e.headBase(strides, page, layer, g);
              Value ahead = e.add(g, cPF);
              Value here = e.cmp(arith::CmpIPredicate::ult, ahead, gHi);
              Value wrapped =
                  e.minu(e.sub(ahead, e.sub(gHi, gLo)), e.sub(gHi, c1));
              Value later =
                  e.pageId(pages, pageOffset,
                           e.minu(e.add(pi, chunkPages), e.sub(pend, c1)));
              Value target = e.headBase(strides, e.select(here, page, later),
                                        layer, e.select(here, ahead, wrapped));
              return HeadK{kb, e.sub(target, kb)};
            };
            Value gq = e.mul(g, cG);
            Value qbase = e.mul(gq, cHS);
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
            auto scoreGroup = [&](ArrayRef<Value> keys, HeadK k, Value keyShift,
                                  Value column) {
              const int64_t kn = keys.size();
              SmallVector<Value> kos;
              for (Value s : keys)
                kos.push_back(e.add(k.base, e.mul(s, cHS)));
              Value keyIds;
              if (tb > 1) {
                // The group's key numbers in the run, for the causal mask.
                VectorType kv64 = e.vec(kn, e.i64());
                SmallVector<int64_t> steps(kn);
                std::iota(steps.begin(), steps.end(), 0);
                keyIds = arith::AddIOp::create(
                    e.b,
                    vector::BroadcastOp::create(
                        e.b, kv64,
                        arith::AddIOp::create(e.b, keyShift, e.toI64(keys[0]))),
                    arith::ConstantOp::create(
                        e.b, DenseElementsAttr::get(kv64, ArrayRef(steps))));
              }
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
                  if (tb > 1) {
                    VectorType kv64 = e.vec(kn, e.i64());
                    Value seen = arith::CmpIOp::create(
                        e.b, arith::CmpIPredicate::slt, keyIds,
                        vector::BroadcastOp::create(
                            e.b, kv64, visible[(r0 + i) / e.group]));
                    row = arith::SelectOp::create(
                        e.b, seen, row,
                        vector::BroadcastOp::create(e.b, e.vec(kn, e.f32()),
                                                    ninf));
                  }
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
            // seen no key yet gets weights 0: softmaxRescale's shift).
            e.forLoop(c0, e.cIndex(rows), c1, [&](Value row) {
              Value tt = e.divu(row, cG);
              Value state = stateAt(tt, e.add(gq, e.remu(row, cG)));
              auto scoreAt = [&](Value bl) {
                return e.add(e.mul(row, scw), bl);
              };
              // The chunk's max, 16 scores at a time (lanes past the chunk
              // read as -inf).
              Value maxv =
                  e.forLoop(colBegin, colEnd, c16, {ninf16},
                            [&](Value bl, ValueRange vm) -> SmallVector<Value> {
                              Value mask = vector::CreateMaskOp::create(
                                  e.b, m16, ValueRange{e.sub(colEnd, bl)});
                              Value sv =
                                  maskedLoad(sc, scoreAt(bl), mask, ninf16);
                              return {arith::MaxNumFOp::create(e.b, vm[0], sv)};
                            })[0];
              Value chunkMax = vector::ReductionOp::create(
                  e.b, vector::CombiningKind::MAXNUMF, maxv);
              Value oldMax = e.load(mx, {state});
              auto [newMax, shift, corr] = e.softmaxRescale(oldMax, chunkMax);
              Value l1 =
                  arith::MulFOp::create(e.b, e.load(lsum, {state}), corr);
              Value mb = vector::BroadcastOp::create(e.b, v16, shift);
              Value weights = e.forLoop(
                  colBegin, colEnd, c16, {z16},
                  [&](Value bl, ValueRange ps) -> SmallVector<Value> {
                    Value bi = scoreAt(bl);
                    Value mask = vector::CreateMaskOp::create(
                        e.b, m16, ValueRange{e.sub(colEnd, bl)});
                    Value sv = maskedLoad(sc, bi, mask, ninf16);
                    Value d = arith::SubFOp::create(e.b, sv, mb);
                    Value p = call(e, "exp16", {d}, {v16})[0];
                    vector::StoreOp::create(e.b, p, sc, ValueRange{bi});
                    return {arith::AddFOp::create(e.b, ps[0], p)};
                  })[0];
              Value wsum = vector::ReductionOp::create(
                  e.b, vector::CombiningKind::ADD, weights);
              e.store(newMax, mx, {state});
              e.store(arith::AddFOp::create(e.b, l1, wsum), lsum, {state});
              e.store(corr, cr, {row});
            });
            // V: per block of rows and of head slices, the accumulators
            // stay in registers over the chunk's keys, page by page; each V
            // slice is loaded (and widened) once per block of rows.
            for (int64_t r0 = 0; r0 < rows; r0 += valueHeads) {
              int64_t rn = std::min(valueHeads, rows - r0);
              for (int64_t c0s = 0; c0s < slices; c0s += valueSlices) {
                int64_t cn = std::min(valueSlices, slices - c0s);
                auto accAt = [&](int64_t i, int64_t c) {
                  return e.add(rowOffset(r0 + i), e.cIndex((c0s + c) * kLanes));
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
          });
        });
      });
    });
    // A head that saw no key has sum 0 and accumulator 0: it gets zeros.
    for (int64_t tt = 0; tt < tb; ++tt) {
      Value qoff = e.mul(tok[tt], cD);
      e.forLoop(hLo, hHi, c1, [&](Value h) {
        Value state = stateAt(e.cIndex(tt), h);
        Value inv = e.softmaxNormalizer(e.load(lsum, {state}));
        Value a = vector::LoadOp::create(e.b, vHS, acc,
                                         ValueRange{e.mul(state, cHS)});
        Value o = arith::MulFOp::create(
            e.b, a, vector::BroadcastOp::create(e.b, vHS, inv));
        vector::StoreOp::create(e.b, o, out,
                                ValueRange{e.add(qoff, e.mul(h, cHS))});
      });
    }
  };
  Value cTB = e.cIndex(kQueryTokens);
  Value blocked = e.add(lo, e.mul(e.divu(e.sub(hi, lo), cTB), cTB));
  e.forLoop(lo, blocked, cTB, [&](Value t0) { tokenBlock(kQueryTokens, t0); });
  e.forLoop(blocked, hi, c1, [&](Value t) { tokenBlock(1, t); });
}

/// Every run's K/V written to the pages `dst_pages` (parallel to `pages`,
/// same slots), K rotated once by the run's Δ (R(Δ) k, angles in f64), V
/// copied: the rewritten runs have offset 0 at base position base_pos + Δ.
void CpuTarget::emitMaterialize(ForwardEmitter &e) {
  Type tab = ropeTableType(e), h1 = headType(e);
  func::FuncOp f =
      e.beginFunction(e.name("materialize_kernel"),
                      {e.buffer(e.kvElement()), e.buffer(e.i32()),
                       e.table(KVRT_RUN_WIDTH), e.buffer(e.i32()), e.index()},
                      false);
  Value kv = f.getArgument(0), pages = f.getArgument(1),
        runs = f.getArgument(2), dstPages = f.getArgument(3),
        pt = f.getArgument(4);
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  PageStrides strides = e.pageStrides(pt);
  VectorType head = e.vec(e.headSize, e.f32());
  VectorType kvHead = head.clone(e.kvElement());
  Value cs = memref::AllocaOp::create(e.b, cast<MemRefType>(tab));
  Value sn = memref::AllocaOp::create(e.b, cast<MemRefType>(tab));
  // Keys of f16/bf16 pages are rotated in f32 in this buffer: widened,
  // rotated, rounded once.
  bool narrow = e.kvDtype != KVRT_KV_F32;
  Value key = narrow ? memref::AllocaOp::create(
                           e.b, MemRefType::get({e.headSize}, e.f32()))
                     : Value();
  Value keyView =
      narrow ? memref::CastOp::create(e.b, cast<MemRefType>(h1), key) : Value();
  auto headView = [&](Value at) -> Value {
    return memref::SubViewOp::create(
        e.b, cast<MemRefType>(h1), kv, ArrayRef<OpFoldResult>{at},
        ArrayRef<OpFoldResult>{e.b.getIndexAttr(e.headSize)},
        ArrayRef<OpFoldResult>{e.b.getIndexAttr(1)});
  };
  e.forLoop(c0, memref::DimOp::create(e.b, runs, c0), c1, [&](Value r) {
    RunRow run = e.loadRun(runs, r);
    Value pageOffset = e.toIndex(run.pageOffset);
    Value slotBegin = e.toIndex(run.slotBegin);
    call(e, "rope_table", {run.delta, cs, sn});
    e.forLoop(c0, e.toIndex(run.nTokens), c1, [&](Value j) {
      Value slot = e.add(slotBegin, j);
      Value pi = e.divu(slot, pt);
      Value slotOffset = e.mul(e.remu(slot, pt), e.cIndex(e.headSize));
      Value src = e.pageId(pages, pageOffset, pi);
      Value dst = e.pageId(dstPages, pageOffset, pi);
      e.forLoop(c0, e.cIndex(e.layers), c1, [&](Value l) {
        e.forLoop(c0, e.cIndex(e.kvHeads), c1, [&](Value g) {
          Value ko = e.add(e.headBase(strides, src, l, g), slotOffset);
          Value kd = e.add(e.headBase(strides, dst, l, g), slotOffset);
          if (narrow) {
            Value kvec =
                vector::LoadOp::create(e.b, kvHead, kv, ValueRange{ko});
            vector::StoreOp::create(e.b, e.fromKV(kvec), key, ValueRange{c0});
            call(e, "rope_apply", {keyView, keyView, cs, sn});
            Value rotated =
                vector::LoadOp::create(e.b, head, key, ValueRange{c0});
            vector::StoreOp::create(e.b, e.toKV(rotated), kv, ValueRange{kd});
          } else {
            call(e, "rope_apply", {headView(ko), headView(kd), cs, sn});
          }
          // Values are copied as they are stored.
          Value vvec = vector::LoadOp::create(
              e.b, kvHead, kv, ValueRange{e.add(ko, strides.kv)});
          vector::StoreOp::create(e.b, vvec, kv,
                                  ValueRange{e.add(kd, strides.kv)});
        });
      });
    });
  });
  e.finishFunction();
}

} // namespace

std::unique_ptr<ForwardTarget> mlir::kv::createCpuTarget(int64_t vectorBits) {
  return std::make_unique<CpuTarget>(vectorBits);
}
