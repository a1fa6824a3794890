//===- CpuBackend.h - The generated forward on the host ---------*- C++ -*-===//
//
// `kv-run --backend cpu`: runs the generated forward (the entry points a
// program's module holds, ForwardABI.h) on the host, over the pool's own page
// arena and host buffers. Memory, pages, embedding rows and the run table are
// done here; every floating-point operation is generated code. No MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CPU_CPUBACKEND_H
#define KVIR_RUNTIME_CPU_CPUBACKEND_H

#include "runtime/core/ComputeBackend.h"

#include <memory>

namespace kvir::cpu {

/// The host backend. Each call checks that the Forward it is given was
/// compiled for the model's config.
std::unique_ptr<ComputeBackend> createCpuBackend();

} // namespace kvir::cpu

#endif // KVIR_RUNTIME_CPU_CPUBACKEND_H
