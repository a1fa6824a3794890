//===- CudaBackend.h - The generated-code CUDA backend ----------*- C++ -*-===//
//
// `kv-run --backend cuda`: a ComputeBackend whose math is the GPU forward
// kv-lower-to-nvvm emits, compiled ahead of time by kv-aot into a kernel
// library per model config (docs/gpu-backend.md). Needs only the CUDA driver
// at run time (opened with dlopen by runtime/cuda/CudaRuntime).
//
// Device memory: the weights of each model (uploaded once), and per pool a
// device arena that mirrors the runtime's page layout (KVRuntime.h) page for
// page. Host pages stay the source of truth: new pages are written on the
// device and copied back; a page the device does not hold is uploaded when a
// view first needs it. The backend keeps one reference to every page it
// holds on the device, so the id cannot be reused while the copy exists
// (sealed pages are immutable); it drops the references of pages nobody else
// holds before each call.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CUDA_CUDABACKEND_H
#define KVIR_RUNTIME_CUDA_CUDABACKEND_H

#include "runtime/core/ComputeBackend.h"

#include <memory>
#include <string>
#include <vector>

namespace kvir::cuda {

/// The CUDA backend with its extra entry points (benchmarks).
class CudaComputeBackend : public ComputeBackend {
public:
  /// Times `iters` calls of the generated attention of one query at
  /// position `pos` over `view` at layer `layer` (after one warm-up call):
  /// `*seconds` receives the mean wall time of one call, synchronised.
  virtual kvrt_status timeAttention(const kvrt_model *model,
                                    const kvrt_view *view, int64_t pos,
                                    int32_t layer, int iters,
                                    double *seconds) = 0;
};

/// The CUDA backend for `model`'s config: opens the driver, finds the
/// kernel library of the config and uploads the weights. Returns null and
/// sets `*error` (when non-null) if there is no driver, no device, no kernel
/// library for the config, or not enough device memory.
std::unique_ptr<ComputeBackend> createCudaBackend(const kvrt_model *model,
                                                  std::string *error);

/// The folders searched for kernel libraries, in order: $KVIR_GPU_KERNELS,
/// then `lib/kvir-gpu` beside the running executable's `bin/`.
std::vector<std::string> kernelSearchPath();

} // namespace kvir::cuda

#endif // KVIR_RUNTIME_CUDA_CUDABACKEND_H
