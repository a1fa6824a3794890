//===- GpuTarget.cpp - The forward's stages on an NVIDIA GPU ----*- C++ -*-===//
//
// The stages as kernels of `gpu.module @<prefix>_kernels`, launched with
// gpu.launch_func from the forward's host functions (docs/gpu-backend.md has
// the table of grids and blocks). The outer loops the CPU target runs as
// scf.for (tokens x output rows, tokens x heads x runs, ...) are the grid;
// the inner reductions are warps (butterfly shuffles) and shared memory.
//
// The model's math comes from ForwardEmitter, as on the CPU: RoPE angles in
// f64 from integer positions (libdevice pow/cos/sin), rotations in f64
// rounded to f32, page addressing, the causal clamp of a run, the online
// softmax rescale, RMSNorm's scale and SwiGLU. RMSNorm's f64 partial sums are
// added in one fixed order so that every run gives the same bits. No
// fast-math flag: math.exp is libdevice's __nv_expf, never ex2.approx alone.
//
// Kernels and device helpers are named without the forward's prefix: the
// gpu.module carries it, and each module becomes its own cubin (gpu.binary).
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/KVToNVVM/GpuTarget.h"
#include "runtime/core/ForwardABI.h"
#include "runtime/core/ModelConfig.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::kv;

namespace {

/// Threads of a warp.
constexpr int64_t kWarp = 32;
/// Threads of a block of rmsnorm, matmul (8 warps) and swiglu; materialize
/// fills up to this many with token lanes.
constexpr int64_t kBlock = 256;
/// matmul: output rows per block (one per warp) and tokens per warp.
constexpr int64_t kMatmulRows = kBlock / kWarp;
constexpr int64_t kMatmulTokens = 4;
/// attn_tile and attn_merge: 4 warps.
constexpr int64_t kAttnWarps = 4;
constexpr int64_t kAttnBlock = kAttnWarps * kWarp;

/// The largest head the attention kernel holds in registers: 32 elements per
/// lane of a warp.
constexpr int64_t kMaxHeadSize = 1024;

/// The largest grid y and z a launch may have (grid x: 2^31 - 1). Query
/// tokens, which a prefill has any number of, are never a grid y or z: the
/// attention kernels take at most this many and loop over the rest.
constexpr int64_t kMaxGridYZ = 65535;

/// Alignment of every shared-memory buffer: the widest vector access made to
/// one (16 bytes: four f32 of attn_tile's lanes, two f64 that LLVM's
/// load/store vectorizer forms in rmsnorm's sum).
constexpr int64_t kSharedAlign = 16;

/// Elements of a head each lane of a warp holds in attn_tile.
int64_t elementsPerLane(int64_t headSize) {
  return (headSize + kWarp - 1) / kWarp;
}

/// Queries an attn_tile block takes together, sharing each load of a key
/// and value: as many as keep their rotated query slice and state (max,
/// sum, accumulator) in a lane's registers, 2 x epl + 2 floats each (16
/// floats of query and accumulator a lane in all), at most 8.
int64_t attnQueries(int64_t headSize) {
  return std::clamp<int64_t>(16 / elementsPerLane(headSize), 1, 8);
}

/// Keys an attn_tile warp of `queries` queries loads before it uses any of
/// them: a decode step is bound by memory latency, and each warp needs
/// several loads in flight. As many as keep 2 x epl x B floats of K and V in
/// a lane's registers: 64 for one query (decode: a lane holds nothing else),
/// else 32 and at most 4 (with 8 queries of 64 elements, 8 keys took 206
/// registers a thread).
int64_t attnBatch(int64_t headSize, int64_t queries) {
  int64_t epl = elementsPerLane(headSize);
  if (queries == 1)
    return std::clamp<int64_t>(32 / epl, 1, 8);
  return std::clamp<int64_t>(16 / epl, 1, 4);
}

/// Tiles an attn_merge warp loads before it uses any of them: a tile's
/// accumulator slice is epl floats, at most 8 tiles.
int64_t mergeBatch(int64_t headSize) {
  return std::clamp<int64_t>(32 / elementsPerLane(headSize), 1, 8);
}

class GpuTarget final : public ForwardTarget {
public:
  StringRef name() const override { return "GPU"; }

  std::string checkConfig(const kvrt_model_config &config) const override {
    if (config.n_heads <= 0)
      return "";
    int64_t headSize = config.dim / config.n_heads;
    if (headSize > kMaxHeadSize)
      return "head size " + std::to_string(headSize) + " exceeds " +
             std::to_string(kMaxHeadSize) +
             ", the largest the GPU attention kernel holds in registers (" +
             std::to_string(kMaxHeadSize / kWarp) +
             " elements per lane of a warp)";
    int64_t epl = elementsPerLane(headSize);
    if (headSize % epl != 0)
      return "head size " + std::to_string(headSize) +
             " is not a multiple of the " + std::to_string(epl) +
             " elements each lane of a warp holds";
    // Heads, KV heads and layers are grid y or z of some kernel.
    int64_t largest =
        std::max({int64_t(config.n_heads), int64_t(config.n_kv_heads),
                  int64_t(config.n_layers)});
    if (largest > kMaxGridYZ)
      return std::to_string(largest) +
             " heads or layers exceed the GPU grid's y and z (" +
             std::to_string(kMaxGridYZ) + ")";
    return "";
  }

  void emitKernels(ForwardEmitter &e) override;

  void rmsnorm(ForwardEmitter &e, BufferRef x, WeightRef w, BufferRef out,
               Value n) override {
    requireF32(w, "the GPU rmsnorm");
    Value c0 = e.cIndex(0), c1 = e.cIndex(1);
    // The slice as floats: pointer arithmetic on the host, no load.
    Value weights = e.f32View(w.bytes, w.offset, e.cIndex(e.dim));
    launch(e, kernels.rmsnorm, {n, c1, c1}, {e.cIndex(kBlock), c1, c1},
           {x.memref, x.offset, weights, c0, out.memref, out.offset});
  }

  /// The kernel is picked per format: `matmul` reads f32 weights (the slice
  /// viewed as floats on the host), `matmul_<format>` widens each element
  /// of another format from its block (ForwardEmitter::weightElement).
  void matmul(ForwardEmitter &e, BufferRef a, WeightRef b, BufferRef c, Value n,
              int64_t m, int64_t kdim, bool accumulate) override {
    Value c1 = e.cIndex(1);
    Value cM = e.cIndex(m);
    Value gx =
        e.divu(e.add(cM, e.cIndex(kMatmulRows - 1)), e.cIndex(kMatmulRows));
    Value gy =
        e.divu(e.add(n, e.cIndex(kMatmulTokens - 1)), e.cIndex(kMatmulTokens));
    Value weights = b.bytes, offset = b.offset;
    if (b.format == KVRT_WEIGHT_F32) {
      weights = e.f32View(b.bytes, b.offset, e.cIndex(m * kdim));
      offset = e.cIndex(0);
    }
    launch(e, kernels.matmul[b.format], {gx, gy, c1},
           {e.cIndex(kBlock), c1, c1},
           {a.memref, a.offset, weights, offset, c.memref, c.offset, n, cM,
            e.cIndex(kdim), e.cI32(accumulate ? 1 : 0)});
  }

  void storeKV(ForwardEmitter &e, BufferRef k, BufferRef v, Value n, Value pos,
               const KVTables &kv, Value layer) override {
    Value c1 = e.cIndex(1);
    launch(e, kernels.storeKV, {n, e.cIndex(e.kvHeads), c1},
           {e.cIndex(e.half), c1, c1},
           {k.memref, k.offset, v.memref, v.offset, pos, kv.kv, kv.pages,
            kv.runs, layer, kv.pageTokens});
  }

  void attention(ForwardEmitter &e, BufferRef q, BufferRef out, Value n,
                 Value pos, const KVTables &kv, Value layer) override {
    Value c1 = e.cIndex(1);
    Value block = e.cIndex(kAttnBlock);
    Value heads = e.cIndex(e.heads);
    // The host cut the runs into tiles (docs/gpu-backend.md); their count is
    // the table's, known from its descriptor on the host.
    Value ntiles = memref::DimOp::create(e.b, kv.tiles, e.cIndex(0));
    // At most kMaxGridYZ blocks of query groups; each takes every gz-th
    // group. attn_merge: every gz-th query.
    Value cQ = e.cIndex(attnQueries(e.headSize));
    Value groups = e.divu(e.add(n, e.sub(cQ, c1)), cQ);
    Value gz = e.minu(n, e.cIndex(kMaxGridYZ));
    SmallVector<Value> operands{q.memref, q.offset,      pos,      kv.kv,
                                kv.pages, kv.runs,       kv.tiles, ntiles,
                                layer,    kv.pageTokens, kv.part,  n};
    // One query (a decode step): the kernel of one query per block, whose
    // lanes have the registers for more keys in flight. Each branch
    // launches attn_merge too: gpu-async-region gives each branch one
    // stream, and a merge after the scf.if would wait for the host.
    auto merge = [&] {
      launch(e, kernels.attnMerge, {heads, gz, c1}, {block, c1, c1},
             {kv.part, ntiles, out.memref, out.offset, n});
    };
    e.ifElse(
        e.cmp(arith::CmpIPredicate::eq, n, c1),
        [&] {
          launch(e, kernels.attnTileOne, {ntiles, heads, c1}, {block, c1, c1},
                 operands);
          merge();
        },
        [&] {
          launch(e, kernels.attnTile,
                 {ntiles, heads, e.minu(groups, e.cIndex(kMaxGridYZ))},
                 {block, c1, c1}, operands);
          merge();
        });
  }

  void addBias(ForwardEmitter &e, BufferRef c, WeightRef bias, Value n,
               int64_t m) override {
    requireF32(bias, "the GPU bias");
    Value c0 = e.cIndex(0), c1 = e.cIndex(1), cM = e.cIndex(m);
    // The slice as floats, as rmsnorm's weights.
    Value b = e.f32View(bias.bytes, bias.offset, cM);
    Value blocks = e.divu(e.add(cM, e.cIndex(kBlock - 1)), e.cIndex(kBlock));
    launch(e, kernels.addBias, {blocks, n, c1}, {e.cIndex(kBlock), c1, c1},
           {c.memref, c.offset, b, c0, cM});
  }

  void swiglu(ForwardEmitter &e, BufferRef h1, BufferRef h3,
              Value count) override {
    Value c1 = e.cIndex(1);
    Value blocks = e.divu(e.add(count, e.cIndex(kBlock - 1)), e.cIndex(kBlock));
    launch(e, kernels.swiglu, {blocks, c1, c1}, {e.cIndex(kBlock), c1, c1},
           {h1.memref, h1.offset, h3.memref, h3.offset, count});
  }

  void materialize(ForwardEmitter &e, const KVTables &kv,
                   Value dstPages) override {
    Value c0 = e.cIndex(0), c1 = e.cIndex(1);
    // One block per (run, layer, KV head): the grid needs only the number of
    // runs, which the host has from the table's descriptor; each block loops
    // over its run's tokens, whose count is in device memory. A grid of no
    // block is a launch error in CUDA, hence the guard.
    Value nruns = memref::DimOp::create(e.b, kv.runs, c0);
    e.ifThen(e.cmp(arith::CmpIPredicate::ugt, nruns, c0), [&] {
      launch(e, kernels.materialize,
             {nruns, e.cIndex(e.layers), e.cIndex(e.kvHeads)},
             {e.cIndex(materializeBlock(e)), c1, c1},
             {kv.kv, kv.pages, kv.runs, dstPages, kv.pageTokens});
    });
  }

private:
  /// The kernels and device helpers of the forward being built (emitKernels
  /// runs once per forward, before its stages).
  struct Kernels {
    gpu::GPUFuncOp rmsnorm, swiglu, addBias, storeKV, attnTile, attnTileOne,
        attnMerge, materialize;
    /// The matmul of each weight format the forward reads.
    std::array<gpu::GPUFuncOp, KVRT_WEIGHT_FORMAT_COUNT> matmul;
    func::FuncOp ropeCosSin, rotate, warpSum;
  } kernels;
  gpu::GPUModuleOp kernelModule;

  /// materialize: threads per block, RoPE pairs x token lanes.
  static int64_t materializeTokenLanes(ForwardEmitter &e) {
    return std::max<int64_t>(1, kBlock / e.half);
  }
  static int64_t materializeBlock(ForwardEmitter &e) {
    return e.half * materializeTokenLanes(e);
  }

  /// memref<size x T> in shared memory.
  static MemRefType workgroupBuffer(ForwardEmitter &e, int64_t size,
                                    Type element) {
    return MemRefType::get(
        {size}, element, MemRefLayoutAttrInterface(),
        gpu::AddressSpaceAttr::get(
            e.b.getContext(), gpu::GPUDialect::getWorkgroupAddressSpace()));
  }

  /// A kernel at the end of the gpu.module, with the insertion point at the
  /// start of its body; finishKernel adds gpu.return.
  gpu::GPUFuncOp beginKernel(ForwardEmitter &e, StringRef kernelName,
                             TypeRange arguments, TypeRange workgroup = {}) {
    e.b.setInsertionPointToEnd(kernelModule.getBody());
    auto func = gpu::GPUFuncOp::create(
        e.b, kernelName, e.b.getFunctionType(arguments, {}), workgroup);
    func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), e.b.getUnitAttr());
    for (unsigned i = 0; i < workgroup.size(); ++i)
      func.setWorkgroupAttributionAttr(i, "llvm.align",
                                       e.b.getI64IntegerAttr(kSharedAlign));
    e.b.setInsertionPointToStart(&func.getBody().front());
    return func;
  }
  void finishKernel(ForwardEmitter &e) {
    gpu::ReturnOp::create(e.b);
    e.b.setInsertionPointToEnd(e.module.getBody());
  }

  /// A private device function of the gpu.module.
  func::FuncOp beginHelper(ForwardEmitter &e, StringRef helperName,
                           TypeRange arguments, TypeRange results) {
    e.b.setInsertionPointToEnd(kernelModule.getBody());
    auto func = func::FuncOp::create(e.b, helperName,
                                     e.b.getFunctionType(arguments, results));
    func.setPrivate();
    e.b.setInsertionPointToStart(func.addEntryBlock());
    return func;
  }
  void finishHelper(ForwardEmitter &e, ValueRange results) {
    func::ReturnOp::create(e.b, results);
    e.b.setInsertionPointToEnd(e.module.getBody());
  }

  static void launch(ForwardEmitter &e, gpu::GPUFuncOp kernel,
                     gpu::KernelDim3 grid, gpu::KernelDim3 block,
                     ValueRange operands) {
    gpu::LaunchFuncOp::create(e.b, kernel, grid, block,
                              /*dynamicSharedMemorySize=*/Value(), operands);
  }

  static Value threadId(ForwardEmitter &e) {
    return gpu::ThreadIdOp::create(e.b, gpu::Dimension::x);
  }
  static Value blockId(ForwardEmitter &e, gpu::Dimension dimension) {
    return gpu::BlockIdOp::create(e.b, dimension);
  }

  /// The weight exp(m - mAll) of a partial softmax with max m when partials
  /// are merged under the global max mAll; 0 when no partial saw a key
  /// (`any` false: mAll is -inf and the difference NaN).
  static Value mergeWeight(ForwardEmitter &e, Value m, Value mAll, Value any) {
    Value diff = arith::SubFOp::create(e.b, m, mAll);
    Value weight = math::ExpOp::create(e.b, diff);
    return e.select(any, weight, e.cF32(0.0f));
  }

  /// One batched step of an online softmax with state (m, l, acc) over
  /// candidates u: scores s_u (-inf: the candidate weighs nothing), masses
  /// c_u (empty: 1 each) and vectors v_u. With m' = max(m, s_u ...):
  /// l' = l e^(m - m') + sum_u c_u e^(s_u - m'),
  /// acc' = acc e^(m - m') + sum_u e^(s_u - m') v_u (no NaN when all are
  /// -inf: ForwardEmitter::softmaxRescale shifts by 0 then).
  static SmallVector<Value> softmaxBatch(ForwardEmitter &e, Value m, Value l,
                                         Value acc, ArrayRef<Value> scores,
                                         ArrayRef<Value> masses,
                                         ArrayRef<Value> vectors) {
    Value best = scores.front();
    for (Value s : scores.drop_front())
      best = arith::MaxNumFOp::create(e.b, best, s);
    auto [newMax, shift, corr] = e.softmaxRescale(m, best);
    VectorType vt = cast<VectorType>(acc.getType());
    Value sum = arith::MulFOp::create(e.b, l, corr);
    Value out = arith::MulFOp::create(
        e.b, acc, vector::BroadcastOp::create(e.b, vt, corr));
    for (size_t u = 0; u < scores.size(); ++u) {
      Value p = math::ExpOp::create(
          e.b, arith::SubFOp::create(e.b, scores[u], shift));
      sum = masses.empty()
                ? arith::AddFOp::create(e.b, sum, p).getResult()
                : math::FmaOp::create(e.b, p, masses[u], sum).getResult();
      out = vector::FMAOp::create(e.b, vector::BroadcastOp::create(e.b, vt, p),
                                  vectors[u], out);
    }
    return {newMax, sum, out};
  }

  /// The shared buffers and thread roles of a block of kAttnWarps warps
  /// whose lanes hold `epl` elements of a head each: `active` lanes hold
  /// some (those past head_size / epl hold nothing: zeros in the dot
  /// products), from element `el`.
  struct WarpMerge {
    Value wm, wl, wacc;
    Value tid, warp, lane, active, el;
  };

  /// The thread roles of this block over shared buffers wm, wl, wacc.
  static WarpMerge warpRoles(ForwardEmitter &e, Value wm, Value wl,
                             Value wacc) {
    int64_t epl = elementsPerLane(e.headSize);
    Value cWarp = e.cIndex(kWarp);
    Value tid = threadId(e);
    Value warp = e.divu(tid, cWarp);
    Value lane = e.remu(tid, cWarp);
    Value active =
        e.cmp(arith::CmpIPredicate::ult, lane, e.cIndex(e.headSize / epl));
    Value el = e.mul(lane, e.cIndex(epl));
    return {wm, wl, wacc, tid, warp, lane, active, el};
  }

  /// The four warps' online-softmax states (m, l, a lane's slice of acc)
  /// merged through shared memory under their global max (every weight 0
  /// when no warp saw anything); `element(x, acc, l)` is called for each
  /// element x of the head (threads stride over them) with the merged
  /// accumulator and sum, which every thread has. Block-uniform: each call
  /// starts with a barrier, so the buffers may be reused by the next.
  /// Returns the merged max and sum.
  static std::pair<Value, Value>
  mergeWarps(ForwardEmitter &e, const WarpMerge &w, Value m, Value l, Value acc,
             function_ref<void(Value, Value, Value)> element) {
    Value c0 = e.cIndex(0), c1 = e.cIndex(1), cWarps = e.cIndex(kAttnWarps),
          cHS = e.cIndex(e.headSize);
    gpu::BarrierOp::create(e.b);
    e.ifThen(e.cmp(arith::CmpIPredicate::eq, w.lane, c0), [&] {
      e.store(m, w.wm, {w.warp});
      e.store(l, w.wl, {w.warp});
    });
    e.ifThen(w.active, [&] {
      vector::StoreOp::create(e.b, acc, w.wacc,
                              ValueRange{e.add(e.mul(w.warp, cHS), w.el)});
    });
    gpu::BarrierOp::create(e.b);
    Value ninf = e.cF32Bits(0xFF800000u), zf = e.cF32(0.0f);
    Value mall = e.forLoop(c0, cWarps, c1, {ninf},
                           [&](Value k, ValueRange mm) -> SmallVector<Value> {
                             Value mw = e.load(w.wm, {k});
                             return {arith::MaxNumFOp::create(e.b, mm[0], mw)};
                           })[0];
    Value any =
        arith::CmpFOp::create(e.b, arith::CmpFPredicate::OGT, mall, ninf);
    Value lall = e.forLoop(c0, cWarps, c1, {zf},
                           [&](Value k, ValueRange ll) -> SmallVector<Value> {
                             Value fw =
                                 mergeWeight(e, e.load(w.wm, {k}), mall, any);
                             Value lw = e.load(w.wl, {k});
                             return {math::FmaOp::create(e.b, fw, lw, ll[0])};
                           })[0];
    e.forLoop(w.tid, cHS, e.cIndex(kAttnBlock), [&](Value x) {
      Value sum =
          e.forLoop(c0, cWarps, c1, {zf},
                    [&](Value k, ValueRange aa) -> SmallVector<Value> {
                      Value fw = mergeWeight(e, e.load(w.wm, {k}), mall, any);
                      Value av = e.load(w.wacc, {e.add(e.mul(k, cHS), x)});
                      return {math::FmaOp::create(e.b, fw, av, aa[0])};
                    })[0];
      element(x, sum, lall);
    });
    return {mall, lall};
  }

  void emitRopeCosSin(ForwardEmitter &e);
  void emitRotate(ForwardEmitter &e);
  void emitWarpSum(ForwardEmitter &e);
  void emitRmsnorm(ForwardEmitter &e);
  void emitMatmul(ForwardEmitter &e, kvrt_weight_format format);
  void emitSwiglu(ForwardEmitter &e);
  void emitAddBias(ForwardEmitter &e);
  void emitStoreKV(ForwardEmitter &e);
  gpu::GPUFuncOp emitAttnTile(ForwardEmitter &e, StringRef kernelName,
                              int64_t nq);
  void emitAttnMerge(ForwardEmitter &e);
  void emitMaterialize(ForwardEmitter &e);
};

void GpuTarget::emitKernels(ForwardEmitter &e) {
  MLIRContext *ctx = e.b.getContext();
  ctx->loadDialect<gpu::GPUDialect>();
  e.module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    UnitAttr::get(ctx));
  e.b.setInsertionPointToEnd(e.module.getBody());
  kernelModule = gpu::GPUModuleOp::create(e.b, e.name("kernels"));
  kernels = Kernels();
  emitRopeCosSin(e);
  emitRotate(e);
  emitWarpSum(e);
  emitRmsnorm(e);
  for (kvrt_weight_format format : e.formats.used())
    emitMatmul(e, format);
  emitSwiglu(e);
  if (e.config.qkv_bias)
    emitAddBias(e);
  emitStoreKV(e);
  kernels.attnTile = emitAttnTile(e, "attn_tile", attnQueries(e.headSize));
  kernels.attnTileOne = emitAttnTile(e, "attn_tile_one", 1);
  // Four blocks of attn_tile_one per SM (ptxas keeps it within 128
  // registers a thread): a decode step's tiles are about 4 per SM
  // (kvir::attentionTiles).
  kernels.attnTileOne->setAttr(
      "nvvm.maxntid", e.b.getDenseI32ArrayAttr({int32_t(kAttnBlock), 1, 1}));
  kernels.attnTileOne->setAttr("nvvm.minctasm", e.b.getI32IntegerAttr(4));
  emitAttnMerge(e);
  emitMaterialize(e);
  e.b.setInsertionPointToEnd(e.module.getBody());
}

//===----------------------------------------------------------------------===//
// Device helpers
//===----------------------------------------------------------------------===//

/// (cos, sin) of RoPE pair i at position pos, in f64.
void GpuTarget::emitRopeCosSin(ForwardEmitter &e) {
  kernels.ropeCosSin =
      beginHelper(e, "rope_cs", {e.i64(), e.index()}, {e.f64(), e.f64()});
  ArrayRef<BlockArgument> arg = kernels.ropeCosSin.getArguments();
  auto [c, s] = e.ropeCosSin(arg[0], arg[1]);
  finishHelper(e, {c, s});
}

/// (a, b) rotated by (cos, sin): in f64, rounded to f32.
void GpuTarget::emitRotate(ForwardEmitter &e) {
  kernels.rotate = beginHelper(
      e, "rotate", {e.f32(), e.f32(), e.f64(), e.f64()}, {e.f32(), e.f32()});
  ArrayRef<BlockArgument> arg = kernels.rotate.getArguments();
  auto [ra, rb] = e.rotate(arg[0], arg[1], arg[2], arg[3]);
  finishHelper(e, {ra, rb});
}

/// The sum of a value over the 32 lanes of a warp, by butterfly: every lane
/// gets it, added in the same order on every lane.
void GpuTarget::emitWarpSum(ForwardEmitter &e) {
  kernels.warpSum = beginHelper(e, "warp_sum", {e.f32()}, {e.f32()});
  ArrayRef<BlockArgument> arg = kernels.warpSum.getArguments();
  Value v = arg[0];
  for (int32_t offset = kWarp / 2; offset >= 1; offset /= 2) {
    Value other = gpu::ShuffleOp::create(e.b, v, offset, int32_t(kWarp),
                                         gpu::ShuffleMode::XOR)
                      .getShuffleResult();
    v = arith::AddFOp::create(e.b, v, other);
  }
  finishHelper(e, {v});
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

/// out[t] = x[t] * rmsScale(sum x[t]^2) * w: one block of 256 threads per
/// token t (grid x); each thread's f64 partial sum to shared memory, then the
/// 256 partials added in index order by every thread (one order, one result).
void GpuTarget::emitRmsnorm(ForwardEmitter &e) {
  Type f = e.buffer(e.f32()), ix = e.index();
  MemRefType partials = workgroupBuffer(e, kBlock, e.f64());
  kernels.rmsnorm =
      beginKernel(e, "rmsnorm", {f, ix, f, ix, f, ix}, {partials});
  ArrayRef<BlockArgument> arg = kernels.rmsnorm.getArguments();
  Value x = arg[0], xoff = arg[1], w = arg[2], woff = arg[3], out = arg[4],
        ooff = arg[5];
  Value buf = kernels.rmsnorm.getWorkgroupAttributions()[0];
  Value c0 = e.cIndex(0), c1 = e.cIndex(1), cBlock = e.cIndex(kBlock),
        cD = e.cIndex(e.dim);
  Value t = blockId(e, gpu::Dimension::x);
  Value tid = threadId(e);
  Value row = e.mul(t, cD);
  Value xr = e.add(xoff, row);
  Value orow = e.add(ooff, row);
  Value part = e.forLoop(tid, cD, cBlock, {e.cF64(0.0)},
                         [&](Value i, ValueRange acc) -> SmallVector<Value> {
                           Value v = e.load(x, {e.add(xr, i)});
                           Value vd = arith::ExtFOp::create(e.b, e.f64(), v);
                           Value sq = arith::MulFOp::create(e.b, vd, vd);
                           return {arith::AddFOp::create(e.b, acc[0], sq)};
                         })[0];
  e.store(part, buf, {tid});
  gpu::BarrierOp::create(e.b);
  Value sum = e.forLoop(c0, cBlock, c1, {e.cF64(0.0)},
                        [&](Value i, ValueRange acc) -> SmallVector<Value> {
                          Value v = e.load(buf, {i});
                          return {arith::AddFOp::create(e.b, acc[0], v)};
                        })[0];
  Value scale = e.rmsScale(sum);
  e.forLoop(tid, cD, cBlock, [&](Value i) {
    Value v = e.load(x, {e.add(xr, i)});
    Value wv = e.load(w, {e.add(woff, i)});
    e.store(e.rmsApply(v, wv, scale), out, {e.add(orow, i)});
  });
  finishKernel(e);
}

/// c[t][o] (+)= sum_i a[t][i] * b[o][i], the weights [out][in] row-major: a
/// warp per output row o and 4 tokens (each weight element loaded once for
/// the 4), lanes striding over the row (coalesced), FMAs, a butterfly sum.
/// Blocks of 8 warps: grid (ceil(M / 8), ceil(n / 4)). f32 weights are
/// `matmul` (floats at an element offset); another format is
/// `matmul_<format>` over the weights' bytes at a byte offset, each lane
/// widening its elements from their blocks.
void GpuTarget::emitMatmul(ForwardEmitter &e, kvrt_weight_format format) {
  bool f32 = format == KVRT_WEIGHT_F32;
  Type f = e.buffer(e.f32()), ix = e.index();
  Type w = f32 ? f : e.buffer(e.byte());
  std::string name =
      f32 ? "matmul" : std::string("matmul_") + kvrt::weightFormatName(format);
  gpu::GPUFuncOp kernel = kernels.matmul[format] =
      beginKernel(e, name, {f, ix, w, ix, f, ix, ix, ix, ix, e.i32()});
  ArrayRef<BlockArgument> arg = kernel.getArguments();
  Value a = arg[0], aoff = arg[1], b = arg[2], boff = arg[3], c = arg[4],
        coff = arg[5], n = arg[6], m = arg[7], kdim = arg[8], accum = arg[9];
  Value c0 = e.cIndex(0), c1 = e.cIndex(1), cWarp = e.cIndex(kWarp),
        cTokens = e.cIndex(kMatmulTokens);
  Value zf = e.cF32(0.0f);
  Value tid = threadId(e);
  Value bx = blockId(e, gpu::Dimension::x);
  Value by = blockId(e, gpu::Dimension::y);
  Value warp = e.divu(tid, cWarp);
  Value lane = e.remu(tid, cWarp);
  Value o = e.add(e.mul(bx, e.cIndex(kMatmulRows)), warp);
  Value t0 = e.mul(by, cTokens);
  e.ifThen(e.cmp(arith::CmpIPredicate::ult, o, m), [&] {
    // Tokens past the end re-read the last row; their sums are not stored.
    Value last = e.sub(n, c1);
    SmallVector<Value> rows;
    for (int64_t j = 0; j < kMatmulTokens; ++j) {
      Value tj = j == 0 ? t0 : e.minu(e.add(t0, e.cIndex(j)), last);
      rows.push_back(e.add(aoff, e.mul(tj, kdim)));
    }
    kvrt::BlockLayout block = kvrt::blockLayout(format);
    Value rowSize = f32 ? kdim
                        : e.mul(e.divu(kdim, e.cIndex(block.elements)),
                                e.cIndex(block.bytes));
    Value rb = e.add(boff, e.mul(o, rowSize));
    SmallVector<Value> inits(kMatmulTokens, zf);
    SmallVector<Value> partial = e.forLoop(
        lane, kdim, cWarp, inits,
        [&](Value i, ValueRange sums) -> SmallVector<Value> {
          Value bv = f32 ? e.load(b, {e.add(rb, i)})
                         : e.weightElement(format, b, rb, i);
          SmallVector<Value> xs, next;
          for (Value row : rows)
            xs.push_back(e.load(a, {e.add(row, i)}));
          for (int64_t j = 0; j < kMatmulTokens; ++j)
            next.push_back(math::FmaOp::create(e.b, xs[j], bv, sums[j]));
          return next;
        });
    SmallVector<Value> dots;
    for (Value p : partial)
      dots.push_back(func::CallOp::create(e.b, kernels.warpSum, ValueRange{p})
                         .getResult(0));
    Value lead = e.cmp(arith::CmpIPredicate::eq, lane, c0);
    Value add = e.cmp(arith::CmpIPredicate::ne, accum, e.cI32(0));
    e.ifThen(lead, [&] {
      Value ob = e.add(coff, o);
      e.forLoop(c0, cTokens, c1, [&](Value j) {
        Value tj = e.add(t0, j);
        e.ifThen(e.cmp(arith::CmpIPredicate::ult, tj, n), [&] {
          // dots[j] without dynamic indexing of registers.
          Value v = dots[kMatmulTokens - 1];
          for (int64_t jj = kMatmulTokens - 2; jj >= 0; --jj)
            v = e.select(e.cmp(arith::CmpIPredicate::eq, j, e.cIndex(jj)),
                         dots[jj], v);
          Value ci = e.add(ob, e.mul(tj, m));
          e.ifElse(
              add,
              [&] {
                Value old = e.load(c, {ci});
                e.store(arith::AddFOp::create(e.b, old, v), c, {ci});
              },
              [&] { e.store(v, c, {ci}); });
        });
      });
    });
  });
  finishKernel(e);
}

/// h1 = silu(h1) * h3 over `count` elements, one thread each.
void GpuTarget::emitSwiglu(ForwardEmitter &e) {
  Type f = e.buffer(e.f32()), ix = e.index();
  kernels.swiglu = beginKernel(e, "swiglu", {f, ix, f, ix, ix});
  ArrayRef<BlockArgument> arg = kernels.swiglu.getArguments();
  Value h1 = arg[0], h1off = arg[1], h3 = arg[2], h3off = arg[3],
        count = arg[4];
  Value tid = threadId(e);
  Value bx = blockId(e, gpu::Dimension::x);
  Value i = e.add(e.mul(bx, e.cIndex(kBlock)), tid);
  e.ifThen(e.cmp(arith::CmpIPredicate::ult, i, count), [&] {
    Value ia = e.add(h1off, i);
    Value h = e.load(h1, {ia});
    Value g = e.load(h3, {e.add(h3off, i)});
    e.store(e.swiglu(h, g), h1, {ia});
  });
  finishKernel(e);
}

/// c[t][j] += b[j] for j < m: block (x, t) adds to row t, one thread per
/// column.
void GpuTarget::emitAddBias(ForwardEmitter &e) {
  Type f = e.buffer(e.f32()), ix = e.index();
  kernels.addBias = beginKernel(e, "add_bias", {f, ix, f, ix, ix});
  ArrayRef<BlockArgument> arg = kernels.addBias.getArguments();
  Value c = arg[0], cOff = arg[1], b = arg[2], bOff = arg[3], m = arg[4];
  Value t = blockId(e, gpu::Dimension::y);
  Value j = e.add(e.mul(blockId(e, gpu::Dimension::x), e.cIndex(kBlock)),
                  threadId(e));
  e.ifThen(e.cmp(arith::CmpIPredicate::ult, j, m), [&] {
    Value at = e.add(cOff, e.add(e.mul(t, m), j));
    Value sum = arith::AddFOp::create(e.b, e.load(c, {at}),
                                      e.load(b, {e.add(bOff, j)}));
    e.store(sum, c, {at});
  });
  finishKernel(e);
}

/// One RoPE pair (ia, ib) of a key rotated by (cos, sin) = `cs` from
/// kSrc[kFrom + ·] to kv[kTo + ·], and the same pair of its value copied
/// from vSrc[vFrom + ·] to kv[vTo + ·]: the store of store_kv and of
/// materialize.
void storeRotatedPair(ForwardEmitter &e, func::FuncOp rotate, Value kSrc,
                      Value kFrom, Value vSrc, Value vFrom, Value kv, Value kTo,
                      Value vTo, Value ia, Value ib, func::CallOp cs) {
  // A source is f32 (a new token's K/V) or the pages (materialize); the
  // pages hold the K/V element type: widened on load, rounded on store.
  auto loadF32 = [&](Value src, Value at) {
    Value x = e.load(src, {at});
    return x.getType().isF32() ? x : e.fromKV(x);
  };
  auto storeKV = [&](Value x, Value at) { e.store(e.toKV(x), kv, {at}); };
  Value xa = loadF32(kSrc, e.add(kFrom, ia));
  Value xb = loadF32(kSrc, e.add(kFrom, ib));
  auto rot = func::CallOp::create(
      e.b, rotate, ValueRange{xa, xb, cs.getResult(0), cs.getResult(1)});
  storeKV(rot.getResult(0), e.add(kTo, ia));
  storeKV(rot.getResult(1), e.add(kTo, ib));
  // V is copied: from the pages as stored, bit for bit.
  auto copyV = [&](Value at, Value to) {
    Value x = e.load(vSrc, {at});
    e.store(x.getType() == e.kvElement() ? x : e.toKV(x), kv, {to});
  };
  copyV(e.add(vFrom, ia), e.add(vTo, ia));
  copyV(e.add(vFrom, ib), e.add(vTo, ib));
}

/// The new K of token t (grid x), KV head g (grid y) rotated to position
/// pos + t, and K and V written into the pages of the last run of the table:
/// one thread per RoPE pair (head_size / 2 threads).
void GpuTarget::emitStoreKV(ForwardEmitter &e) {
  Type f = e.buffer(e.f32()), ix = e.index();
  kernels.storeKV =
      beginKernel(e, "store_kv",
                  {f, ix, f, ix, e.i64(), e.buffer(e.kvElement()),
                   e.buffer(e.i32()), e.table(KVRT_RUN_WIDTH), ix, ix});
  ArrayRef<BlockArgument> arg = kernels.storeKV.getArguments();
  Value kin = arg[0], koff = arg[1], vin = arg[2], voff = arg[3], pos = arg[4],
        kv = arg[5], pages = arg[6], runs = arg[7], layer = arg[8], pt = arg[9];
  Value c0 = e.cIndex(0), c1 = e.cIndex(1), cHS = e.cIndex(e.headSize);
  Value t = blockId(e, gpu::Dimension::x);
  Value g = blockId(e, gpu::Dimension::y);
  Value i = threadId(e);
  auto [ia, ib] = e.ropePair(i);
  PageStrides strides = e.pageStrides(pt);
  Value last = e.sub(memref::DimOp::create(e.b, runs, c0), c1);
  RunRow run = e.loadRun(runs, last);
  Value slot = e.add(e.toIndex(run.slotBegin), t);
  Value page = e.pageId(pages, e.toIndex(run.pageOffset), e.divu(slot, pt));
  Value kb =
      e.add(e.headBase(strides, page, layer, g), e.mul(e.remu(slot, pt), cHS));
  Value vb = e.add(kb, strides.kv);
  Value row = e.add(e.mul(t, e.cIndex(e.kvDim)), e.mul(g, cHS));
  Value krow = e.add(koff, row), vrow = e.add(voff, row);
  Value p = arith::AddIOp::create(e.b, pos, e.toI64(t));
  auto cs = func::CallOp::create(e.b, kernels.ropeCosSin, ValueRange{p, i});
  storeRotatedPair(e, kernels.rotate, kin, krow, vin, vrow, kv, kb, vb, ia, ib,
                   cs);
  finishKernel(e);
}

/// Attention of the groups of queries [Q g, Q g + Q) (Q = attnQueries) for g
/// = z, z + Z, ... (grid z, of Z <= 65535 blocks), head h (grid y) over one
/// run tile (grid x): keys [key_begin, key_end) of run `run` (a row of
/// `tiles`). Each query is rotated once to m - Δ of the run ((R(m)q)·(R(Δ)k)
/// = (R(m-Δ)q)·k; keys are never rewritten) into shared memory; the keys
/// that count are a prefix of the run (visibleKeys). Four warps take every
/// fourth batch of B keys (attnBatch), each lane holding ceil(head_size /
/// 32) elements of the head (one coalesced load per key and warp, the
/// batch's loads issued together and shared by the group's queries), with
/// an online softmax per warp and query, a batch at a time; per query, the
/// warps merge in shared memory and the tile's (max, sum,
/// accumulator[head_size]) goes to `part` for attn_merge. A query's
/// arithmetic does not depend on its group: a key past its causal limit
/// weighs nothing, and a batch past it is skipped (a warp-uniform branch).
gpu::GPUFuncOp GpuTarget::emitAttnTile(ForwardEmitter &e, StringRef kernelName,
                                       int64_t nq) {
  Type f = e.buffer(e.f32()), ix = e.index();
  int64_t epl = elementsPerLane(e.headSize);
  const int64_t nb = attnBatch(e.headSize, nq);
  MemRefType qType = workgroupBuffer(e, nq * e.headSize, e.f32());
  MemRefType warpType = workgroupBuffer(e, kAttnWarps, e.f32());
  MemRefType accType = workgroupBuffer(e, kAttnWarps * e.headSize, e.f32());
  gpu::GPUFuncOp kernel = beginKernel(
      e, kernelName,
      {f, ix, e.i64(), e.buffer(e.kvElement()), e.buffer(e.i32()),
       e.table(KVRT_RUN_WIDTH), e.table(KVRT_TILE_WIDTH), ix, ix, ix, f, ix},
      {qType, warpType, warpType, accType});
  ArrayRef<BlockArgument> arg = kernel.getArguments();
  Value q = arg[0], qoff = arg[1], pos = arg[2], kv = arg[3], pages = arg[4],
        runs = arg[5], tiles = arg[6], ntiles = arg[7], layer = arg[8],
        pt = arg[9], part = arg[10], n = arg[11];
  ArrayRef<BlockArgument> shared = kernel.getWorkgroupAttributions();
  Value qs = shared[0], wm = shared[1], wl = shared[2], wacc = shared[3];
  Value c0 = e.cIndex(0), c1 = e.cIndex(1), c2 = e.cIndex(2),
        cBlock = e.cIndex(kAttnBlock), cHS = e.cIndex(e.headSize),
        cHS2 = e.cIndex(e.headSize + 2), cQ = e.cIndex(nq);
  Value scale = e.scoreScale();
  Value ninf = e.cF32Bits(0xFF800000u), zf = e.cF32(0.0f);
  VectorType vEPL = e.vec(epl, e.f32());
  Value zv = e.splatF32(epl, 0.0f);
  Value tile = blockId(e, gpu::Dimension::x);
  Value h = blockId(e, gpu::Dimension::y);
  WarpMerge merge = warpRoles(e, wm, wl, wacc);
  Value tid = merge.tid, warp = merge.warp, active = merge.active,
        el = merge.el;
  Value r = e.toIndex(e.load(tiles, {tile, c0}));
  Value keyBegin = e.load(tiles, {tile, c1});
  Value keyEnd = e.load(tiles, {tile, c2});
  RunRow run = e.loadRun(runs, r);
  Value kbeg = e.toIndex(keyBegin);
  Value pageOffset = e.toIndex(run.pageOffset);
  Value slotBegin = e.toIndex(run.slotBegin);
  PageStrides strides = e.pageStrides(pt);
  Value g = e.divu(h, e.cIndex(e.group));
  // The shared buffers are reused without a barrier of their own: qs is
  // read only before the first merge's barriers, and each merge writes wm,
  // wl, wacc only after a barrier that follows the previous merge's reads.
  Value z = blockId(e, gpu::Dimension::z);
  Value gridZ = gpu::GridDimOp::create(e.b, gpu::Dimension::z);
  Value groups = e.divu(e.add(n, e.sub(cQ, c1)), cQ);
  e.forLoop(z, groups, gridZ, [&](Value group) {
    // Query i of the group: its token, whether it exists, the end of its
    // keys in the tile (the tile's start when it has none).
    SmallVector<Value> ts, valid, kends;
    Value kmax = kbeg;
    for (int64_t i = 0; i < nq; ++i) {
      Value t = e.add(e.mul(group, cQ), e.cIndex(i));
      Value m = arith::AddIOp::create(e.b, pos, e.toI64(t));
      Value ok = e.cmp(arith::CmpIPredicate::ult, t, n);
      Value kend =
          e.select(ok, e.toIndex(e.mins(keyEnd, e.visibleKeys(m, run))), kbeg);
      ts.push_back(t);
      valid.push_back(ok);
      kends.push_back(kend);
      kmax = e.maxu(kmax, kend);
      // The query rotated to m - Δ, into shared memory.
      e.ifThen(ok, [&] {
        Value qp = arith::SubIOp::create(e.b, m, run.delta);
        Value qrow =
            e.add(e.add(qoff, e.mul(t, e.cIndex(e.dim))), e.mul(h, cHS));
        Value qsrow = e.cIndex(i * e.headSize);
        e.forLoop(tid, e.cIndex(e.half), cBlock, [&](Value pair) {
          auto [ia, ib] = e.ropePair(pair);
          auto cs = func::CallOp::create(e.b, kernels.ropeCosSin,
                                         ValueRange{qp, pair});
          Value xa = e.load(q, {e.add(qrow, ia)});
          Value xb = e.load(q, {e.add(qrow, ib)});
          auto rot = func::CallOp::create(
              e.b, kernels.rotate,
              ValueRange{xa, xb, cs.getResult(0), cs.getResult(1)});
          e.store(rot.getResult(0), qs, {e.add(qsrow, ia)});
          e.store(rot.getResult(1), qs, {e.add(qsrow, ib)});
        });
      });
    }
    gpu::BarrierOp::create(e.b);
    SmallVector<Value> qvs, inits;
    for (int64_t i = 0; i < nq; ++i) {
      qvs.push_back(e.ifThenElse(
          active, {vEPL},
          [&]() -> SmallVector<Value> {
            return {vector::LoadOp::create(
                e.b, vEPL, qs,
                ValueRange{e.add(e.cIndex(i * e.headSize), el)})};
          },
          [&]() -> SmallVector<Value> { return {zv}; })[0]);
      inits.append({ninf, zf, zv});
    }
    // A lane's slice starts at a multiple of epl elements from the arena's
    // start (every page stride is a multiple of head_size, and the driver
    // aligns allocations to 256 bytes): one vector load per slice, not epl
    // scalar ones (ld.global.v4 for 4 f32). epl & -epl: the largest power
    // of 2 dividing epl.
    int64_t elementBytes = e.kvElement().getIntOrFloatBitWidth() / 8;
    int64_t sliceAlign = std::min<int64_t>(16, elementBytes * (epl & -epl));
    // Warp w takes the batches of keys starting at kbeg + B w, B (w + 4),
    // ...: a batch's K and V are loaded before any is used. A key past the
    // tile's last is loaded clamped to it and weighs nothing.
    Value cB = e.cIndex(nb), cStride = e.cIndex(kAttnWarps * nb);
    Value kLast = e.sub(kmax, c1);
    // Where this lane's slice of key j (clamped to the last) starts; V is
    // strides.kv further.
    auto keyAddress = [&](Value j) {
      Value slot = e.add(slotBegin, e.minu(j, kLast));
      Value page = e.pageId(pages, pageOffset, e.divu(slot, pt));
      return e.add(e.add(e.headBase(strides, page, layer, g),
                         e.mul(e.remu(slot, pt), cHS)),
                   el);
    };
    SmallVector<Value> res = e.forLoop(
        e.add(kbeg, e.mul(warp, cB)), kmax, cStride, inits,
        [&](Value j0, ValueRange it) -> SmallVector<Value> {
          SmallVector<Value> keys, kAddr, vAddr;
          for (int64_t u = 0; u < nb; ++u) {
            Value j = e.add(j0, e.cIndex(u));
            Value ka = keyAddress(j);
            keys.push_back(j);
            kAddr.push_back(ka);
            vAddr.push_back(e.add(ka, strides.kv));
          }
          SmallVector<Type> kvTypes(2 * nb, vEPL);
          SmallVector<Value> kvv = e.ifThenElse(
              active, kvTypes,
              [&]() -> SmallVector<Value> {
                VectorType stored = vEPL.clone(e.kvElement());
                SmallVector<Value> loaded;
                for (int64_t u = 0; u < nb; ++u)
                  for (Value at : {kAddr[u], vAddr[u]})
                    loaded.push_back(e.fromKV(vector::LoadOp::create(
                        e.b, stored, kv, ValueRange{at}, /*nontemporal=*/false,
                        llvm::MaybeAlign(sliceAlign))));
                return loaded;
              },
              [&]() -> SmallVector<Value> {
                return SmallVector<Value>(2 * nb, zv);
              });
          SmallVector<Value> values;
          for (int64_t u = 0; u < nb; ++u)
            values.push_back(kvv[2 * u + 1]);
          SmallVector<Value> next;
          for (int64_t i = 0; i < nq; ++i) {
            Value mr = it[3 * i], lr = it[3 * i + 1], ar = it[3 * i + 2];
            // A warp-uniform branch: a query whose keys end before the
            // batch (one that does not exist included) skips it.
            Value sees = e.cmp(arith::CmpIPredicate::ult, j0, kends[i]);
            next.append(e.ifThenElse(
                sees, {e.f32(), e.f32(), vEPL},
                [&]() -> SmallVector<Value> {
                  SmallVector<Value> scores;
                  for (int64_t u = 0; u < nb; ++u) {
                    Value pr = arith::MulFOp::create(e.b, qvs[i], kvv[2 * u]);
                    Value lsum = vector::ReductionOp::create(
                        e.b, vector::CombiningKind::ADD, pr);
                    Value dot = func::CallOp::create(e.b, kernels.warpSum,
                                                     ValueRange{lsum})
                                    .getResult(0);
                    Value sc = arith::MulFOp::create(e.b, dot, scale);
                    Value in =
                        e.cmp(arith::CmpIPredicate::ult, keys[u], kends[i]);
                    scores.push_back(e.select(in, sc, ninf));
                  }
                  return softmaxBatch(e, mr, lr, ar, scores, {}, values);
                },
                [&]() -> SmallVector<Value> {
                  return {mr, lr, ar};
                }));
          }
          return next;
        });
    for (int64_t i = 0; i < nq; ++i) {
      e.ifThen(valid[i], [&] {
        Value th = e.add(e.mul(ts[i], e.cIndex(e.heads)), h);
        Value pbase = e.mul(e.add(e.mul(th, ntiles), tile), cHS2);
        Value pacc = e.add(pbase, c2);
        std::pair<Value, Value> merged =
            mergeWarps(e, merge, res[3 * i], res[3 * i + 1], res[3 * i + 2],
                       [&](Value x, Value acc, Value) {
                         e.store(acc, part, {e.add(pacc, x)});
                       });
        e.ifThen(e.cmp(arith::CmpIPredicate::eq, tid, c0), [&] {
          e.store(merged.first, part, {pbase});
          e.store(merged.second, part, {e.add(pbase, c1)});
        });
      });
    }
  });
  finishKernel(e);
  return kernel;
}

/// The tiles of head h (grid x), queries t = y, y + Y, ... < n (grid y, of
/// Y <= 65535 blocks) merged (flash decoding): warp w takes the batches of
/// tiles starting at B w, B (w + 4), ..., each tile's (max, sum,
/// accumulator) folded into an online softmax as a batch of attn_tile's
/// keys is, and the four warps merged under their global max; a head that
/// saw no key gets zeros.
void GpuTarget::emitAttnMerge(ForwardEmitter &e) {
  Type f = e.buffer(e.f32()), ix = e.index();
  int64_t epl = elementsPerLane(e.headSize);
  const int64_t nb = mergeBatch(e.headSize);
  MemRefType warpType = workgroupBuffer(e, kAttnWarps, e.f32());
  MemRefType accType = workgroupBuffer(e, kAttnWarps * e.headSize, e.f32());
  kernels.attnMerge = beginKernel(e, "attn_merge", {f, ix, f, ix, ix},
                                  {warpType, warpType, accType});
  ArrayRef<BlockArgument> arg = kernels.attnMerge.getArguments();
  Value part = arg[0], ntiles = arg[1], out = arg[2], ooff = arg[3], n = arg[4];
  ArrayRef<BlockArgument> shared = kernels.attnMerge.getWorkgroupAttributions();
  Value c1 = e.cIndex(1), c2 = e.cIndex(2), cHS = e.cIndex(e.headSize),
        cHS2 = e.cIndex(e.headSize + 2), cB = e.cIndex(nb);
  Value ninf = e.cF32Bits(0xFF800000u), zf = e.cF32(0.0f);
  VectorType vEPL = e.vec(epl, e.f32());
  Value zv = e.splatF32(epl, 0.0f);
  Value h = blockId(e, gpu::Dimension::x);
  WarpMerge merge = warpRoles(e, shared[0], shared[1], shared[2]);
  Value tLast = e.sub(ntiles, c1);
  Value y = blockId(e, gpu::Dimension::y);
  Value gridY = gpu::GridDimOp::create(e.b, gpu::Dimension::y);
  e.forLoop(y, n, gridY, [&](Value t) {
    Value th = e.add(e.mul(t, e.cIndex(e.heads)), h);
    Value base = e.mul(e.mul(th, ntiles), cHS2);
    SmallVector<Value> res = e.forLoop(
        e.mul(merge.warp, cB), ntiles, e.cIndex(kAttnWarps * nb),
        {ninf, zf, zv}, [&](Value k0, ValueRange it) -> SmallVector<Value> {
          SmallVector<Value> scores, masses, accs;
          for (int64_t u = 0; u < nb; ++u) {
            Value k = e.add(k0, e.cIndex(u));
            Value pi = e.add(base, e.mul(e.minu(k, tLast), cHS2));
            Value mk = e.load(part, {pi});
            Value in = e.cmp(arith::CmpIPredicate::ult, k, ntiles);
            scores.push_back(e.select(in, mk, ninf));
            masses.push_back(e.load(part, {e.add(pi, c1)}));
            accs.push_back(e.ifThenElse(
                merge.active, {vEPL},
                [&]() -> SmallVector<Value> {
                  return {vector::LoadOp::create(
                      e.b, vEPL, part,
                      ValueRange{e.add(e.add(pi, c2), merge.el)})};
                },
                [&]() -> SmallVector<Value> { return {zv}; })[0]);
          }
          return softmaxBatch(e, it[0], it[1], it[2], scores, masses, accs);
        });
    Value orow = e.add(e.add(ooff, e.mul(t, e.cIndex(e.dim))), e.mul(h, cHS));
    mergeWarps(
        e, merge, res[0], res[1], res[2], [&](Value x, Value acc, Value l) {
          Value inv = e.softmaxNormalizer(l);
          e.store(arith::MulFOp::create(e.b, acc, inv), out, {e.add(orow, x)});
        });
  });
  finishKernel(e);
}

/// Every run of the table (grid x) written to the pages `dst_pages`
/// (parallel to `pages`, same slots), at layer l (grid y) and KV head g
/// (grid z): K rotated once by the run's Δ (R(Δ) k, angles in f64 from the
/// integer Δ), V copied. Thread = RoPE pair i x token lane: the pair's cos
/// and sin are computed once per thread, and the token lanes stride over the
/// run's tokens, whose count only the device knows.
void GpuTarget::emitMaterialize(ForwardEmitter &e) {
  Type ix = e.index();
  kernels.materialize =
      beginKernel(e, "materialize",
                  {e.buffer(e.kvElement()), e.buffer(e.i32()),
                   e.table(KVRT_RUN_WIDTH), e.buffer(e.i32()), ix});
  ArrayRef<BlockArgument> arg = kernels.materialize.getArguments();
  Value kv = arg[0], pages = arg[1], runs = arg[2], dstPages = arg[3],
        pt = arg[4];
  Value cHS = e.cIndex(e.headSize), cHalf = e.cIndex(e.half);
  Value r = blockId(e, gpu::Dimension::x);
  Value l = blockId(e, gpu::Dimension::y);
  Value g = blockId(e, gpu::Dimension::z);
  Value tid = threadId(e);
  Value i = e.remu(tid, cHalf);
  Value tokenLane = e.divu(tid, cHalf);
  std::pair<Value, Value> pair = e.ropePair(i);
  Value ia = pair.first, ib = pair.second;
  PageStrides strides = e.pageStrides(pt);
  RunRow run = e.loadRun(runs, r);
  Value pageOffset = e.toIndex(run.pageOffset);
  Value slotBegin = e.toIndex(run.slotBegin);
  auto cs =
      func::CallOp::create(e.b, kernels.ropeCosSin, ValueRange{run.delta, i});
  e.forLoop(tokenLane, e.toIndex(run.nTokens),
            e.cIndex(materializeTokenLanes(e)), [&](Value j) {
              Value slot = e.add(slotBegin, j);
              Value pi = e.divu(slot, pt);
              Value slotOffset = e.mul(e.remu(slot, pt), cHS);
              Value src = e.pageId(pages, pageOffset, pi);
              Value dst = e.pageId(dstPages, pageOffset, pi);
              Value ko = e.add(e.headBase(strides, src, l, g), slotOffset);
              Value kd = e.add(e.headBase(strides, dst, l, g), slotOffset);
              storeRotatedPair(e, kernels.rotate, kv, ko, kv,
                               e.add(ko, strides.kv), kv, kd,
                               e.add(kd, strides.kv), ia, ib, cs);
            });
  finishKernel(e);
}

} // namespace

std::unique_ptr<ForwardTarget> mlir::kv::createGpuTarget() {
  return std::make_unique<GpuTarget>();
}

void mlir::kv::registerGpuForwardDialects(DialectRegistry &registry) {
  registry.insert<gpu::GPUDialect>();
}
