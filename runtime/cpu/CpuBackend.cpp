//===- CpuBackend.cpp - The generated-code CPU backend ----------*- C++ -*-===//

#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/CpuHost.h"
#include "runtime/cpu/jit/CpuJit.h"

using namespace kvir;

std::unique_ptr<ComputeBackend>
kvir::cpu::createCpuBackend(const kvrt_model *model, std::string *error) {
  auto failWith = [&]() -> std::unique_ptr<ComputeBackend> {
    if (error)
      *error = kvrt_last_error();
    return nullptr;
  };
  kvrt_model_config config;
  if (kvrt_model_get_config(model, &config) != KVRT_OK)
    return failWith();
  std::shared_ptr<const CpuKernels> kernels;
  if (compileCpuKernels(config, &kernels) != KVRT_OK)
    return failWith();
  return createCpuBackendFromKernels(compileCpuKernels);
}
