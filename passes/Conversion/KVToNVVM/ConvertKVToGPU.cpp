//===- ConvertKVToGPU.cpp - Emit the generated GPU forward ------*- C++ -*-===//
//
// A thin driver over buildProgramForwards with the GPU target: the forward of
// every model config the program uses, as kernels and the host code that
// launches them, put into its module.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/Forward/BuildForward.h"
#include "passes/Conversion/KVToNVVM/GpuTarget.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::kv {
#define GEN_PASS_DEF_CONVERTKVTOGPUPASS
#include "passes/Passes.h.inc"
} // namespace mlir::kv

using namespace mlir;
using namespace mlir::kv;

namespace {

struct ConvertKVToGPUPass
    : public kv::impl::ConvertKVToGPUPassBase<ConvertKVToGPUPass> {
  void runOnOperation() override {
    std::unique_ptr<ForwardTarget> target = createGpuTarget();
    FailureOr<unsigned> built = buildProgramForwards(getOperation(), *target);
    if (failed(built))
      return signalPassFailure();
    numForwards += *built;
  }
};

} // namespace
