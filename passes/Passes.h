//===- Passes.h - The kv passes ---------------------------------*- C++ -*-===//

#ifndef KVIR_PASSES_PASSES_H
#define KVIR_PASSES_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir::kv {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// Options of the kv-optimize pipeline.
struct OptimizePipelineOptions
    : public PassPipelineOptions<OptimizePipelineOptions> {
  PassOptions::Option<bool> emitPlan{
      *this, "emit-plan",
      llvm::cl::desc(
          "Emit each edit and compose plan with its cost as remarks"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> emitStatistics{
      *this, "emit-statistics",
      llvm::cl::desc("Emit each pass's statistics as a remark on the module"),
      llvm::cl::init(false)};
};

/// Builds kv-optimize: derive the slices of every edit and compose, fuse the
/// RoPE shifts into attention and prefill, canonicalize and CSE.
void buildOptimizePipeline(OpPassManager &pm,
                           const OptimizePipelineOptions &options);

/// Options of the kv-lower-to-cpu pipeline.
struct LowerToCPUPipelineOptions
    : public PassPipelineOptions<LowerToCPUPipelineOptions> {
  PassOptions::Option<bool> reassociateFPReductions{
      *this, "reassociate-fp-reductions",
      llvm::cl::desc("Let LLVM reassociate the vector reductions of dot "
                     "products (tree sums instead of a serial chain)"),
      llvm::cl::init(true)};
};

/// Builds kv-lower-to-cpu: emit the forward of every model named by the
/// module's `kv.forward` attribute (convert-kv-to-cpu), then lower func, scf,
/// arith, math, memref and vector to the LLVM dialect.
void buildLowerToCPUPipeline(OpPassManager &pm,
                             const LowerToCPUPipelineOptions &options);

/// Registers the kv passes and pipelines with the global registry.
void registerKVPassesAndPipelines();

} // namespace mlir::kv

#endif // KVIR_PASSES_PASSES_H
