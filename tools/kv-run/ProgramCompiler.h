//===- ProgramCompiler.h - JIT-compiled kv programs -------------*- C++ -*-===//
//
// kv-run's default execution: the program a ProgramRunner loaded (planned by
// kv-optimize) is lowered by the kv-lower-to-cpu pipeline (the host program
// to calls of runtime/exec/ExecRuntime.h, convert-kv-to-runtime), compiled
// with MLIR's ExecutionEngine and run. The math still goes through the
// ComputeBackend of the runner (generated CPU kernels or the reference), so
// results equal the interpreter's; errors point at the op that failed.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_TOOLS_KV_RUN_PROGRAMCOMPILER_H
#define KVIR_TOOLS_KV_RUN_PROGRAMCOMPILER_H

#include "tools/kv-run/ProgramRunner.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"

#include <memory>
#include <vector>

namespace kvir::run {

class ProgramCompiler {
public:
  /// `runner` has loaded the program and outlives the compiler.
  explicit ProgramCompiler(ProgramRunner &runner);
  ~ProgramCompiler();

  /// Checks that kv-run can execute and report `entry` (the ops and types
  /// the interpreter supports), lowers a copy of the program to the LLVM
  /// dialect and JIT-compiles it. Diagnostics go through the MLIRContext.
  mlir::LogicalResult compile(mlir::func::FuncOp entry);

  /// Runs the compiled entry on `args` (from ProgramRunner::bindArguments).
  mlir::FailureOr<std::vector<RuntimeValue>>
  run(llvm::ArrayRef<RuntimeValue> args);

  /// The same accounting as the interpreter's, for the last run.
  const WorkStats &planStats() const { return plan; }
  const WorkStats &setupStats() const { return setup; }
  const std::vector<std::pair<int64_t, int64_t>> &repairs() const {
    return repairStats;
  }

private:
  mlir::LogicalResult check(mlir::func::FuncOp entry);

  ProgramRunner &runner;
  mlir::func::FuncOp entry;
  std::unique_ptr<mlir::ExecutionEngine> engine;
  void (*entryFn)(void *, int64_t *, int64_t *) = nullptr;
  std::vector<mlir::Location> sites;
  WorkStats plan, setup;
  std::vector<std::pair<int64_t, int64_t>> repairStats;
};

} // namespace kvir::run

#endif // KVIR_TOOLS_KV_RUN_PROGRAMCOMPILER_H
