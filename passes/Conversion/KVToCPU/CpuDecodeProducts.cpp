//===- CpuDecodeProducts.cpp - A decode step's products, fused --*- C++ -*-===//
//
// A decode step of one token is a string of short parallel loops: a matmul
// each for the query, the key and the value, one each for the gate and the
// up projection, one for the SwiGLU between them. Each loop ends with the
// threads waiting for the last one's block, and each integer-dot matmul
// quantises the same input again. The products of one input are fused here:
// the query, key and value as one loop over the decode tiles of all three
// (ForwardTarget::products), the gate and up projections as one loop over
// the tiles of the hidden rows, a claimed block's gate tiles stored and then
// its up tiles combined with them as silu(gate) * up
// (ForwardTarget::gatedProduct), the input quantised once (twice where Q8_0
// weights and K-quants share it: a scale per 32 and per 256). A tile's sums
// are the matmul kernels' own (int8DecodeSums, emitQuantDots), so the
// results are theirs bit for bit. Prefill keeps the matmul kernels (CpuTarget
// picks per call by the row count).
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/KVToCPU/CpuKernels.h"
#include "passes/Conversion/KVToCPU/CpuParallel.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"

using namespace mlir;
using namespace mlir::kv;
using namespace mlir::kv::cpu;

namespace {

/// Which quantised activations a product's kernels take: a scale per 32
/// elements (Q8_0), per 256 (the K-quants), or both (a mix of them).
struct InputNeeds {
  bool act = false, actK = false;
  /// The instructions of the kernels that read them (one target's: all the
  /// same).
  Int8Isa isa = Int8Isa::Vnni512;
};
InputNeeds needsOf(ArrayRef<DecodeKernel> kernels) {
  InputNeeds needs;
  for (const DecodeKernel &kernel : kernels)
    if (kernel.int8) {
      (int8ScaleBlock(kernel.format) == 256 ? needs.actK : needs.act) = true;
      needs.isa = kernel.isa;
    }
  return needs;
}

/// The captures that carry a DecodeInput into a task: a, then the buffers
/// of the activations it needs.
SmallVector<Value> inputCaptures(const DecodeInput &in, InputNeeds needs) {
  SmallVector<Value> captures{in.a};
  if (needs.act)
    captures.append(in.act.buffers());
  if (needs.actK)
    captures.append(in.actK.buffers());
  return captures;
}

/// The DecodeInput of a task from the captures inputCaptures made, which
/// it drops from the front of `v`.
DecodeInput unpackInput(ForwardEmitter &e, ValueRange &v, InputNeeds needs) {
  DecodeInput in;
  in.a = v[0];
  in.n = memref::DimOp::create(e.b, in.a, e.cIndex(0));
  in.k = memref::DimOp::create(e.b, in.a, e.cIndex(1));
  v = v.drop_front(1);
  auto take = [&](Int8Activations &act, int64_t scaleBlock) {
    act = Int8Activations::fromBuffers(e, v, in.k, scaleBlock);
    v = v.drop_front(act.buffers().size());
  };
  if (needs.act)
    take(in.act, 32);
  if (needs.actK)
    take(in.actK, 256);
  return in;
}

/// Allocates the activations of `a` that `needs` names and quantises them
/// (a decode step's few rows: on the calling thread).
DecodeInput prepareInput(ForwardEmitter &e, Value a, InputNeeds needs) {
  DecodeInput in;
  in.a = a;
  in.n = memref::DimOp::create(e.b, a, e.cIndex(0));
  in.k = memref::DimOp::create(e.b, a, e.cIndex(1));
  auto quantise = [&](Int8Activations &act, int64_t scaleBlock) {
    act = allocInt8Activations(e, in.n, in.n, in.k, scaleBlock);
    emitQuantizeRows(e, a, act, e.cIndex(0), in.n, needs.isa);
  };
  if (needs.act)
    quantise(in.act, 32);
  if (needs.actK)
    quantise(in.actK, 256);
  return in;
}

/// Frees what prepareInput allocated.
void releaseInput(ForwardEmitter &e, const DecodeInput &in, InputNeeds needs) {
  if (needs.act)
    freeInt8Activations(e, in.act);
  if (needs.actK)
    freeInt8Activations(e, in.actK);
}

/// Decode tile `tile` of `tiles` of a weight of m rows at byte `offset`:
/// its outputs (decodeTileRow's) and the byte offsets of their rows, an
/// output past m reading the last row (and not stored). Over repacked rows:
/// the outputs of its groups (group j is tile + j tiles) and the byte
/// offsets of the groups, a group past the last reading the last.
struct DecodeTile {
  SmallVector<Value> outputs, rows;
};
DecodeTile decodeTile(ForwardEmitter &e, const DecodeKernel &kernel,
                      const DecodeInput &in, Value offset, Value m, Value tile,
                      Value tiles) {
  DecodeTile result;
  Value rowBytes = weightRowBytes(e, kernel.format, in.k);
  if (kernel.repacked) {
    Value groupRows = e.cIndex(kvrt::kQ8Rows16);
    Value lastGroup =
        e.sub(e.divu(e.add(m, e.cIndex(kvrt::kQ8Rows16 - 1)), groupRows),
              e.cIndex(1));
    Value groupBytes =
        e.mul(e.divu(in.k, e.cIndex(kvrt::blockLayout(kernel.format).elements)),
              e.cIndex(kvrt::decodeGroupBlockBytes(kernel.format)));
    for (int64_t j = 0; j < kRepackedTileGroups; ++j) {
      Value group = e.add(tile, e.mul(tiles, e.cIndex(j)));
      result.rows.push_back(
          e.add(offset, e.mul(e.minu(group, lastGroup), groupBytes)));
      for (int64_t lane = 0; lane < kvrt::kQ8Rows16; ++lane)
        result.outputs.push_back(
            e.add(e.mul(group, groupRows), e.cIndex(lane)));
    }
    return result;
  }
  Value last = e.sub(m, e.cIndex(1));
  for (int64_t r = 0; r < kernel.tileRows(); ++r) {
    Value output = decodeTileRow(e, tile, tiles, r);
    result.outputs.push_back(output);
    result.rows.push_back(e.add(offset, e.mul(e.minu(output, last), rowBytes)));
  }
  return result;
}

/// Token t's sums with each row of `tile`.
SmallVector<Value> tileSums(ForwardEmitter &e, const DecodeKernel &kernel,
                            const DecodeInput &in, Value bytes,
                            const DecodeTile &tile, Value t) {
  if (kernel.repacked)
    return emitRepackedDecodeTile(e, kernel.format, bytes,
                                  in.activationsFor(kernel.format), in.k, t,
                                  tile.rows);
  if (kernel.int8)
    return int8DecodeSums(e, kernel.format, bytes,
                          in.activationsFor(kernel.format), in.k, t, tile.rows,
                          kernel.isa, kernel.farPrefetch);
  return emitQuantDots(e, kernel.format, in.a, bytes, tile.rows, t, in.k,
                       kernel.farPrefetch);
}

} // namespace

Value cpu::decodeTileCount(ForwardEmitter &e, const DecodeKernel &kernel,
                           Value m) {
  Value rows = e.cIndex(kernel.tileRows());
  return e.divu(e.add(m, e.sub(rows, e.cIndex(1))), rows);
}

void cpu::emitDecodeTiles(ForwardEmitter &e, const DecodeKernel &kernel,
                          const DecodeInput &in, Value bytes, Value offset,
                          Value c, Value lo, Value hi, bool accumulate,
                          CombineFn combine) {
  Value c1 = e.cIndex(1);
  Value m = memref::DimOp::create(e.b, c, c1);
  Value tiles = decodeTileCount(e, kernel, m);
  e.forLoop(lo, hi, c1, [&](Value t0) {
    DecodeTile tile = decodeTile(e, kernel, in, offset, m, t0, tiles);
    e.forLoop(e.cIndex(0), in.n, c1, [&](Value t) {
      SmallVector<Value> sums = tileSums(e, kernel, in, bytes, tile, t);
      for (size_t r = 0; r < sums.size(); ++r)
        e.ifThen(e.cmp(arith::CmpIPredicate::ult, tile.outputs[r], m), [&] {
          Value total = sums[r];
          if (accumulate)
            total = arith::AddFOp::create(e.b, e.load(c, {t, tile.outputs[r]}),
                                          total);
          else if (combine)
            total = combine(e.load(c, {t, tile.outputs[r]}), total);
          e.store(total, c, {t, tile.outputs[r]});
        });
    });
  });
}

std::string DecodeKernel::name() const {
  return std::string(kvrt::weightFormatName(format)) +
         (repacked ? "_rows16" : "");
}

std::string cpu::productsName(ArrayRef<DecodeKernel> kernels) {
  std::string name = "products";
  for (const DecodeKernel &kernel : kernels)
    name += "_" + kernel.name();
  return name;
}

std::string cpu::gatedName(DecodeKernel kernel) {
  return "gated_" + kernel.name();
}

void cpu::emitDecodeProducts(ForwardEmitter &e, StringRef base,
                             ArrayRef<DecodeKernel> kernels) {
  SmallVector<Type> arguments{matrixType(e)};
  for (size_t i = 0; i < kernels.size(); ++i)
    arguments.append({e.buffer(e.byte()), e.index(), matrixType(e)});
  func::FuncOp fn = e.beginFunction(e.name(base), arguments, false);
  InputNeeds needs = needsOf(kernels);
  DecodeInput in = prepareInput(e, fn.getArgument(0), needs);
  SmallVector<Value> captures = inputCaptures(in, needs);
  Value total = e.cIndex(0);
  for (size_t i = 0; i < kernels.size(); ++i) {
    Value c = fn.getArgument(3 + 3 * i);
    total = e.add(total,
                  decodeTileCount(e, kernels[i],
                                  memref::DimOp::create(e.b, c, e.cIndex(1))));
    captures.append({fn.getArgument(1 + 3 * i), fn.getArgument(2 + 3 * i), c});
  }
  // Work item j is tile j of the weights' tiles laid end to end.
  parallelFor(e, base.str() + "_task", total, captures,
              [&](ValueRange v, Value lo, Value hi) {
                DecodeInput in = unpackInput(e, v, needs);
                Value c1 = e.cIndex(1);
                Value first = e.cIndex(0);
                for (size_t i = 0; i < kernels.size(); ++i) {
                  Value bytes = v[3 * i], offset = v[3 * i + 1],
                        c = v[3 * i + 2];
                  Value m = memref::DimOp::create(e.b, c, c1);
                  Value end = e.add(first, decodeTileCount(e, kernels[i], m));
                  auto clamp = [&](Value j) {
                    return e.sub(e.minu(e.maxu(j, first), end), first);
                  };
                  emitDecodeTiles(e, kernels[i], in, bytes, offset, c,
                                  clamp(lo), clamp(hi), /*accumulate=*/false);
                  first = end;
                }
              });
  releaseInput(e, in, needs);
  e.finishFunction();
}

void cpu::emitDecodeGated(ForwardEmitter &e, StringRef base,
                          DecodeKernel kernel) {
  Type bytesType = e.buffer(e.byte());
  func::FuncOp fn = e.beginFunction(e.name(base),
                                    {matrixType(e), bytesType, e.index(),
                                     bytesType, e.index(), matrixType(e)},
                                    false);
  InputNeeds needs = needsOf(kernel);
  DecodeInput in = prepareInput(e, fn.getArgument(0), needs);
  SmallVector<Value> captures = inputCaptures(in, needs);
  for (unsigned i = 1; i <= 5; ++i)
    captures.push_back(fn.getArgument(i));
  Value h = fn.getArgument(5);
  Value tiles =
      decodeTileCount(e, kernel, memref::DimOp::create(e.b, h, e.cIndex(1)));
  parallelFor(e, base.str() + "_task", tiles, captures,
              [&](ValueRange v, Value lo, Value hi) {
                DecodeInput in = unpackInput(e, v, needs);
                Value gateBytes = v[0], gateOffset = v[1], upBytes = v[2],
                      upOffset = v[3], h = v[4];
                // The gate's tiles of the block first, into h, then the up
                // projection's, each sum combined with the gate's there: a tile
                // at a time of both would read twice the streams at once (a
                // tile's rows are decodeTileRow's), more than the prefetchers
                // follow on one core.
                emitDecodeTiles(e, kernel, in, gateBytes, gateOffset, h, lo, hi,
                                /*accumulate=*/false);
                emitDecodeTiles(
                    e, kernel, in, upBytes, upOffset, h, lo, hi,
                    /*accumulate=*/false,
                    [&](Value gate, Value up) { return e.swiglu(gate, up); });
              });
  releaseInput(e, in, needs);
  e.finishFunction();
}
