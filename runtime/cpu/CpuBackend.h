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

#include <cstdint>
#include <memory>

namespace kvir::cpu {

/// The host backend. Each call checks that the Forward it is given was
/// compiled for the model's config.
std::unique_ptr<ComputeBackend> createCpuBackend();

/// Outputs per panel of the packed matmul the CPU target emits for this
/// host (CpuMatmul.cpp: 64 with AVX-512F, else 16): the width the backend
/// packs a model's weights for, once (kvir::packedWeights).
int64_t hostPanelWidth();

} // namespace kvir::cpu

#endif // KVIR_RUNTIME_CPU_CPUBACKEND_H
