//===- GpuForwardBuilder.h - The model forward as GPU kernels ---*- C++ -*-===//
//
// Emits the decoder forward of a !kv.model for NVIDIA GPUs: a gpu.module of
// kernels (gpu.func) and host functions that launch them (gpu.launch_func),
// the same math as the CPU forward (ForwardBuilder.h) with the outer loops
// mapped to the grid. The host ABI is documented in docs/gpu-backend.md and
// mirrored by runtime/cuda/CudaKernels.h.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_PASSES_CONVERSION_KVTONVVM_GPUFORWARDBUILDER_H
#define KVIR_PASSES_CONVERSION_KVTONVVM_GPUFORWARDBUILDER_H

#include "passes/Conversion/KVToCPU/ForwardBuilder.h"

namespace mlir::kv {

/// Threads of the attention tile kernel (four warps) and of the other block
/// kernels; the host code of the runtime does not depend on them.
constexpr int64_t kGpuAttentionThreads = 128;

/// Why `config` cannot be compiled for the GPU, or an empty string.
std::string checkGpuForwardConfig(const ForwardConfig &config);

/// The MLIR source of the GPU forward: `gpu.module @<prefix>_kernels` and
/// the public host functions `<prefix>_prefill` and `<prefix>_attention`.
std::string getGpuForwardSource(const ForwardConfig &config, StringRef prefix);

/// Parses the GPU forward of `config` into `module` (which becomes a
/// `gpu.container_module`). Fails with a diagnostic at `loc` when a symbol of
/// that name exists or the config is not supported.
LogicalResult buildGpuForwardFunctions(ModuleOp module,
                                       const ForwardConfig &config,
                                       StringRef prefix, Location loc);

/// Registers the dialects the emitted GPU forward uses.
void registerGpuForwardDialects(DialectRegistry &registry);

} // namespace mlir::kv

#endif // KVIR_PASSES_CONVERSION_KVTONVVM_GPUFORWARDBUILDER_H
