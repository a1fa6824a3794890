//===- ProgramRunner.h - Execute kv programs over a backend -----*- C++ -*-===//
//
// Parses a kv program, plans it with kv-optimize, and executes an entry
// function by walking its ops: index arithmetic, token tensors and every kv
// primitive left after kv-optimize, mapped onto kvrt_view_* operations and
// ComputeBackend calls. Diagnostics go through the MLIRContext with the
// failing op's location; nothing is compiled (`kv-run --exec interpret`;
// ProgramCompiler.h is the compiled path, which reuses the loading and the
// argument binding here).
//
// Cost accounting: ops derived by kv-optimize from kv.edit, kv.compose and
// kv.logits, and every op that consumes a value they produce, are the *plan*;
// the rest is *setup* (building the caches the plan starts from). A program
// with none of those ops is all plan.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_TOOLS_KV_RUN_PROGRAMRUNNER_H
#define KVIR_TOOLS_KV_RUN_PROGRAMRUNNER_H

#include "runtime/core/ComputeBackend.h"
#include "runtime/core/KVRuntime.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringMap.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvir::run {

/// A shared reference to a view; views are immutable values.
using ViewRef = std::shared_ptr<kvrt_view>;

/// Takes ownership of one reference (NULL gives an empty ViewRef).
ViewRef adoptView(kvrt_view *view);

/// Logits computed by one prefill, with what they were computed from.
struct Logits {
  int64_t rows = 0, vocab = 0;
  std::vector<float> data;
  /// The view the prefill attended (its view list, shifted and concatenated).
  ViewRef context;
  /// The tokens it computed, and the position of the first.
  std::vector<int32_t> tokens;
  int64_t position = 0;
  /// Whether only the last token's row was computed.
  bool lastOnly = false;
  /// The cache the prefill returned (context plus the new run).
  ViewRef result;
};

/// A run-time value of the interpreter.
struct RuntimeValue {
  enum class Kind { None, Model, Index, Tokens, Logits, Cache };
  Kind kind = Kind::None;
  int64_t index = 0;
  std::shared_ptr<const std::vector<int32_t>> tokens;
  std::shared_ptr<const Logits> logits;
  ViewRef cache;

  static RuntimeValue ofIndex(int64_t value);
  static RuntimeValue ofTokens(std::vector<int32_t> tokens);
  static RuntimeValue ofCache(ViewRef view);
  static RuntimeValue ofModel();
};

/// Work done, in the units of DESIGN.md §4.
struct WorkStats {
  /// Backend prefill calls and the tokens they computed (all layers).
  int64_t prefillCalls = 0, prefillTokens = 0;
  /// Rows of logits computed.
  int64_t logitsRows = 0;
  /// Tokens whose first-layer K/V were computed for a deviation scan.
  int64_t scanTokens = 0;
  /// Model FLOPs (kvir::ModelCost (runtime/core/ModelCost.h)) of all of the
  /// above.
  int64_t flops = 0;
  /// Bytes of K/V written to new pages (tokens x layers x 2 x kv_dim x 4).
  int64_t kvBytesWritten = 0;
  /// Wall time of the ops, in seconds.
  double seconds = 0;

  void add(const WorkStats &other);
};

/// Model FLOPs of one prefill of `n` tokens over a view of `context` tokens
/// with `logitsRows` rows of logits, per kvir::ModelCost
/// (runtime/core/ModelCost.h).
int64_t prefillFlops(const kvrt_model_config &config, int64_t context,
                     int64_t n, int64_t logitsRows);

/// How kv-run builds the inputs it is not given.
struct InputOptions {
  /// Token files by argument name (`argN` or the arg's `kv.name`).
  llvm::StringMap<std::vector<int32_t>> given;
  /// Synthesize the inputs not given (else they are an error).
  bool synthesize = false;
  uint64_t seed = 1;
  /// Length of a synthesized dynamic input without a `kv.sample_length`.
  int64_t dynamicLength = 16;
};

/// One bound argument, for the report.
struct BoundInput {
  std::string name;
  int64_t tokens = -1; // -1 for the model
  bool synthesized = false;
};

class ProgramRunner {
public:
  /// `context` must outlive the runner; `registerDialects` has been applied.
  ProgramRunner(mlir::MLIRContext &context, ComputeBackend &backend,
                const kvrt_model *model, kvrt_pool *pool);

  /// The dialects a kv program may use.
  static void registerDialects(mlir::DialectRegistry &registry);

  /// Parses and verifies `path` ("-" for stdin), then runs kv-optimize.
  mlir::LogicalResult loadFile(llvm::StringRef path);
  /// The same for an in-memory program.
  mlir::LogicalResult loadString(llvm::StringRef text,
                                 llvm::StringRef name = "program");
  mlir::ModuleOp module() { return *program; }

  /// The entry function, or a diagnostic listing the functions.
  mlir::FailureOr<mlir::func::FuncOp> lookupEntry(llvm::StringRef name);

  /// Binds the entry's arguments: the model (whose type must match the
  /// loaded model) and token tensors from `options`.
  mlir::FailureOr<std::vector<RuntimeValue>>
  bindArguments(mlir::func::FuncOp entry, const InputOptions &options,
                std::vector<BoundInput> *bound = nullptr);

  /// Executes `entry` on `args`; the results in order.
  mlir::FailureOr<std::vector<RuntimeValue>>
  run(mlir::func::FuncOp entry, llvm::ArrayRef<RuntimeValue> args);

  /// Work of the last run, split into plan and setup.
  const WorkStats &planStats() const { return plan; }
  const WorkStats &setupStats() const { return setup; }
  /// Whether the program held kv.edit, kv.compose or kv.logits ops.
  bool hasPlanOps() const { return planOps; }
  /// Selective recomputes executed: (candidates, chosen) per op.
  const std::vector<std::pair<int64_t, int64_t>> &repairs() const {
    return repairStats;
  }

  const kvrt_model_config &config() const { return modelConfig; }
  ComputeBackend &computeBackend() { return backend; }
  const kvrt_model *loadedModel() const { return model; }
  kvrt_pool *kvPool() const { return pool; }

private:
  struct Frame;
  mlir::LogicalResult finishLoad();
  mlir::FailureOr<std::vector<RuntimeValue>>
  call(mlir::func::FuncOp callee, llvm::ArrayRef<RuntimeValue> args,
       bool inPlan, unsigned depth);
  mlir::LogicalResult execute(mlir::Operation *op, Frame &frame);
  mlir::LogicalResult executeKV(mlir::Operation *op, Frame &frame,
                                WorkStats &work);

  mlir::MLIRContext &context;
  ComputeBackend &backend;
  const kvrt_model *model;
  kvrt_pool *pool;
  kvrt_model_config modelConfig;
  mlir::OwningOpRef<mlir::ModuleOp> program;
  bool planOps = false;
  WorkStats plan, setup;
  std::vector<std::pair<int64_t, int64_t>> repairStats;
};

/// The backend called `name` ("reference", or "cpu" where runtime/cpu is
/// built) for `model`; null with `error` set otherwise.
std::unique_ptr<ComputeBackend> createBackend(llvm::StringRef name,
                                              const kvrt_model *model,
                                              std::string &error);

/// Prefills `tokens` from position 0 into an empty view of `pool` (for full
/// prefill comparisons), computing logits of the last `rows` tokens only
/// (split in two prefills when rows > 1, which is the same math). An empty
/// token list is an error.
mlir::LogicalResult fullPrefill(ComputeBackend &backend,
                                const kvrt_model *model, kvrt_pool *pool,
                                const std::vector<int32_t> &tokens,
                                int64_t rows, Logits &out, WorkStats &work,
                                std::string &error);

/// Continues greedily from `logits` (its last row) and `cache` for `n`
/// tokens, one prefill per token; returns the tokens chosen.
mlir::LogicalResult greedyContinue(ComputeBackend &backend,
                                   const kvrt_model *model,
                                   const Logits &logits, ViewRef cache,
                                   int64_t n, std::vector<int32_t> &out,
                                   std::string &error);

/// The tokens of every run of `view`, in order.
std::vector<int32_t> viewTokens(const kvrt_view *view);

/// Whether the effective positions of `view` are 0, 1, ..., n-1.
bool hasContiguousPositions(const kvrt_view *view);

/// DESIGN.md §4 fidelity of `approx` against `full`, row by row.
struct Fidelity {
  int64_t rows = 0;
  double cosineMin = 0, cosineMean = 0;
  double klMean = 0, klMax = 0;
  int64_t top1Agree = 0;
  double maxAbsDiff = 0;
};
Fidelity compareLogits(const float *approx, const float *full, int64_t rows,
                       int64_t vocab);

/// Indices of the `k` largest values of `row`, largest first.
std::vector<int32_t> topK(const float *row, int64_t vocab, int64_t k);

} // namespace kvir::run

#endif // KVIR_TOOLS_KV_RUN_PROGRAMRUNNER_H
