//===- kv-opt.cpp - The kv optimizer driver ---------------------*- C++ -*-===//
//
// mlir-opt with the kv dialect and passes, the upstream dialects and passes the
// kv pipelines build on, and the GPU translations `gpu-module-to-binary` needs.
//
//===----------------------------------------------------------------------===//

#include "dialects/KV/KVDialect.h"
#include "passes/Passes.h"
#include "test/lib/TestPasses.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::kv::registerKVPassesAndPipelines();
  mlir::kv::test::registerTestPasses();

  mlir::DialectRegistry registry;
  registry.insert<mlir::kv::KVDialect>();
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::registerAllGPUToLLVMIRTranslations(registry);
  mlir::NVVM::registerNVVMTargetInterfaceExternalModels(registry);

  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "KVIR optimizer driver: the kv dialect and its passes\n",
      registry));
}
