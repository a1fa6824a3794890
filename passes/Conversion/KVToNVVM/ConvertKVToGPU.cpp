//===- ConvertKVToGPU.cpp - Emit the generated GPU forward ------*- C++ -*-===//
//
// A thin driver over buildGpuForwardFunctions: one GPU forward per entry of
// the module's `kv.forward` dictionary.
//
//===----------------------------------------------------------------------===//

#include "dialects/KV/KVDialect.h"
#include "passes/Conversion/KVToNVVM/GpuForwardBuilder.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
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

/// The module attribute naming the forwards to emit.
constexpr llvm::StringLiteral kForwardAttrName = "kv.forward";

struct ConvertKVToGPUPass
    : public kv::impl::ConvertKVToGPUPassBase<ConvertKVToGPUPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    Attribute attr = module->getAttr(kForwardAttrName);
    if (!attr)
      return;
    auto dict = dyn_cast<DictionaryAttr>(attr);
    if (!dict) {
      module.emitError() << "'" << kForwardAttrName
                         << "' must be a dictionary from names to !kv.model "
                            "types, got "
                         << attr;
      return signalPassFailure();
    }
    for (NamedAttribute entry : dict) {
      auto typeAttr = dyn_cast<TypeAttr>(entry.getValue());
      auto model =
          typeAttr ? dyn_cast<ModelType>(typeAttr.getValue()) : ModelType();
      if (!model) {
        module.emitError() << "'" << kForwardAttrName << "' entry '"
                           << entry.getName().getValue()
                           << "' must be a !kv.model type, got "
                           << entry.getValue();
        return signalPassFailure();
      }
      if (failed(buildGpuForwardFunctions(
              module, ForwardConfig::fromModelType(model),
              entry.getName().getValue(), module.getLoc())))
        return signalPassFailure();
      ++numForwards;
    }
    module->removeAttr(kForwardAttrName);
  }
};

} // namespace
