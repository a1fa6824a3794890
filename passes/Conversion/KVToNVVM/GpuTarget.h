//===- GpuTarget.h - The forward's stages on an NVIDIA GPU ------*- C++ -*-===//
//
// The GPU mapping of the forward (ForwardTarget.h): a gpu.module of kernels
// (warps with shuffles, shared memory) that the stages launch from host code
// with gpu.launch_func, lowered by kv-lower-to-nvvm. See docs/gpu-backend.md.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_PASSES_CONVERSION_KVTONVVM_GPUTARGET_H
#define KVIR_PASSES_CONVERSION_KVTONVVM_GPUTARGET_H

#include "passes/Conversion/Forward/ForwardTarget.h"

#include <memory>

namespace mlir::kv {

/// A new GPU target.
std::unique_ptr<ForwardTarget> createGpuTarget();

/// Registers the dialects the GPU forward adds to the common ones.
void registerGpuForwardDialects(DialectRegistry &registry);

} // namespace mlir::kv

#endif // KVIR_PASSES_CONVERSION_KVTONVVM_GPUTARGET_H
