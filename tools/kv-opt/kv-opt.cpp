//===- kv-opt.cpp - The kv optimizer driver ---------------------*- C++ -*-===//
//
// mlir-opt with the kv dialect and passes, the upstream dialects and passes the
// kv pipelines build on, and the GPU translations `gpu-module-to-binary` needs.
//
// `--help` lists kv-opt's own: the kv passes and pipelines and MLIR's driver
// options. libLLVM registers hundreds of code generation flags (every
// target's) when it is loaded, and upstream MLIR has hundreds of passes; both
// stay usable, but --help does not list them (`--list-passes` lists every
// pass).
//
//===----------------------------------------------------------------------===//

#include "dialects/KV/KVDialect.h"
#include "driver/compiler/ParserGuard.h"
#include "driver/compiler/VersionOption.h"
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
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

/// The largest input file kv-opt reads (256 MiB).
constexpr uint64_t kMaxInputBytes = uint64_t(256) << 20;

namespace cl = llvm::cl;

namespace {

/// The options --help lists: MLIR's driver options.
cl::OptionCategory kvOptCategory("kv-opt options");

/// MLIR options for developing MLIR itself (action tracing, IRDL, plugins,
/// the optimization-remark engine, which the kv passes do not use: their
/// plans and statistics are diagnostic remarks): usable, not listed.
constexpr const char *kUnlistedMlirOptions[] = {
    "irdl-file",
    "load-dialect-plugin",
    "load-pass-plugin",
    "log-actions-to",
    "log-mlir-actions-filter",
    "mlir-debug-counter",
    "mlir-enable-debugger-hook",
    "mlir-print-debug-counter",
    "profile-actions-to",
    "remark-format",
    "remark-policy",
    "remarks-filter",
    "remarks-filter-analyse",
    "remarks-filter-failed",
    "remarks-filter-missed",
    "remarks-filter-passed",
    "remarks-output-file",
};

/// Whether the command line asks for help (any of LLVM's spellings), before
/// a `--` that ends the options.
bool asksForHelp(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg == "--")
      return false;
    if (!arg.consume_front("-"))
      continue;
    arg.consume_front("-");
    if (arg == "h" || arg.starts_with("help"))
      return true;
  }
  return false;
}

/// The options registered so far: libLLVM's and libMLIR's, from when they
/// were loaded.
llvm::DenseSet<cl::Option *> registeredOptions() {
  llvm::DenseSet<cl::Option *> options;
  for (auto &entry : cl::getRegisteredOptions())
    options.insert(entry.second);
  return options;
}

/// Lists in --help only the options registered after `loaded` (MLIR's
/// driver options), except kUnlistedMlirOptions; LLVM's generic options
/// (--help, --version) stay.
void hideOtherOptions(const llvm::DenseSet<cl::Option *> &loaded) {
  auto &registered = cl::getRegisteredOptions();
  for (auto &entry : registered)
    if (!loaded.contains(entry.second))
      entry.second->addCategory(kvOptCategory);
  cl::HideUnrelatedOptions(kvOptCategory);
  for (const char *name : kUnlistedMlirOptions) {
    auto it = registered.find(name);
    if (it != registered.end())
      it->second->setHiddenFlag(cl::ReallyHidden);
  }
}

} // namespace

int main(int argc, char **argv) {
  // --help lists the kv passes and pipelines only: the upstream passes and
  // the test passes are registered when kv-opt runs passes.
  bool help = asksForHelp(argc, argv);
  if (!help) {
    mlir::registerAllPasses();
    mlir::kv::test::registerTestPasses();
  }
  mlir::kv::registerKVPassesAndPipelines();

  mlir::DialectRegistry registry;
  registry.insert<mlir::kv::KVDialect>();
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::registerAllGPUToLLVMIRTranslations(registry);
  mlir::NVVM::registerNVVMTargetInterfaceExternalModels(registry);

  kvir::compiler::setVersionPrinter("kv-opt");
  llvm::DenseSet<cl::Option *> loaded = registeredOptions();
  std::string helpHeader = mlir::registerCLIOptions(
      "kv-opt: the kv dialect and its passes and pipelines over MLIR; every "
      "upstream MLIR pass and pipeline runs too (kv-opt --list-passes lists "
      "the passes)\n",
      registry);
  hideOtherOptions(loaded);
  auto [input, output] = mlir::parseCLIOptions(argc, argv, helpHeader);
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
