//===- Backends.cpp - The backends a runner can choose ----------*- C++ -*-===//

#include "runtime/exec/Backends.h"
#include "runtime/core/ComputeBackend.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cuda/CudaBackend.h"

bool kvir::exec::checkBackendName(const std::string &name, std::string &error) {
  if (name == "reference" || name == "cpu" || name == "cuda")
    return true;
  error = "unknown backend '" + name + "' (available: cpu, cuda, reference)";
  return false;
}

std::unique_ptr<kvir::ComputeBackend>
kvir::exec::createBackend(const std::string &name, const kvrt_model *model,
                          std::string &error) {
  if (name == "reference")
    return createReferenceBackend();
  if (name == "cpu")
    return cpu::createCpuBackend();
  if (name == "cuda") {
    std::unique_ptr<ComputeBackend> backend =
        cuda::createCudaBackend(model, &error);
    if (!backend)
      error = "cannot create the cuda backend: " + error;
    return backend;
  }
  checkBackendName(name, error);
  return nullptr;
}
