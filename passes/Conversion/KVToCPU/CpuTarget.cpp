//===- CpuTarget.cpp - The forward's stages on a CPU ------------*- C++ -*-===//
//
// Every stage is a call of a private function of loops over 16-lane f32
// vectors, specialised for the config (every model dimension is a constant
// for LLVM); the kernels are emitted by one file per job (CpuKernels.h).
// The float operations and their order are the oracle's where it matters
// (f64 RoPE and RMSNorm sums, libm exp for SwiGLU and the softmax rescale);
// the attention weights use `exp16`, a bounded-error vector exp
// (docs/cpu-backend.md).
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/KVToCPU/CpuTarget.h"
#include "passes/Conversion/KVToCPU/CpuKernels.h"
#include "passes/Conversion/KVToCPU/CpuParallel.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/TargetParser/Host.h"

#include <algorithm>
#include <unistd.h>

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#endif

using namespace mlir;
using namespace mlir::kv;
using namespace mlir::kv::cpu;

namespace {

/// Whether the host CPU has each of `names` (LLVM's feature names).
bool hostHas(std::initializer_list<StringRef> names) {
  static const llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  return llvm::all_of(names, [](StringRef name) {
    auto it = features.find(name);
    return it != features.end() && it->second;
  });
}

/// 512 where the host has AVX-512F, else 256.
int64_t hostVectorBits() { return hostHas({"avx512f"}) ? 512 : 256; }

class CpuTarget final : public ForwardTarget {
public:
  CpuTarget(int64_t vectorBits, QuantDot quantDot, DecodePrefetch prefetch)
      : vectorBits(vectorBits ? vectorBits : hostVectorBits()),
        int8Dot(
            quantDot != QuantDot::F32 &&
            (quantDot != QuantDot::Auto || hostHasInt8Dot() || hostHasAvx2())),
        int8Isa(quantDot == QuantDot::Avx2 ||
                        (quantDot == QuantDot::Auto && !hostHasInt8Dot())
                    ? Int8Isa::Avx2
                    : Int8Isa::Vnni512),
        amx(quantDot == QuantDot::Amx ||
            (quantDot == QuantDot::Auto && hostHasAmx())),
        farPrefetch(
            prefetch == DecodePrefetch::Far ||
            (prefetch == DecodePrefetch::Host && decodePrefetchesFar())) {}

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
    Value dim = e.cIndex(e.dim);
    BufferRef weight{e.f32View(w.bytes, w.offset, dim), e.cIndex(0)};
    call(
        e, "rmsnorm",
        {rows(e, x, n, e.dim), vector(e, weight, dim), rows(e, out, n, e.dim)});
  }

  /// f32 weights: the packed and dot-product kernels of matmul_nt over the
  /// slice viewed as floats. Other formats: matmul_<format>, which widens
  /// the weights' blocks to f32 or (Q8_0 with integer dots) multiplies them
  /// as int8 (CpuQuantMatmul.cpp, CpuInt8Matmul.cpp; emitKernels picks which
  /// per format).
  void matmul(ForwardEmitter &e, BufferRef a, WeightRef b, BufferRef c, Value n,
              int64_t m, int64_t k, bool accumulate) override {
    if (b.format == KVRT_WEIGHT_F32) {
      auto packPerCall = [&] {
        BufferRef weights{e.f32View(b.bytes, b.offset, e.cIndex(m * k)),
                          e.cIndex(0)};
        call(e, accumulate ? "matmul_nt_acc" : "matmul_nt",
             {rows(e, a, n, k), rows(e, weights, e.cIndex(m), k),
              rows(e, c, n, m), packBuffer(e)});
      };
      if (!b.packed)
        return packPerCall();
      // The panels the runtime packed once per model, where it packed this
      // slice for this tile's width and the product takes the packed path.
      int64_t nr = panelWidth(vectorBits);
      Value ours = e.cmp(arith::CmpIPredicate::eq, b.panelWidth, e.cI64(nr));
      Value packedRows =
          e.cmp(arith::CmpIPredicate::uge, n, e.cIndex(kPackedMinRows));
      Value offset =
          e.ifThenElse(
               arith::AndIOp::create(e.b, ours, packedRows), {e.i64()},
               [&]() -> SmallVector<Value> {
                 return {e.load(b.packedOffsets, {b.packedEntry})};
               },
               [&]() -> SmallVector<Value> { return {e.cI64(-1)}; })
              .front();
      e.ifElse(
          e.cmp(arith::CmpIPredicate::sge, offset, e.cI64(0)),
          [&] {
            int64_t floats = (m + nr - 1) / nr * nr * k;
            BufferRef panels{b.packed, e.toIndex(offset)};
            call(e, accumulate ? "matmul_nt_acc_panels" : "matmul_nt_panels",
                 {rows(e, a, n, k), vector(e, panels, e.cIndex(floats)),
                  rows(e, c, n, m)});
          },
          packPerCall);
      return;
    }
    auto fileRows = [&] {
      call(e, quantMatmulName(b.format, accumulate),
           {rows(e, a, n, k), b.bytes, b.offset, rows(e, c, n, m),
            packBuffer(e), functionBuffer(e, widenBuffers)});
    };
    if (!mayReadDecodeRows(b))
      return fileRows();
    // The rows the runtime repacked, where it did: a decode step's tiles
    // and a prefill's panels read them, and the file's pages are left
    // alone. With AMX a prefill reads the file's rows (its AMX tiles take
    // the quants unbiased).
    Value offset = decodeRowsOffset(e, b);
    Value repacked = repackedAt(e, offset);
    if (amx)
      repacked = arith::AndIOp::create(e.b, repacked, decodeRows(e, n));
    e.ifElse(
        repacked,
        [&] {
          call(e, int8MatmulName(b.format, accumulate, /*repacked=*/true),
               {rows(e, a, n, k), b.decodeRows, e.toIndex(offset),
                rows(e, c, n, m), packBuffer(e),
                functionBuffer(e, widenBuffers)});
        },
        fileRows);
  }

  /// A decode step (fewer than kPackedMinRows rows) takes the products as
  /// one kernel (emitDecodeProducts) where no weight is f32; a prefill, and
  /// f32 weights, a matmul each.
  void products(ForwardEmitter &e, BufferRef a, ArrayRef<MatmulOutput> outputs,
                Value n, int64_t k) override {
    SmallVector<DecodeKernel> kernels;
    bool repackable = false;
    for (const MatmulOutput &out : outputs) {
      if (out.weight.format == KVRT_WEIGHT_F32)
        return ForwardTarget::products(e, a, outputs, n, k);
      kernels.push_back(decodeKernel(out.weight.format));
      repackable |= mayReadDecodeRows(out.weight);
    }
    std::string base = productsName(kernels);
    emitOnce(e, base, [&] { emitDecodeProducts(e, base, kernels); });
    auto fileRows = [&] {
      e.ifElse(
          decodeRows(e, n),
          [&] {
            SmallVector<Value> operands{rows(e, a, n, k)};
            for (const MatmulOutput &out : outputs)
              operands.append({out.weight.bytes, out.weight.offset,
                               rows(e, out.c, n, out.m)});
            call(e, base, operands);
          },
          [&] { ForwardTarget::products(e, a, outputs, n, k); });
    };
    if (!repackable)
      return fileRows();
    // A decode step reads the Q8_0 and Q4_K weights' repacked rows where the
    // runtime repacked them all.
    SmallVector<Value> offsets;
    Value repacked = decodeRows(e, n);
    for (auto [out, kernel] : llvm::zip_equal(outputs, kernels)) {
      if (!mayReadDecodeRows(out.weight)) {
        offsets.push_back(Value());
        continue;
      }
      kernel = repackedKernel(out.weight.format);
      offsets.push_back(decodeRowsOffset(e, out.weight));
      repacked =
          arith::AndIOp::create(e.b, repacked, repackedAt(e, offsets.back()));
    }
    std::string repackedBase = productsName(kernels);
    emitOnce(e, repackedBase,
             [&] { emitDecodeProducts(e, repackedBase, kernels); });
    e.ifElse(
        repacked,
        [&] {
          SmallVector<Value> operands{rows(e, a, n, k)};
          for (auto [out, offset] : llvm::zip_equal(outputs, offsets))
            operands.append({offset ? out.weight.decodeRows : out.weight.bytes,
                             offset ? e.toIndex(offset) : out.weight.offset,
                             rows(e, out.c, n, out.m)});
          call(e, repackedBase, operands);
        },
        fileRows);
  }

  /// A decode step's gated product as one kernel (emitDecodeGated) where
  /// the gate and up weights share a format other than f32.
  void gatedProduct(ForwardEmitter &e, BufferRef a, WeightRef gate,
                    WeightRef up, BufferRef h1, BufferRef h3, Value n,
                    int64_t m, int64_t k) override {
    auto separate = [&] {
      ForwardTarget::gatedProduct(e, a, gate, up, h1, h3, n, m, k);
    };
    if (gate.format != up.format || gate.format == KVRT_WEIGHT_F32)
      return separate();
    DecodeKernel kernel = decodeKernel(gate.format);
    std::string base = gatedName(kernel);
    emitOnce(e, base, [&] { emitDecodeGated(e, base, kernel); });
    auto fileRows = [&] {
      e.ifElse(
          decodeRows(e, n),
          [&] {
            call(e, base,
                 {rows(e, a, n, k), gate.bytes, gate.offset, up.bytes,
                  up.offset, rows(e, h1, n, m)});
          },
          separate);
    };
    if (!mayReadDecodeRows(gate))
      return fileRows();
    // A decode step over the repacked rows of both, where the runtime
    // repacked them.
    DecodeKernel repacked = repackedKernel(gate.format);
    std::string repackedBase = gatedName(repacked);
    emitOnce(e, repackedBase,
             [&] { emitDecodeGated(e, repackedBase, repacked); });
    Value gateAt = decodeRowsOffset(e, gate), upAt = decodeRowsOffset(e, up);
    Value both =
        arith::AndIOp::create(e.b, repackedAt(e, gateAt), repackedAt(e, upAt));
    e.ifElse(
        arith::AndIOp::create(e.b, decodeRows(e, n), both),
        [&] {
          call(e, repackedBase,
               {rows(e, a, n, k), gate.decodeRows, e.toIndex(gateAt),
                up.decodeRows, e.toIndex(upAt), rows(e, h1, n, m)});
        },
        fileRows);
  }

  /// The RoPE tables of the whole call (rope_rows), so that no layer
  /// computes a sine: a task per layer would compute each query's, once per
  /// run, in every layer and every task that has its token.
  Value ropeTables(ForwardEmitter &e, Value n, Value pos,
                   const KVTables &kv) override {
    Value rows = ropeTableRows(e, n, kv.runs);
    Value tables = memref::AllocOp::create(
        e.b, e.buffer(e.f64()), ValueRange{e.mul(rows, e.cIndex(2 * e.half))});
    temporaries.push_back(tables);
    e.ifThen(e.cmp(arith::CmpIPredicate::ugt, rows, e.cIndex(0)), [&] {
      call(e, "rope_rows", {tables, pos, kv.runs, n});
    });
    return tables;
  }

  void storeKV(ForwardEmitter &e, BufferRef k, BufferRef v, Value n, Value pos,
               const KVTables &kv, Value layer) override {
    call(e, "store_kv",
         {rows(e, k, n, e.kvDim), rows(e, v, n, e.kvDim), pos, kv.kv, kv.pages,
          kv.runs, layer, kv.pageTokens, ropeTablesOf(e, kv)});
  }

  void attention(ForwardEmitter &e, BufferRef q, BufferRef out, Value n,
                 Value pos, const KVTables &kv, Value layer) override {
    Value size = e.mul(n, e.cIndex(e.dim));
    call(e, "attention_kernel",
         {vector(e, q, size), n, pos, kv.kv, kv.pages, kv.runs, layer,
          kv.pageTokens, vector(e, out, size), ropeTablesOf(e, kv)});
  }

  /// The call's RoPE tables, or none (an attention entry of its own): the
  /// kernels then compute each table where they use it.
  static Value ropeTablesOf(ForwardEmitter &e, const KVTables &kv) {
    if (kv.rope)
      return kv.rope;
    return memref::AllocaOp::create(e.b, e.buffer(e.f64()),
                                    ValueRange{e.cIndex(0)});
  }

  void addBias(ForwardEmitter &e, BufferRef c, WeightRef bias, Value n,
               int64_t m) override {
    requireF32(bias, "the CPU bias");
    Value size = e.cIndex(m);
    BufferRef b{e.f32View(bias.bytes, bias.offset, size), e.cIndex(0)};
    call(e, "add_bias", {rows(e, c, n, m), vector(e, b, size)});
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
    widenBuffers.clear();
  }

private:
  /// 512 (AVX-512) or 256 (AVX2): the kernels' register blocking.
  int64_t vectorBits;
  /// Whether formats with an integer dot product (hasInt8Dot) use it.
  bool int8Dot;
  /// The instructions of those products (AVX2: decode steps only).
  Int8Isa int8Isa;
  /// Whether their prefill takes AMX tiles where emitInt8Matmul has them.
  bool amx;
  /// Whether its decode tiles prefetch far ahead (DecodePrefetch).
  bool farPrefetch;
  SmallVector<Value> temporaries;
  /// The kernels emitted on demand (the fused products of a decode step,
  /// one per combination of formats), by their full names.
  llvm::StringSet<> emitted;

  /// How a decode step of this target multiplies weights of `format`.
  DecodeKernel decodeKernel(kvrt_weight_format format) const {
    return DecodeKernel{format, int8Dot && hasInt8Dot(format), int8Isa,
                        /*repacked=*/false, farPrefetch};
  }
  /// The same over the rows the runtime repacked for decode.
  DecodeKernel repackedKernel(kvrt_weight_format format) const {
    DecodeKernel kernel = decodeKernel(format);
    kernel.repacked = true;
    return kernel;
  }

  /// Whether a decode step of this target may read `w`'s rows repacked
  /// (decode_rows): a forward's weight (not an attention entry's) whose
  /// format and integer dots have such a kernel (readsDecodeRows).
  bool mayReadDecodeRows(const WeightRef &w) const {
    return w.decodeRows &&
           readsDecodeRows(w.format, int8Dot && hasInt8Dot(w.format), int8Isa);
  }

  /// The byte offset (i64) of `w`'s slice in decode_rows, or -1 where the
  /// runtime did not repack it (a table shorter than the entry: none).
  static Value decodeRowsOffset(ForwardEmitter &e, const WeightRef &w) {
    Value entries =
        memref::DimOp::create(e.b, w.decodeRowsOffsets, e.cIndex(0));
    return e
        .ifThenElse(
            e.cmp(arith::CmpIPredicate::ult, w.packedEntry, entries), {e.i64()},
            [&]() -> SmallVector<Value> {
              return {e.load(w.decodeRowsOffsets, {w.packedEntry})};
            },
            [&]() -> SmallVector<Value> { return {e.cI64(-1)}; })
        .front();
  }
  /// Whether `offset` (decodeRowsOffset's) names repacked rows.
  static Value repackedAt(ForwardEmitter &e, Value offset) {
    return e.cmp(arith::CmpIPredicate::sge, offset, e.cI64(0));
  }

  /// Whether n (index) rows are a decode step's: the matmul kernels' own
  /// test (fewer than kPackedMinRows).
  static Value decodeRows(ForwardEmitter &e, Value n) {
    return e.cmp(arith::CmpIPredicate::ult, n, e.cIndex(kPackedMinRows));
  }

  /// Runs `emit` (which emits a kernel at module level) the first time
  /// `base` is asked for; the insertion point is kept.
  void emitOnce(ForwardEmitter &e, StringRef base, function_ref<void()> emit) {
    if (!emitted.insert(e.name(base)).second)
      return;
    OpBuilder::InsertionGuard guard(e.b);
    emit();
  }

  /// The packed-weights buffer of each function that multiplies, and the
  /// one weights of other formats are widened to f32 in (for a prefill).
  llvm::DenseMap<Operation *, Value> packBuffers, widenBuffers;

  /// The buffer the matmuls of the function being emitted pack weights into,
  /// allocated once at its entry (a temporary) with packBufferFloats.
  Value packBuffer(ForwardEmitter &e) { return functionBuffer(e, packBuffers); }

  /// A buffer of packBufferFloats floats of the function being emitted, one
  /// per function and map, allocated at its entry (a temporary).
  Value functionBuffer(ForwardEmitter &e,
                       llvm::DenseMap<Operation *, Value> &buffers) {
    func::FuncOp function = enclosingFunction(e);
    Value &buffer = buffers[function];
    if (buffer)
      return buffer;
    int64_t floats = packBufferFloats(e, vectorBits);
    OpBuilder::InsertionGuard guard(e.b);
    e.b.setInsertionPointToStart(&function.getBody().front());
    buffer = memref::AllocOp::create(e.b, MemRefType::get({floats}, e.f32()),
                                     e.b.getI64IntegerAttr(64));
    Value dynamic = memref::CastOp::create(e.b, e.buffer(e.f32()), buffer);
    temporaries.push_back(buffer);
    buffer = dynamic;
    return buffer;
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
};

void CpuTarget::emitKernels(ForwardEmitter &e) {
  declareParallelRuntime(e);
  emitRmsnorm(e);
  emitMatmul(e, vectorBits, /*accumulate=*/false);
  emitMatmul(e, vectorBits, /*accumulate=*/true);
  emitPanelMatmul(e, vectorBits, /*accumulate=*/false);
  emitPanelMatmul(e, vectorBits, /*accumulate=*/true);
  for (kvrt_weight_format format : e.formats.used()) {
    if (format == KVRT_WEIGHT_F32)
      continue;
    for (bool accumulate : {false, true}) {
      bool int8 = int8Dot && hasInt8Dot(format);
      if (int8)
        emitInt8Matmul(e, format, accumulate, int8Isa, farPrefetch, amx);
      else
        emitQuantMatmul(e, format, accumulate, farPrefetch);
      // Over the rows the runtime repacks for decode (decode_rows).
      if (readsDecodeRows(format, int8, int8Isa))
        emitInt8Matmul(e, format, accumulate, int8Isa, farPrefetch, amx,
                       /*repacked=*/true);
    }
  }
  emitRopeTable(e);
  emitRopeRows(e);
  emitRopeRow(e);
  emitRopeApply(e);
  emitSwiglu(e);
  if (e.config.qkv_bias)
    emitAddBias(e);
  emitStoreKV(e);
  emitExp16(e);
  emitAttention(e, vectorBits);
  emitMaterialize(e);
}

} // namespace

//===----------------------------------------------------------------------===//
// What the kernels share (CpuKernels.h)
//===----------------------------------------------------------------------===//

MemRefType cpu::matrixType(ForwardEmitter &e) {
  int64_t d = ShapedType::kDynamic;
  return MemRefType::get({d, d}, e.f32(),
                         StridedLayoutAttr::get(e.b.getContext(), d, {d, 1}));
}

MemRefType cpu::vectorType(ForwardEmitter &e) {
  int64_t d = ShapedType::kDynamic;
  return MemRefType::get({d}, e.f32(),
                         StridedLayoutAttr::get(e.b.getContext(), d, {1}));
}

MemRefType cpu::headType(ForwardEmitter &e) {
  return MemRefType::get(
      {e.headSize}, e.f32(),
      StridedLayoutAttr::get(e.b.getContext(), ShapedType::kDynamic, {1}));
}

MemRefType cpu::ropeTableType(ForwardEmitter &e) {
  return MemRefType::get({e.half}, e.f64());
}

func::FuncOp cpu::enclosingFunction(ForwardEmitter &e) {
  Operation *parent = e.b.getInsertionBlock()->getParentOp();
  if (auto function = dyn_cast<func::FuncOp>(parent))
    return function;
  return parent->getParentOfType<func::FuncOp>();
}

SmallVector<Value> cpu::call(ForwardEmitter &e, StringRef kernel,
                             ValueRange operands, TypeRange results) {
  return SmallVector<Value>(
      func::CallOp::create(e.b, e.name(kernel), results, operands)
          .getResults());
}

std::optional<QuantDot> mlir::kv::parseQuantDot(llvm::StringRef name) {
  return llvm::StringSwitch<std::optional<QuantDot>>(name)
      .Case("auto", QuantDot::Auto)
      .Case("f32", QuantDot::F32)
      .Case("int8", QuantDot::Int8)
      .Case("amx", QuantDot::Amx)
      .Case("avx2", QuantDot::Avx2)
      .Default(std::nullopt);
}

std::optional<DecodePrefetch>
mlir::kv::parseDecodePrefetch(llvm::StringRef name) {
  return llvm::StringSwitch<std::optional<DecodePrefetch>>(name)
      .Case("host", DecodePrefetch::Host)
      .Case("near", DecodePrefetch::Near)
      .Case("far", DecodePrefetch::Far)
      .Default(std::nullopt);
}

bool mlir::kv::hostHasInt8Dot() { return hostHas({"avx512vnni", "avx512bw"}); }

bool mlir::kv::hostHasAvx2() { return hostHas({"avx2"}); }

bool mlir::kv::hostHasAmx() {
#if defined(__linux__) && defined(__x86_64__)
  static const bool granted = [] {
    if (!hostHasInt8Dot() || !hostHas({"amx-tile", "amx-int8"}))
      return false;
    // ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA (asm/prctl.h, Linux 5.16).
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return granted;
#else
  return false;
#endif
}

int64_t mlir::kv::hostL1DataWays() {
#ifdef _SC_LEVEL1_DCACHE_ASSOC
  static const int64_t ways =
      std::max<long>(sysconf(_SC_LEVEL1_DCACHE_ASSOC), 0);
  return ways;
#else
  return 0;
#endif
}

std::unique_ptr<ForwardTarget>
mlir::kv::createCpuTarget(int64_t vectorBits, QuantDot quantDot,
                          DecodePrefetch prefetch) {
  return std::make_unique<CpuTarget>(vectorBits, quantDot, prefetch);
}
