//===- Passes.cpp - C API of the kv passes and pipelines --------*- C++ -*-===//

#include "kv-c/Passes.h"

#include "passes/Passes.h"

#include "mlir/CAPI/Pass.h"

using namespace mlir;
using namespace mlir::kv;

// The generated creators call create<Def>() and register<Def>() unqualified.
#include "kv-c/Passes.capi.cpp.inc"

void mlirRegisterKVPassesAndPipelines(void) {
  // A pipeline registered twice is a fatal error in an MLIR built with
  // assertions.
  static const bool registered = [] {
    registerKVPassesAndPipelines();
    return true;
  }();
  (void)registered;
}
