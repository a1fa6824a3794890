//===- ModelLoading.h - The model a runner runs -----------------*- C++ -*-===//
//
// A model file (llama2.c checkpoint or GGUF), or one of the seeded synthetic
// presets that stand in for a model where there is none. No MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_EXEC_MODELLOADING_H
#define KVIR_RUNTIME_EXEC_MODELLOADING_H

#include "runtime/core/KVRuntime.h"

#include <cstdint>
#include <string>

namespace kvir::exec {

/// The model a runner runs: the llama2.c checkpoint `file` when given, else
/// the seeded synthetic model `synthetic` (`default`: stories260K's shape,
/// `synthetic-test`: dim 256, 4/2 heads of 64, half RoPE, theta 1e6,
/// `synthetic-bench`: dim 1024, 8 layers, 8 heads of 128), with `seed` (0:
/// the preset's). `loadFlags` are kvrt_model_load_ex's, for a file.
/// `description` says which, for reports. Null with `error`.
kvrt_model *loadModel(const std::string &file, const std::string &synthetic,
                      uint64_t seed, uint32_t loadFlags,
                      std::string &description, std::string &error);

} // namespace kvir::exec

#endif // KVIR_RUNTIME_EXEC_MODELLOADING_H
