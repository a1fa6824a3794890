//===- kv-aot.cpp - Ahead-of-time GPU kernels for a model config -*- C++
//-*-===//
//
// Compiles the GPU forward of one model config with kv-lower-to-nvvm and
// writes what the CUDA backend loads on a machine without LLVM/MLIR
// (docs/gpu-backend.md):
//
//   OUT/kvgpu_NAME.o        host code (PIC object, the cubin embedded),
//                           linked by CMake into libkvgpu_NAME.so against
//                           libkvir_cuda_runtime.so alone
//   OUT/libkvgpu_NAME.key   the config key the backend matches
//   OUT/kvgpu_NAME.cubin    the kernels (sm_90 by default)
//   OUT/kvgpu_NAME.ptx      the same kernels as PTX (for inspection/ptxas)
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/KVToNVVM/GpuForwardBuilder.h"
#include "passes/Passes.h"
#include "runtime/core/KVRuntime.h"
#include "runtime/cuda/CudaKernels.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"

#include <optional>

using namespace mlir;
namespace cl = llvm::cl;

static cl::opt<std::string>
    configText("config",
               cl::desc("Model config: dim=,hidden=,layers=,heads=,kv_heads=,"
                        "vocab=[,rope=half|interleaved][,theta=][,eps=]"));
static cl::opt<std::string>
    modelPath("model", cl::desc("Take the config of this llama2.c file"));
static cl::opt<std::string> name("name", cl::desc("Name of the outputs"),
                                 cl::Required);
static cl::opt<std::string> outDir("out-dir", cl::desc("Output folder"),
                                   cl::Required);
static cl::opt<std::string> chip("chip", cl::desc("GPU architecture"),
                                 cl::init("sm_90"));
static cl::opt<std::string> features("features", cl::desc("PTX features"),
                                     cl::init("+ptx80"));
static cl::opt<std::string> toolkit("toolkit",
                                    cl::desc("CUDA toolkit (default: the "
                                             "configure-time one)"),
                                    cl::init(""));

namespace {

int failWith(const llvm::Twine &message) {
  llvm::errs() << "kv-aot: " << message << "\n";
  return 1;
}

/// Parses `--config` over stories260K's defaults.
std::optional<kvrt_model_config> parseConfig(std::string &error) {
  kvrt_model_config c;
  kvrt_model_config_init(&c);
  if (!modelPath.empty()) {
    kvrt_model *model = nullptr;
    if (kvrt_model_load(modelPath.c_str(), &model) != KVRT_OK) {
      error = kvrt_last_error();
      return std::nullopt;
    }
    kvrt_model_get_config(model, &c);
    kvrt_model_release(model);
    return c;
  }
  llvm::SmallVector<llvm::StringRef> items;
  llvm::StringRef(configText).split(items, ',', -1, false);
  for (llvm::StringRef item : items) {
    std::pair<llvm::StringRef, llvm::StringRef> kv = item.trim().split('=');
    llvm::StringRef key = kv.first, value = kv.second;
    int64_t iv = 0;
    double dv = 0;
    bool isInt = !value.getAsInteger(10, iv);
    bool isDouble = !value.getAsDouble(dv);
    auto setInt = [&](int32_t &field) {
      if (!isInt || iv <= 0 || iv > INT32_MAX)
        error = "bad value '" + value.str() + "' for " + key.str();
      field = int32_t(iv);
    };
    if (key == "dim")
      setInt(c.dim);
    else if (key == "hidden")
      setInt(c.hidden_dim);
    else if (key == "layers")
      setInt(c.n_layers);
    else if (key == "heads")
      setInt(c.n_heads);
    else if (key == "kv_heads")
      setInt(c.n_kv_heads);
    else if (key == "vocab")
      setInt(c.vocab_size);
    else if (key == "rope" && (value == "half" || value == "interleaved"))
      c.rope_layout = value == "half" ? KVRT_ROPE_HALF : KVRT_ROPE_INTERLEAVED;
    else if (key == "theta" && isDouble)
      c.rope_theta = dv;
    else if (key == "eps" && isDouble)
      c.rms_eps = dv;
    else
      error = ("unknown config item '" + item + "'").str();
    if (!error.empty())
      return std::nullopt;
  }
  if (kvrt_model_config_validate(&c) != KVRT_OK) {
    error = kvrt_last_error();
    return std::nullopt;
  }
  return c;
}

/// The forward of `config` lowered with format `format`.
OwningOpRef<ModuleOp> lower(MLIRContext &ctx,
                            const mlir::kv::ForwardConfig &config,
                            llvm::StringRef format) {
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&ctx));
  if (failed(mlir::kv::buildGpuForwardFunctions(
          *module, config, kvir::cuda::kKernelPrefix, module->getLoc())))
    return nullptr;
  mlir::kv::LowerToNVVMPipelineOptions options;
  options.chip = chip;
  options.features = features;
  options.format = format.str();
  options.toolkit = toolkit;
  std::string problem = mlir::kv::checkLowerToNVVMPipelineOptions(options);
  if (!problem.empty()) {
    llvm::errs() << "kv-aot: " << problem << "\n";
    return nullptr;
  }
  PassManager pm(&ctx);
  mlir::kv::buildLowerToNVVMPipeline(pm, options);
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

/// The bytes of the (single) object of the module's gpu.binary.
std::optional<std::string> binaryOf(ModuleOp module) {
  std::optional<std::string> out;
  module.walk([&](gpu::BinaryOp binary) {
    for (Attribute attr : binary.getObjects())
      if (auto object = dyn_cast<gpu::ObjectAttr>(attr))
        out = object.getObject().getValue().str();
  });
  return out;
}

bool writeFile(const std::string &path, llvm::StringRef data) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec) {
    llvm::errs() << "kv-aot: cannot write " << path << ": " << ec.message()
                 << "\n";
    return false;
  }
  os << data;
  return true;
}

} // namespace

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv,
                              "kv-aot: GPU kernels and host code of a model "
                              "config, ahead of time\n");
  if (configText.empty() == modelPath.empty())
    return failWith("give exactly one of --config and --model");
  std::string error;
  std::optional<kvrt_model_config> config = parseConfig(error);
  if (!config)
    return failWith(error);
  mlir::kv::ForwardConfig forward =
      mlir::kv::ForwardConfig::fromRuntimeConfig(*config);
  std::string problem = mlir::kv::checkGpuForwardConfig(forward);
  if (!problem.empty())
    return failWith("cannot compile this config for the GPU: " + problem);

  DialectRegistry registry;
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerAllGPUToLLVMIRTranslations(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();

  std::string base = outDir + "/kvgpu_" + name;
  OwningOpRef<ModuleOp> isa = lower(ctx, forward, "isa");
  if (!isa)
    return failWith("lowering to PTX failed");
  std::optional<std::string> ptx = binaryOf(*isa);
  OwningOpRef<ModuleOp> bin = lower(ctx, forward, "bin");
  if (!bin)
    return failWith("lowering to cubin failed");
  std::optional<std::string> cubin = binaryOf(*bin);
  if (!ptx || !cubin)
    return failWith("internal error: no gpu.binary after kv-lower-to-nvvm");

  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  llvm::LLVMContext llvmCtx;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(*bin, llvmCtx, "kvgpu_" + name);
  if (!llvmModule)
    return failWith("translation of the host code to LLVM IR failed");
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  std::string lookupError;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, lookupError);
  if (!target)
    return failWith("no host target: " + lookupError);
  llvm::TargetOptions targetOptions;
  // The cubin is loaded by a constructor: .init_array, which every linker
  // and loader runs (lld does not turn .ctors into it).
  targetOptions.UseInitArray = true;
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      triple, "generic", "", targetOptions, llvm::Reloc::PIC_));
  llvmModule->setTargetTriple(triple);
  llvmModule->setDataLayout(machine->createDataLayout());

  std::error_code ec;
  llvm::raw_fd_ostream object(base + ".o", ec, llvm::sys::fs::OF_None);
  if (ec)
    return failWith("cannot write " + base + ".o: " + ec.message());
  llvm::legacy::PassManager codegen;
  if (machine->addPassesToEmitFile(codegen, object, nullptr,
                                   llvm::CodeGenFileType::ObjectFile))
    return failWith("the host target cannot emit objects");
  codegen.run(*llvmModule);
  object.close();

  if (!writeFile(base + ".cubin", *cubin) || !writeFile(base + ".ptx", *ptx) ||
      !writeFile(outDir + "/libkvgpu_" + name + ".key",
                 kvir::cuda::configKey(*config) + "\n"))
    return 1;
  return 0;
}
