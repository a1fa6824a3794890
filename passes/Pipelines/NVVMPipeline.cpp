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

#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Triple.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <set>

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

/// A GPU architecture KVIR targets, and the lowest PTX ISA version (10 *
/// major + minor) that has it: LLVM's NVPTX backend aborts the process
/// ("PTX version 8.0 does not support target 'sm_100'") below it, so the
/// pipeline checks first.
struct Chip {
  llvm::StringLiteral name;
  unsigned minPtx;
};

/// The architectures CUDA 13's ptxas accepts (it dropped sm_50 to sm_72),
/// with the PTX version each needs (the PTX ISA's target notes, as LLVM 22
/// enforces them). kv-lower-to-nvvm's help lists the same (Passes.h), and
/// test/Tools/nvvm-chips.test lowers each of those.
constexpr Chip kChips[] = {{"sm_75", 63},   {"sm_80", 70},   {"sm_86", 71},
                           {"sm_87", 74},   {"sm_89", 78},   {"sm_90", 78},
                           {"sm_90a", 80},  {"sm_100", 86},  {"sm_100a", 86},
                           {"sm_103", 88},  {"sm_103a", 88}, {"sm_110", 90},
                           {"sm_110a", 90}, {"sm_120", 87},  {"sm_120a", 87},
                           {"sm_121", 88},  {"sm_121a", 88}};

/// The PTX version KVIR is tested with; the default where the chip allows.
constexpr unsigned kDefaultPtx = 80;

const Chip *findChip(StringRef name) {
  for (const Chip &chip : kChips)
    if (chip.name == name)
      return &chip;
  return nullptr;
}

/// "8.6" for 86.
std::string ptxVersionText(unsigned version) {
  return std::to_string(version / 10) + "." + std::to_string(version % 10);
}

/// The PTX version of `features` (`+ptxNN`), or nothing where it is not that
/// form.
std::optional<unsigned> ptxVersionOf(StringRef features) {
  unsigned version;
  if (!features.consume_front("+ptx") || features.empty() ||
      !llvm::all_of(features, [](char c) { return c >= '0' && c <= '9'; }) ||
      features.getAsInteger(10, version))
    return std::nullopt;
  return version;
}

/// The PTX versions LLVM's NVPTX backend knows (its `ptxNN` features): a
/// version it does not know is ignored with a warning, and the chip's
/// check above it then aborts.
const std::set<unsigned> &knownPtxVersions() {
  static const std::set<unsigned> versions = [] {
    std::set<unsigned> out;
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTargetMC();
    llvm::Triple triple("nvptx64-nvidia-cuda");
    std::string error;
    const llvm::Target *target =
        llvm::TargetRegistry::lookupTarget(triple, error);
    if (!target)
      return out;
    std::unique_ptr<llvm::MCSubtargetInfo> info(
        target->createMCSubtargetInfo(triple, "sm_90", ""));
    if (!info)
      return out;
    for (const llvm::SubtargetFeatureKV &feature :
         info->getAllProcessorFeatures())
      if (std::optional<unsigned> version =
              ptxVersionOf(("+" + llvm::StringRef(feature.Key)).str()))
        out.insert(*version);
    return out;
  }();
  return versions;
}

/// The PTX features the pipeline compiles `chip` with: `features` where
/// given, else the chip's lowest PTX version and at least kDefaultPtx.
std::string featuresFor(const Chip &chip, StringRef features) {
  if (!features.empty())
    return features.str();
  return "+ptx" + std::to_string(std::max(chip.minPtx, kDefaultPtx));
}

} // namespace

std::string mlir::kv::checkLowerToNVVMPipelineOptions(
    const LowerToNVVMPipelineOptions &options) {
  std::string msg;
  llvm::raw_string_ostream os(msg);
  const Chip *chip = findChip(options.chip);
  std::optional<unsigned> ptx =
      chip ? ptxVersionOf(featuresFor(*chip, options.features)) : std::nullopt;
  const std::set<unsigned> &known = knownPtxVersions();
  if (!chip) {
    os << "kv-lower-to-nvvm: unknown chip '" << options.chip
       << "' (expected one of";
    for (const Chip &c : kChips)
      os << (&c == kChips ? " " : ", ") << c.name;
    os << ")";
  } else if (!ptx) {
    os << "kv-lower-to-nvvm: unknown features '" << options.features
       << "' (expected +ptxNN, e.g. +ptx80)";
  } else if (!known.empty() && !known.count(*ptx)) {
    os << "kv-lower-to-nvvm: features " << options.features << " asks for PTX "
       << ptxVersionText(*ptx)
       << ", which LLVM's NVPTX backend does not know (it knows up to PTX "
       << ptxVersionText(*known.rbegin()) << ")";
  } else if (*ptx < chip->minPtx) {
    os << "kv-lower-to-nvvm: chip " << chip->name << " needs PTX "
       << ptxVersionText(chip->minPtx) << " or later, features "
       << options.features << " asks for PTX " << ptxVersionText(*ptx)
       << " (give features=+ptx" << chip->minPtx
       << " or later, or leave features out)";
  } else if (options.format != "bin" && options.format != "isa")
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
  target.features = featuresFor(*findChip(options.chip), options.features);
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
