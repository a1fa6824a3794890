//===- CpuJit.h - JIT compilation of the generated CPU kernels --*- C++ -*-===//
//
// Emits the forward of a model config (convert-kv-to-cpu's builder), lowers
// it with the kv-lower-to-cpu pipeline and compiles it with MLIR's
// ExecutionEngine (LLVM -O3 for the host CPU). Kernels are cached per config
// for the life of the process.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CPU_JIT_CPUJIT_H
#define KVIR_RUNTIME_CPU_JIT_CPUJIT_H

#include "runtime/cpu/CpuKernels.h"

#include <memory>
#include <string>

namespace kvir::cpu {

/// The kernels of `config`, compiled on first use (thread-safe). A config the
/// generator does not support is KVRT_ERR_INVALID_ARGUMENT; a compiler failure
/// is KVRT_ERR_INTERNAL; the message is in kvrt_last_error().
kvrt_status compileCpuKernels(const kvrt_model_config &config,
                              std::shared_ptr<const CpuKernels> *out);

/// The forward of `config` as MLIR: upstream dialects, or after the
/// kv-lower-to-cpu pipeline the LLVM dialect (for inspection and tests).
kvrt_status getCpuKernelsSource(const kvrt_model_config &config, bool lowered,
                                std::string *out);

} // namespace kvir::cpu

#endif // KVIR_RUNTIME_CPU_JIT_CPUJIT_H
