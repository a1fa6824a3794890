//===- kv-opt.cpp - The kv optimizer driver ---------------------*- C++ -*-===//
//
// mlir-opt with the kv dialect and passes, the upstream dialects and passes the
// kv pipelines build on, and the GPU translations `gpu-module-to-binary` needs.
//
//===----------------------------------------------------------------------===//

#include "dialects/KV/KVDialect.h"
#include "driver/compiler/ParserGuard.h"
#include "passes/Passes.h"
#include "test/lib/TestPasses.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

/// The largest input file kv-opt reads (256 MiB).
constexpr uint64_t kMaxInputBytes = uint64_t(256) << 20;

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

  auto [input, output] = mlir::registerAndParseCLIOptions(
      argc, argv, "KVIR optimizer driver: the kv dialect and its passes\n",
      registry);
  // mlir-opt reads its input whole: a FIFO or a device would block or never
  // end, and a huge file would exhaust memory. Refuse them by name.
  if (input != "-") {
    llvm::sys::fs::file_status status;
    std::string why;
    if (std::error_code ec = llvm::sys::fs::status(input, status))
      why = ec.message();
    else if (llvm::sys::fs::is_directory(status))
      why = "it is a directory";
    else if (!llvm::sys::fs::is_regular_file(status))
      why = "not a regular file";
    else if (status.getSize() > kMaxInputBytes)
      why = std::to_string(status.getSize()) + " bytes, more than the " +
            std::to_string(kMaxInputBytes) + " kv-opt reads";
    if (!why.empty()) {
      llvm::WithColor::error(llvm::errs(), "kv-opt")
          << "cannot open input file '" << input << "': " << why << "\n";
      return 1;
    }
  }
  // Listing dialects or passes reads no input.
  mlir::MlirOptMainConfig config =
      mlir::MlirOptMainConfig::createFromCLOptions();
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, input, output, registry));

  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> file = mlir::openInputFile(input, &error);
  if (!file) {
    llvm::WithColor::error(llvm::errs(), "kv-opt") << error << "\n";
    return 1;
  }
  // Text that would crash MLIR's parser is refused with a located error.
  {
    llvm::SourceMgr sourceMgr;
    unsigned id = sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBuffer(file->getMemBufferRef(),
                                         /*RequiresNullTerminator=*/false),
        llvm::SMLoc());
    if (mlir::failed(kvir::compiler::checkParserHazards(sourceMgr, id)))
      return 1;
  }
  std::unique_ptr<llvm::ToolOutputFile> out =
      mlir::openOutputFile(output, &error);
  if (!out) {
    llvm::WithColor::error(llvm::errs(), "kv-opt") << error << "\n";
    return 1;
  }
  if (mlir::failed(
          mlir::MlirOptMain(out->os(), std::move(file), registry, config)))
    return 1;
  out->keep();
  return 0;
}
