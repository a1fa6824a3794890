//===- CpuKVPages.cpp - The CPU forward's writes of K/V pages ---*- C++ -*-===//
//
// store_kv (a prefill's new K, rotated to its positions, and V into the
// pages of the new run) and materialize_kernel (shifted runs rewritten into
// new pages, K rotated once by the run's Δ), in the page layout of
// runtime/core/KVRuntime.h and the pages' element type: K is rotated in f32
// and rounded once.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/KVToCPU/CpuKernels.h"
#include "runtime/core/ForwardABI.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::kv;
using namespace mlir::kv::cpu;

/// Rotates the new K of layer `layer` to positions pos + t and writes K and
/// V into the pages of the last run of the table (the run being prefilled).
void cpu::emitStoreKV(ForwardEmitter &e) {
  Type m2 = matrixType(e), tab = ropeTableType(e), h1 = headType(e);
  func::FuncOp f = e.beginFunction(e.name("store_kv"),
                                   {m2, m2, e.i64(), e.buffer(e.kvElement()),
                                    e.buffer(e.i32()), e.table(KVRT_RUN_WIDTH),
                                    e.index(), e.index(), e.buffer(e.f64())},
                                   false);
  Value k = f.getArgument(0), v = f.getArgument(1), pos = f.getArgument(2),
        kv = f.getArgument(3), pages = f.getArgument(4),
        runs = f.getArgument(5), layer = f.getArgument(6),
        pt = f.getArgument(7), tables = f.getArgument(8);
  Value c0 = e.cIndex(0), c1 = e.cIndex(1);
  PageStrides strides = e.pageStrides(pt);
  Value nruns = memref::DimOp::create(e.b, runs, c0);
  Value last = e.sub(nruns, c1);
  RunRow run = e.loadRun(runs, last);
  Value pageOffset = e.toIndex(run.pageOffset);
  Value slotBegin = e.toIndex(run.slotBegin);
  Value n = memref::DimOp::create(e.b, k, c0);
  Value cs = memref::AllocaOp::create(e.b, cast<MemRefType>(tab));
  Value sn = memref::AllocaOp::create(e.b, cast<MemRefType>(tab));
  VectorType head = e.vec(e.headSize, e.f32());
  e.forLoop(c0, n, c1, [&](Value t) {
    Value p = arith::AddIOp::create(e.b, pos, e.toI64(t));
    // The keys' rows follow the runs' query rows (rope_rows).
    ropeRowOrTable(e, tables, e.add(e.mul(nruns, n), t), p, cs, sn);
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

/// Every run's K/V written to the pages `dst_pages` (parallel to `pages`,
/// same slots), K rotated once by the run's Δ (R(Δ) k, angles in f64), V
/// copied: the rewritten runs have offset 0 at base position base_pos + Δ.
void cpu::emitMaterialize(ForwardEmitter &e) {
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
