//===- ConvertKVToCPU.cpp - Emit the generated CPU forward ------*- C++ -*-===//
//
// A thin driver over buildForwardFunctions: one forward per entry of the
// module's `kv.forward` dictionary.
//
//===----------------------------------------------------------------------===//

#include "dialects/KV/KVDialect.h"
#include "passes/Conversion/KVToCPU/ForwardBuilder.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::kv {
#define GEN_PASS_DEF_CONVERTKVTOCPUPASS
#include "passes/Passes.h.inc"
} // namespace mlir::kv

using namespace mlir;
using namespace mlir::kv;

namespace {

struct ConvertKVToCPUPass
    : public kv::impl::ConvertKVToCPUPassBase<ConvertKVToCPUPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<unsigned> built = buildRequestedForwards(
        module, [&](const ForwardConfig &config, StringRef name) {
          return buildForwardFunctions(module, config, name, module.getLoc());
        });
    if (failed(built))
      return signalPassFailure();
    numForwards += *built;
  }
};

} // namespace
