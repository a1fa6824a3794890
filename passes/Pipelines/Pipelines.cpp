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
}

void mlir::kv::buildLowerToCPUPipeline(
    OpPassManager &pm, const LowerToCPUPipelineOptions &options) {
  // The host program first (kv ops to runtime calls), then the forwards the
  // module asks for; both lower to LLVM below.
  pm.addPass(createConvertKVToRuntimePass());
  pm.addPass(createConvertKVToCPUPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addPass(createConvertLinalgToLoopsPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  ConvertVectorToLLVMPassOptions vector;
  vector.reassociateFPReductions = options.reassociateFPReductions;
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
      "Lower a planned kv program to calls of the execution runtime "
      "(convert-kv-to-runtime), emit the generated CPU forward of every model "
      "in the module's kv.forward attribute (convert-kv-to-cpu) and lower "
      "both to the LLVM dialect",
      buildLowerToCPUPipeline);
  registerLowerToNVVMPipeline();
}
