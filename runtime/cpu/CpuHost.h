//===- CpuHost.h - The CPU backend over kernel function pointers -*- C++
//-*-===//
//
// The host half of the CPU backend: memory, pages, embedding rows and the run
// table, around kernels given as function pointers. No MLIR dependency.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CPU_CPUHOST_H
#define KVIR_RUNTIME_CPU_CPUHOST_H

#include "runtime/core/ComputeBackend.h"
#include "runtime/cpu/CpuKernels.h"

#include <functional>
#include <memory>

namespace kvir::cpu {

/// Supplies the kernels of a model config (compiling them, or finding them in
/// a cache or an ahead-of-time object); errors go through kvrt_last_error.
using KernelProvider = std::function<kvrt_status(
    const kvrt_model_config &config, std::shared_ptr<const CpuKernels> *out)>;

/// A ComputeBackend (`cpu`) whose math is the kernels `provider` gives for
/// the config of each model it is called with.
std::unique_ptr<ComputeBackend>
createCpuBackendFromKernels(KernelProvider provider);

} // namespace kvir::cpu

#endif // KVIR_RUNTIME_CPU_CPUHOST_H
