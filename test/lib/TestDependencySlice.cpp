//===- TestDependencySlice.cpp - Test the dependency-slice analysis -------===//
//
// Emits, as remarks, the plan and the cost the dependency-slice analysis
// derives for every kv.edit and kv.compose, so lit tests can check them with
// expected-remark.
//
//===----------------------------------------------------------------------===//

#include "test/lib/TestPasses.h"

#include "dialects/KV/KVOps.h"
#include "passes/Analysis/DependencySlice.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace mlir::kv;

namespace {
struct TestDependencySlicePass
    : public PassWrapper<TestDependencySlicePass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TestDependencySlicePass)

  TestDependencySlicePass() = default;
  TestDependencySlicePass(const TestDependencySlicePass &other)
      : PassWrapper(other) {}

  StringRef getArgument() const final { return "test-kv-dependency-slice"; }
  StringRef getDescription() const final {
    return "Emit the dependency-slice plan and cost of every kv.edit and "
           "kv.compose as remarks";
  }

  Option<int64_t> dynamicSize{
      *this, "dynamic-size",
      llvm::cl::desc("Token count assumed for every dynamic size (0: none; "
                     "costs that need one are then not priced)"),
      llvm::cl::init(0)};

  void runOnOperation() override {
    std::optional<int64_t> assumed;
    if (dynamicSize > 0)
      assumed = dynamicSize;
    getOperation().walk([&](Operation *op) {
      if (auto edit = dyn_cast<EditOp>(op)) {
        if (failed(emitEditPlanRemarks(edit, assumed)))
          signalPassFailure();
      } else if (auto compose = dyn_cast<ComposeOp>(op)) {
        emitComposePlanRemarks(compose, assumed);
      }
    });
  }
};
} // namespace

void mlir::kv::test::registerTestDependencySlicePass() {
  PassRegistration<TestDependencySlicePass>();
}
