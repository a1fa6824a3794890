//===- CpuBackend.h - The generated-code CPU backend ------------*- C++ -*-===//
//
// `kv-run --backend cpu`: a ComputeBackend whose math is the forward that
// convert-kv-to-cpu emits, JIT-compiled for the host CPU (once per model
// config per process). See docs/cpu-backend.md.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CPU_CPUBACKEND_H
#define KVIR_RUNTIME_CPU_CPUBACKEND_H

#include "runtime/core/ComputeBackend.h"

#include <memory>
#include <string>

namespace kvir::cpu {

/// The CPU backend, with the kernels of `model`'s config compiled up front
/// (models of other configs get theirs on first use). Returns null and sets
/// `*error` (when non-null) if they cannot be compiled.
std::unique_ptr<ComputeBackend> createCpuBackend(const kvrt_model *model,
                                                 std::string *error);

} // namespace kvir::cpu

#endif // KVIR_RUNTIME_CPU_CPUBACKEND_H
