//===- CpuKernels.h - The CPU forward's kernels, file by file ---*- C++ -*-===//
//
// Internal to KVToCPU. The stages of CpuTarget.cpp call private functions
// ("kernels") that one file per job emits: CpuMath.cpp (rmsnorm, rope_table,
// rope_apply, swiglu, exp16), CpuMatmul.cpp (the packed and the dot-product
// matmul, and the matmul of every other weight format), CpuAttention.cpp
// (attention_kernel) and CpuKVPages.cpp (store_kv, materialize_kernel);
// CpuParallel.h is the parallel loop several of them use. This header is what
// they share: the vector width, the memref types of the kernels' arguments, the
// function being emitted and the call of a kernel.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_PASSES_CONVERSION_KVTOCPU_CPUKERNELS_H
#define KVIR_PASSES_CONVERSION_KVTOCPU_CPUKERNELS_H

#include "passes/Conversion/Forward/ForwardEmitter.h"

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
/// CpuMatmul.cpp: matmul_<format> (or _acc) of weights in a format other
/// than f32, (a, bytes, byte offset, c); quantMatmulName names it.
void emitQuantMatmul(ForwardEmitter &e, kvrt_weight_format format,
                     bool accumulate);
std::string quantMatmulName(kvrt_weight_format format, bool accumulate);
/// CpuMatmul.cpp: the same function (name, arguments, result) by integer
/// dot products on the weights' blocks, the activations quantised per block
/// of 32 to int8 (llama.cpp's Q8_0 activations): AVX-512 VNNI (vpdpbusd).
/// Only for formats where hasInt8Dot holds: Q8_0 (decode and prefill), Q4_K
/// and Q6_K (decode; their prefill widens as emitQuantMatmul's does).
void emitInt8Matmul(ForwardEmitter &e, kvrt_weight_format format,
                    bool accumulate);
bool hasInt8Dot(kvrt_weight_format format);
/// CpuMath.cpp: rope_table, rope_apply, swiglu, add_bias (configs with
/// qkv_bias only).
void emitRopeTable(ForwardEmitter &e);
void emitRopeApply(ForwardEmitter &e);
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

} // namespace mlir::kv::cpu

#endif // KVIR_PASSES_CONVERSION_KVTOCPU_CPUKERNELS_H
