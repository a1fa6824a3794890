//===- KVPlugin.cpp - The kv dialect and passes for mlir-opt ----*- C++ -*-===//
//
// A dialect and pass plugin for an upstream mlir-opt (Debian's mlir-opt-22):
//
//   mlir-opt-22 --load-dialect-plugin=build/lib/KVPlugin.so \
//               --load-pass-plugin=build/lib/KVPlugin.so \
//               --pass-pipeline='builtin.module(kv-optimize)' \
//               examples/agent-edit.mlir
//
// The plugin links libMLIR.so, the very library mlir-opt-22 is linked with, so
// the kv dialect and passes land in mlir-opt's own dialect and pass registries.
// It exports these two entry points and nothing else (exports.map).
//
//===----------------------------------------------------------------------===//

#include "dialects/KV/KVDialect.h"
#include "passes/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Tools/Plugins/DialectPlugin.h"
#include "mlir/Tools/Plugins/PassPlugin.h"
#include "llvm/Config/llvm-config.h"

using namespace mlir;

namespace {

/// Registers the kv passes and pipelines once per process, whichever of the
/// two entry points asks first: a pass registered again under the same name
/// is harmless in a release build of MLIR, a pipeline is a fatal error in a
/// build with assertions.
void registerPassesOnce() {
  static const bool registered = [] {
    kv::registerKVPassesAndPipelines();
    return true;
  }();
  (void)registered;
}

/// The kv dialect (its own dependent dialects load with it) and what the
/// kv-lower-to-nvvm pipeline needs to serialize kernels: the NVVM target
/// attribute's interface and the translations of the GPU, NVVM and LLVM
/// dialects to LLVM IR. mlir-opt-22 registers these itself; a tool built on
/// MlirOptMain with fewer registrations gets them from here.
void registerDialects(DialectRegistry *registry) {
  registry->insert<kv::KVDialect>();
  NVVM::registerNVVMTargetInterfaceExternalModels(*registry);
  registerGPUDialectTranslation(*registry);
  registerLLVMDialectTranslation(*registry);
  registerNVVMDialectTranslation(*registry);
  // A dialect plugin alone is enough: the kv passes come with the dialect.
  registerPassesOnce();
}

} // namespace

extern "C" LLVM_ATTRIBUTE_WEAK DialectPluginLibraryInfo
mlirGetDialectPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "KV", LLVM_VERSION_STRING, registerDialects};
}

extern "C" LLVM_ATTRIBUTE_WEAK PassPluginLibraryInfo mlirGetPassPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "KVPasses", LLVM_VERSION_STRING,
          registerPassesOnce};
}
