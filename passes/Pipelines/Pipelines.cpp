//===- Pipelines.cpp - The kv pass pipelines --------------------*- C++ -*-===//

#include "passes/Passes.h"

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

void mlir::kv::registerKVPassesAndPipelines() {
  registerKVPasses();
  PassPipelineRegistration<OptimizePipelineOptions>(
      "kv-optimize",
      "The standard kv pipeline: derive the dependency slices of every edit "
      "and compose (kv-derive-cot-slices), fuse RoPE shifts into attention "
      "and prefill (kv-fuse-rope-shift), canonicalize and CSE",
      buildOptimizePipeline);
}
