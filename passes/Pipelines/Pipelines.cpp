//===- Pipelines.cpp - The kv pass pipelines --------------------*- C++ -*-===//

#include "passes/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::kv;

void mlir::kv::buildOptimizePipeline(OpPassManager &pm,
                                     const OptimizePipelineOptions &options) {
  KVDeriveCotSlicesPassOptions derive;
  derive.emitPlan = options.emitPlan;
  derive.emitStatistics = options.emitStatistics;
  pm.addPass(createKVDeriveCotSlicesPass(derive));
  KVFuseRopeShiftPassOptions fuse;
  fuse.emitStatistics = options.emitStatistics;
  pm.addPass(createKVFuseRopeShiftPass(fuse));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  // Last: the chains are the prefills the passes above left one after the
  // other (a recomputed slice, a context built segment by segment).
  KVFusePrefillsPassOptions prefills;
  prefills.emitStatistics = options.emitStatistics;
  pm.addPass(createKVFusePrefillsPass(prefills));
}

void mlir::kv::buildLowerToCPUPipeline(
    OpPassManager &pm, const LowerToCPUPipelineOptions &options) {
  // The forward of every model the program uses into its module, then the
  // host program (kv ops to runtime calls that name those forwards); both
  // lower to LLVM below: one module.
  ConvertKVToCPUPassOptions cpu;
  cpu.vectorBits = options.vectorBits;
  cpu.quantDot = options.quantDot;
  cpu.checkHost = options.checkHost;
  pm.addPass(createConvertKVToCPUPass(cpu));
  pm.addPass(createConvertKVToRuntimePass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addPass(createConvertLinalgToLoopsPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  ConvertVectorToLLVMPassOptions vector;
  vector.reassociateFPReductions = options.reassociateFPReductions;
  // quant-dot=amx's tiles (CpuInt8Matmul.cpp); nothing else changes.
  vector.amx = true;
  pm.addPass(createConvertVectorToLLVMPass(vector));
  pm.addPass(createConvertMathToLLVMPass());
  addHostToLLVMPasses(pm);
}

void mlir::kv::addHostToLLVMPasses(OpPassManager &pm) {
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
}

void mlir::kv::registerKVPassesAndPipelines() {
  registerKVPasses();
  PassPipelineRegistration<OptimizePipelineOptions>(
      "kv-optimize",
      "The standard kv pipeline: derive the dependency slices of every edit "
      "and compose (kv-derive-cot-slices), fuse RoPE shifts into attention "
      "and prefill (kv-fuse-rope-shift), canonicalize and CSE",
      buildOptimizePipeline);
  PassPipelineRegistration<LowerToCPUPipelineOptions>(
      "kv-lower-to-cpu",
      "Lower a planned kv program to one LLVM-dialect module: the CPU forward "
      "of every model it uses (convert-kv-to-cpu) and its host code as calls "
      "of the execution runtime that hand those forwards over "
      "(convert-kv-to-runtime)",
      buildLowerToCPUPipeline);
  registerLowerToNVVMPipeline();
}
