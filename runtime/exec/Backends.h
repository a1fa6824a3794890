//===- Backends.h - The backends a runner can choose ------------*- C++ -*-===//
//
// Where the math of a run happens: the generated CPU code, the generated GPU
// code, or the reference oracle, by name. No MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_EXEC_BACKENDS_H
#define KVIR_RUNTIME_EXEC_BACKENDS_H

#include "runtime/core/ComputeBackend.h"

#include <memory>
#include <string>

namespace kvir::exec {

/// Whether `name` names a backend (`cpu`, `cuda`, `reference`); false with
/// `error` listing them otherwise.
bool checkBackendName(const std::string &name, std::string &error);

/// The backend called `name` (`cpu`, `cuda`, `reference`) for `model`; null
/// with `error` set otherwise.
std::unique_ptr<ComputeBackend> createBackend(const std::string &name,
                                              const kvrt_model *model,
                                              std::string &error);

} // namespace kvir::exec

#endif // KVIR_RUNTIME_EXEC_BACKENDS_H
