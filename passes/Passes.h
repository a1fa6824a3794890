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
      llvm::cl::desc("Emit each edit and compose plan with its cost as remarks "
                     "(formulas of the dynamic sizes, and their value at the "
                     "arguments' kv.sample_length)"),
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
  PassOptions::Option<int64_t> vectorBits{
      *this, "vector-bits",
      llvm::cl::desc("Vector width the forward's register blocking is chosen "
                     "for: 512 (AVX-512), 256 (AVX2) or 0 (the host's)"),
      llvm::cl::init(0)};
  PassOptions::Option<std::string> quantDot{
      *this, "quant-dot",
      llvm::cl::desc("How quantised weights are multiplied: f32 (widened "
                     "exactly), int8 (integer dot products on Q8_0, Q4_0, "
                     "Q4_K and Q6_K, Q5_K in decode steps; needs AVX-512 "
                     "VNNI), amx (int8, a Q8_0 "
                     "prefill on AMX tiles; needs AMX), avx2 (int8's decode "
                     "steps by AVX2's instructions, a prefill widened) or "
                     "auto (amx where the host has AMX, else int8 where it "
                     "has VNNI, else avx2)"),
      llvm::cl::init("auto")};
  PassOptions::Option<bool> checkHost{
      *this, "check-host",
      llvm::cl::desc("Refuse a quant-dot whose instructions this host lacks "
                     "(code that runs here); false where the caller checked "
                     "the CPU the code is for (kv-aot --cpu)"),
      llvm::cl::init(true)};
};

/// Builds kv-lower-to-cpu: the CPU forward of every model the program uses
/// (convert-kv-to-cpu), the host code to calls of the execution runtime
/// (convert-kv-to-runtime), then func, scf, arith, math, memref and vector to
/// the LLVM dialect: one module.
void buildLowerToCPUPipeline(OpPassManager &pm,
                             const LowerToCPUPipelineOptions &options);

/// Options of the kv-lower-to-nvvm pipeline
/// (passes/Pipelines/NVVMPipeline.cpp).
struct LowerToNVVMPipelineOptions
    : public PassPipelineOptions<LowerToNVVMPipelineOptions> {
  PassOptions::Option<std::string> chip{
      *this, "chip",
      llvm::cl::desc("Target GPU architecture: sm_75, sm_80, sm_86, sm_87, "
                     "sm_89, sm_90, sm_90a, sm_100, sm_100a, sm_103, sm_103a, "
                     "sm_110, sm_110a, sm_120, sm_120a, sm_121, sm_121a "
                     "(sm_90 is the H200)"),
      llvm::cl::init("sm_90")};
  PassOptions::Option<std::string> features{
      *this, "features",
      llvm::cl::desc("PTX version as +ptxNN, e.g. +ptx86 (default: the "
                     "lowest the chip needs, at least +ptx80)"),
      llvm::cl::init("")};
  PassOptions::Option<unsigned> optLevel{
      *this, "opt-level",
      llvm::cl::desc("Optimization level of the NVPTX "
                     "backend and ptxas (0..3)"),
      llvm::cl::init(3)};
  PassOptions::Option<std::string> format{
      *this, "format",
      llvm::cl::desc("What the kernels become: `bin` (cubin) or `isa` (PTX)"),
      llvm::cl::init("bin")};
  PassOptions::Option<std::string> toolkit{
      *this, "toolkit",
      llvm::cl::desc("CUDA toolkit root (libdevice, ptxas); defaults to the "
                     "one found at configure time"),
      llvm::cl::init("")};
};

/// Why `options` cannot build kv-lower-to-nvvm (unknown chip or format, no
/// toolkit, an opt level out of range), or an empty string.
std::string
checkLowerToNVVMPipelineOptions(const LowerToNVVMPipelineOptions &options);

/// Builds kv-lower-to-nvvm: the GPU forward of every model the program uses
/// (convert-kv-to-gpu), the host code to calls of the execution runtime
/// (convert-kv-to-runtime), the kernels to NVVM serialized into a gpu.binary
/// (libdevice linked), the launches to LLVM calls of the mgpu* functions:
/// one module.
/// `options` must pass checkLowerToNVVMPipelineOptions.
void buildLowerToNVVMPipeline(OpPassManager &pm,
                              const LowerToNVVMPipelineOptions &options);

/// Registers kv-lower-to-nvvm (with option checking).
void registerLowerToNVVMPipeline();

/// The location metadata that marks an op as derived from a plan op
/// (kv.edit, kv.compose, kv.logits): kv-run fuses it into their locations
/// before kv-optimize, and convert-kv-to-runtime counts such ops, and the ops
/// that use their results, as plan work.
inline constexpr llvm::StringLiteral kPlanLocationTag = "kv.plan";

/// Whether `loc` carries kPlanLocationTag (in a fused, name or call-site
/// location).
bool isPlanLocation(Location loc);

/// The last steps of every lowering to the LLVM dialect: memref, arith,
/// index, func and cf to LLVM, then unrealized casts reconciled.
void addHostToLLVMPasses(OpPassManager &pm);

/// Registers the kv passes and pipelines with the global registry.
void registerKVPassesAndPipelines();

} // namespace mlir::kv

#endif // KVIR_PASSES_PASSES_H
