//===- NVVMPipeline.cpp - The kv-lower-to-nvvm pipeline ---------*- C++ -*-===//
//
// The GPU forward (convert-kv-to-gpu) through upstream's GPU stages: kernels
// to NVVM, nvvm-attach-target, gpu-module-to-binary (libdevice linked from
// the toolkit given explicitly), host side to LLVM with calls of the mgpu*
// functions runtime/cuda implements. Modelled on upstream's
// mlir/lib/Dialect/GPU/Pipelines/GPUToNVVMPipeline.cpp.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::kv;

#ifndef KVIR_CUDA_TOOLKIT_DEFAULT
#define KVIR_CUDA_TOOLKIT_DEFAULT ""
#endif

namespace {

/// The toolkit the pipeline uses: the option, else the configure-time one.
std::string toolkitOf(const LowerToNVVMPipelineOptions &options) {
  return options.toolkit.empty() ? std::string(KVIR_CUDA_TOOLKIT_DEFAULT)
                                 : std::string(options.toolkit);
}

/// The architectures CUDA 13's ptxas accepts that KVIR targets.
bool isKnownChip(StringRef chip) {
  static const llvm::StringSet<> chips = {
      "sm_75",   "sm_80",  "sm_86",   "sm_87",  "sm_89",   "sm_90",
      "sm_90a",  "sm_100", "sm_100a", "sm_103", "sm_103a", "sm_110",
      "sm_110a", "sm_120", "sm_120a", "sm_121", "sm_121a"};
  return chips.contains(chip);
}

/// `+ptxNN` (one feature), or empty.
bool isKnownFeatures(StringRef features) {
  if (features.empty())
    return true;
  if (!features.consume_front("+ptx") || features.empty())
    return false;
  return llvm::all_of(features, [](char c) { return c >= '0' && c <= '9'; });
}

} // namespace

std::string mlir::kv::checkLowerToNVVMPipelineOptions(
    const LowerToNVVMPipelineOptions &options) {
  std::string msg;
  llvm::raw_string_ostream os(msg);
  if (!isKnownChip(options.chip))
    os << "kv-lower-to-nvvm: unknown chip '" << options.chip
       << "' (expected one of sm_75, sm_80, sm_86, sm_87, sm_89, sm_90, "
          "sm_90a, sm_100[a], sm_103[a], sm_110[a], sm_120[a], sm_121[a])";
  else if (!isKnownFeatures(options.features))
    os << "kv-lower-to-nvvm: unknown features '" << options.features
       << "' (expected +ptxNN, e.g. +ptx80)";
  else if (options.format != "bin" && options.format != "isa")
    os << "kv-lower-to-nvvm: unknown format '" << options.format
       << "' (expected bin or isa)";
  else if (options.optLevel > 3)
    os << "kv-lower-to-nvvm: opt-level " << options.optLevel
       << " is outside 0..3";
  else {
    std::string toolkit = toolkitOf(options);
    llvm::SmallString<256> libdevice(toolkit);
    llvm::sys::path::append(libdevice, "nvvm", "libdevice", "libdevice.10.bc");
    llvm::SmallString<256> ptxas(toolkit);
    llvm::sys::path::append(ptxas, "bin", "ptxas");
    if (toolkit.empty())
      os << "kv-lower-to-nvvm: no CUDA toolkit: pass toolkit=<path> (none "
            "was found at configure time); libdevice is needed for exp, pow, "
            "sin and cos";
    else if (!llvm::sys::fs::exists(libdevice))
      os << "kv-lower-to-nvvm: toolkit '" << toolkit << "' has no "
         << libdevice;
    else if (options.format == "bin" && !llvm::sys::fs::exists(ptxas))
      os << "kv-lower-to-nvvm: toolkit '" << toolkit << "' has no " << ptxas
         << " (needed for format=bin)";
  }
  return msg;
}

void mlir::kv::buildLowerToNVVMPipeline(
    OpPassManager &pm, const LowerToNVVMPipelineOptions &options) {
  pm.addPass(createConvertKVToGPUPass());
  pm.addPass(createConvertKVToRuntimePass());
  // Each entry point's _impl inlined into it, so that gpu-async-region
  // gives the launches of one entry one stream instead of one per launch.
  pm.addPass(createInlinerPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addNestedPass<func::FuncOp>(createGpuAsyncRegionPass());

  GpuNVVMAttachTargetOptions target;
  target.chip = options.chip;
  target.features = options.features;
  target.optLevel = options.optLevel;
  pm.addPass(createGpuNVVMAttachTarget(target));
  pm.addPass(createSCFToControlFlowPass());

  // Kernels: gpu, arith, math (libdevice calls), memref, vector, cf -> NVVM.
  ConvertGpuOpsToNVVMOpsOptions nvvm;
  nvvm.indexBitwidth = 64;
  OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
  kernels.addPass(createConvertGpuOpsToNVVMOps(nvvm));
  kernels.addPass(createCanonicalizerPass());
  kernels.addPass(createCSEPass());
  kernels.addPass(createReconcileUnrealizedCastsPass());

  // Host: launches to mgpu* calls, the rest to LLVM.
  pm.addPass(createGpuToLLVMConversionPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  addHostToLLVMPasses(pm);

  GpuModuleToBinaryPassOptions binary;
  binary.toolkitPath = toolkitOf(options);
  binary.compilationTarget = options.format;
  pm.addPass(createGpuModuleToBinaryPass(binary));
}

void mlir::kv::registerLowerToNVVMPipeline() {
  registerPassPipeline(
      "kv-lower-to-nvvm",
      "Lower a planned kv program to one module for NVIDIA GPUs: the GPU "
      "forward of every model it uses (convert-kv-to-gpu) with its kernels "
      "lowered to NVVM and serialized (cubin or PTX, libdevice linked) into "
      "a gpu.binary, and the host code (convert-kv-to-runtime, the launches "
      "as mgpu* calls) lowered to LLVM",
      [](OpPassManager &pm, StringRef text,
         function_ref<LogicalResult(const Twine &)> errorHandler) {
        LowerToNVVMPipelineOptions options;
        if (failed(options.parseFromString(text)))
          return failure();
        std::string problem = checkLowerToNVVMPipelineOptions(options);
        if (!problem.empty())
          return errorHandler(problem);
        buildLowerToNVVMPipeline(pm, options);
        return success();
      },
      [](function_ref<void(const detail::PassOptions &)> optHandler) {
        optHandler(LowerToNVVMPipelineOptions());
      });
}
