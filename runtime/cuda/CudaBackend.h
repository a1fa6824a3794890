//===- CudaBackend.h - The generated-code CUDA backend ----------*- C++ -*-===//
//
// `kv-run --backend cuda`: runs the GPU forward a program's module holds
// (kv-lower-to-nvvm; JIT-compiled by kv-run, or ahead of time by kv-aot) over
// device memory (docs/gpu-backend.md). Needs only the CUDA driver at run time
// (opened with dlopen by runtime/cuda/CudaRuntime); the generated host code
// launches its kernels through the mgpu* functions there.
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
  virtual kvrt_status timeAttention(const Forward &forward,
                                    const kvrt_model *model,
                                    const kvrt_view *view, int64_t pos,
                                    int32_t layer, int iters,
                                    double *seconds) = 0;
};

/// The CUDA backend for `model`: opens the driver and uploads the weights.
/// Returns null and sets `*error` (when non-null) if there is no driver, no
/// device, or not enough device memory.
std::unique_ptr<CudaComputeBackend> createCudaBackend(const kvrt_model *model,
                                                      std::string *error);

} // namespace kvir::cuda

#endif // KVIR_RUNTIME_CUDA_CUDABACKEND_H
