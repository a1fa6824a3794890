//===- CpuTarget.h - The forward's stages on a CPU --------------*- C++ -*-===//
//
// The CPU mapping of the forward (ForwardTarget.h): each stage is a call of
// a private function of loops over 16-lane f32 vectors (func, scf, arith,
// math, memref, vector), lowered to LLVM by kv-lower-to-cpu. See
// docs/cpu-backend.md for the kernels and why they are shaped as they are.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_PASSES_CONVERSION_KVTOCPU_CPUTARGET_H
#define KVIR_PASSES_CONVERSION_KVTOCPU_CPUTARGET_H

#include "passes/Conversion/Forward/ForwardTarget.h"

#include <memory>

namespace mlir::kv {

/// A new CPU target for vectors of `vectorBits` (512: AVX-512, 256: AVX2;
/// 0: the host's), which sets the register tile of the packed matmul.
std::unique_ptr<ForwardTarget> createCpuTarget(int64_t vectorBits = 0);

} // namespace mlir::kv

#endif // KVIR_PASSES_CONVERSION_KVTOCPU_CPUTARGET_H
