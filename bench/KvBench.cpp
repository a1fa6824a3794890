//===- KvBench.cpp - Edit and compose vs full prefill, side by side -------===//
//
// Times what docs/design.md calls time to first token of the answer: the plan
// kv-optimize derives for an edit (cot_slice, exact) or a compose, with
// everything it recomputes, against a full prefill of the same final
// context, with the same backend and warm kernels (the forward compiled into
// the same module), in one run. Prints tokens, model FLOPs and wall time of
// each, their ratios to full prefill, and the answer's fidelity. Scenarios
// are kv programs generated for the model's shape, compiled and run as
// kv-run does.
//
//===----------------------------------------------------------------------===//

#include "bench/BenchModels.h"
#include "bench/BenchProgram.h"
#include "bench/kernels/HardwareReport.h"
#include "driver/compiler/CacheOption.h"
#include "driver/compiler/Compiler.h"
#include "driver/compiler/ThreadsOption.h"
#include "driver/compiler/VersionOption.h"

#include "runtime/core/ComputeBackend.h"
#include "runtime/exec/Session.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace cl = llvm::cl;
using namespace kvir;
using namespace kvir::exec;
using kvir::bench::cacheType;
using kvir::bench::modelType;

namespace {

cl::OptionCategory category("kv-bench options");

cl::opt<std::string> backendName(
    "backend",
    cl::desc("where the math runs: cpu (generated, the default), cuda or "
             "reference"),
    cl::init("cpu"), cl::cat(category));
bench::ModelOptions models(category, KVIR_TEST_MODEL,
                           "skip the realistic synthetic model");
cl::opt<int> history("history",
                     cl::desc("tokens of the agent scenario's history "
                              "(context = history + 2100)"),
                     cl::init(2000), cl::cat(category));
cl::opt<int> longHistory(
    "long-history",
    cl::desc("also the cot_slice edit of an agent context with this history "
             "(context = history + 2100; 0: none, the default; --hw: 30668, "
             "a 32K-token context), after the other rows: its plan and full "
             "prefill once, without the exact plan's row"),
    cl::init(0), cl::cat(category));
cl::opt<int> blockTokens("block", cl::desc("tokens per composed skill block"),
                         cl::init(512), cl::cat(category));
cl::opt<int> blockCount("blocks", cl::desc("skill blocks composed (default 4)"),
                        cl::init(4), cl::cat(category));
cl::opt<int> synthDim("dim", cl::desc("synthetic model dim"), cl::init(512),
                      cl::cat(category));
cl::opt<int> synthLayers("layers", cl::desc("synthetic model layers"),
                         cl::init(8), cl::cat(category));
cl::opt<int> synthVocab("vocab", cl::desc("synthetic model vocabulary"),
                        cl::init(32000), cl::cat(category));
cl::opt<bool> hardware(
    "hw",
    cl::desc("every CPU figure against this machine's limits in one run: its "
             "FMA peak and read bandwidth, prefill on 1 and 2 threads, the "
             "matmul vs OpenBLAS, decode attention on f32/f16/bf16 pages, "
             "then the edit and compose rows at 8K tokens and the cot_slice "
             "edit at 32K (defaults --history 6000 --long-history 30668 "
             "--blocks 8 --block 1024, the synthetic model only)"),
    cl::init(false), cl::cat(category));

/// The agent context of the design brief (system 1200, history, a fact, tools
/// 800, two 40-token thoughts from the fact, an 8-token answer) with a
/// history of `historyTokens`, a 12-token fact replaced by a 16-token one:
/// cot_slice recomputes the fact, the thoughts and the answer, about 2.5% of
/// the context with the default history.
std::string agentProgram(const kvrt_model_config &c, int historyTokens,
                         const std::string &strategy) {
  struct Seg {
    const char *name, *kind;
    int size;
    const char *deps;
  };
  std::vector<Seg> segs = {{"system", "system", 1200, ""},
                           {"history", "history", historyTokens, ""},
                           {"city", "fact", -1, ""},
                           {"tools", "tool", 800, ""},
                           {"think1", "thought", 40, " deps(@city)"},
                           {"think2", "thought", 40, " deps(@think1)"},
                           {"answer", "answer", 8, " deps(@think2, @tools)"}};
  std::string m = modelType(c), cache = cacheType(c, "agent");
  std::string v = std::to_string(c.vocab_size);
  std::string s = "kv.context @agent {\n";
  for (const Seg &g : segs)
    s += std::string("  kv.segment @") + g.name + " kind(" + g.kind +
         ") tokens(" + (g.size < 0 ? "?" : std::to_string(g.size)) + ")" +
         g.deps + "\n";
  s += "}\nfunc.func @main(%m: " + m;
  auto tensor = [](int size) {
    return "tensor<" + (size < 0 ? std::string("?") : std::to_string(size)) +
           "xi32>";
  };
  for (const Seg &g : segs)
    s += std::string(", %") + g.name + ": " + tensor(g.size) +
         (g.size < 0 ? " {kv.sample_length = 12 : i64}" : "");
  s += ", %new: tensor<?xi32> {kv.sample_length = 16 : i64}) -> tensor<?x" + v +
       "xf32> {\n  %c0 = kv.empty : " + cache + "\n";
  std::string prev = "%c0";
  for (const Seg &g : segs) {
    std::string next = std::string("%c_") + g.name;
    s += "  " + next + ", %l_" + g.name + " = kv.prefill %m, " + prev + ", %" +
         g.name + " segment @" + g.name + " last : " + m + ", (" + cache +
         "), " + tensor(g.size) + " -> " + cache + ", tensor<1x" + v +
         "xf32>\n";
    prev = next;
  }
  s += "  %e = kv.edit %m, " + prev + "[@city] = %new strategy <" + strategy +
       "> : " + m + ", " + cache + ", tensor<?xi32>\n";
  s += "  %l = kv.logits %m, %e[@answer] : " + m + ", " + cache +
       " -> tensor<?x" + v + "xf32>\n  return %l : tensor<?x" + v +
       "xf32>\n}\n";
  return s;
}

/// `blocks` skill blocks of `block` tokens prefilled alone, composed after a
/// 64-token system prompt; a 24-token question over the result.
std::string composeProgram(const kvrt_model_config &c, int block, int blocks) {
  std::string m = modelType(c), cache = cacheType(c, "");
  std::string v = std::to_string(c.vocab_size);
  std::string b = "tensor<" + std::to_string(block) + "xi32>";
  std::string s = "func.func @skill(%m: " + m + ", %t: " + b + ") -> " + cache +
                  " {\n  %e = kv.empty : " + cache +
                  "\n  %c, %l = kv.prefill %m, %e, %t last : " + m + ", (" +
                  cache + "), " + b + " -> " + cache + ", tensor<1x" + v +
                  "xf32>\n  return %c : " + cache + "\n}\n";
  s += "func.func @main(%m: " + m + ", %sys: tensor<64xi32>";
  for (int i = 0; i < blocks; ++i)
    s += ", %s" + std::to_string(i) + ": " + b;
  s += ", %q: tensor<24xi32>) -> tensor<?x" + v +
       "xf32> {\n  %e = kv.empty : " + cache +
       "\n  %c, %l0 = kv.prefill %m, %e, %sys last : " + m + ", (" + cache +
       "), tensor<64xi32> -> " + cache + ", tensor<1x" + v + "xf32>\n";
  std::string prev = "%c";
  for (int i = 0; i < blocks; ++i) {
    std::string n = std::to_string(i);
    s += "  %b" + n + " = func.call @skill(%m, %s" + n + ") : (" + m + ", " +
         b + ") -> " + cache + "\n";
    s += "  %w" + n + " = kv.compose " + prev + ", %b" + n + " : " + cache +
         ", " + cache + "\n";
    prev = "%w" + n;
  }
  s += "  %f, %l = kv.prefill %m, " + prev + ", %q : " + m + ", (" + cache +
       "), tensor<24xi32> -> " + cache + ", tensor<?x" + v +
       "xf32>\n  return %l : tensor<?x" + v + "xf32>\n}\n";
  return s;
}

struct Row {
  std::string scenario, strategy;
  WorkStats work;
  double fullSeconds = 0;
  int64_t fullFlops = 0, fullTokens = 0;
  Fidelity fidelity;
};

std::unique_ptr<ComputeBackend> makeBackend(const kvrt_model *model) {
  std::string error;
  std::unique_ptr<ComputeBackend> backend =
      exec::createBackend(backendName, model, error);
  if (!backend)
    llvm::errs() << "kv-bench: " << error << "\n";
  return backend;
}

/// Runs `program` and a full prefill of its answer's context with the
/// forward compiled into the same module; one row.
bool measure(ComputeBackend &backend, const kvrt_model *model, kvrt_pool *pool,
             const std::string &program, const std::string &scenario,
             const std::string &strategy, std::vector<Row> &rows) {
  bench::ProgramContext context;
  kvrt_model_config config;
  kvrt_model_get_config(model, &config);
  std::vector<Value> args;
  auto compiled = bench::compileBenchProgram(
      context.get(), program, config,
      backendName == "cuda" ? compiler::Target::Gpu : compiler::Target::Cpu,
      args, "kv-bench");
  if (mlir::failed(compiled))
    return false;
  std::string error;
  RunOutcome outcome =
      runEntry(compiled->entry, compiled->manifest, backend, model, pool, args);
  if (outcome.failed || outcome.results.empty() ||
      outcome.results[0].kind != ValueKind::Logits) {
    llvm::errs() << "kv-bench: " << outcome.message << "\n";
    return false;
  }
  const Logits &answer = *outcome.results[0].logits;
  std::vector<int32_t> final = viewTokens(answer.context.get());
  final.insert(final.end(), answer.tokens.begin(), answer.tokens.end());
  Logits full;
  WorkStats fullWork;
  if (!fullPrefill(backend, compiled->forward, model, pool, final, answer.rows,
                   full, fullWork, error)) {
    llvm::errs() << "kv-bench: " << error << "\n";
    return false;
  }
  Row row;
  row.scenario = scenario + " (" + std::to_string(final.size()) + " tokens)";
  row.strategy = strategy;
  row.work = outcome.plan;
  row.fullSeconds = fullWork.seconds;
  row.fullFlops = fullWork.flops;
  row.fullTokens = fullWork.prefillTokens;
  row.fidelity = compareLogits(answer.data.data(), full.data.data(),
                               answer.rows, answer.vocab);
  rows.push_back(row);
  return true;
}

/// Each plan's share of its full prefill's tokens, FLOPs and wall time, and
/// how much more of the wall time than of the FLOPs it takes (1: the plan
/// computes at the full prefill's FLOP rate).
void printShares(const std::vector<Row> &rows) {
  llvm::outs() << llvm::format("\n%-28s %-12s %8s %8s %8s %10s\n",
                               "share of the full prefill", "plan", "tokens",
                               "FLOPs", "wall", "wall/FLOP");
  for (const Row &r : rows) {
    double flops = double(r.work.flops) / r.fullFlops;
    double wall = r.work.seconds / r.fullSeconds;
    llvm::outs() << llvm::format("%-28s %-12s %7.2f%% %7.2f%% %7.2f%% %10.2f\n",
                                 r.scenario.c_str(), r.strategy.c_str(),
                                 100.0 * r.work.prefillTokens / r.fullTokens,
                                 100.0 * flops, 100.0 * wall, wall / flops);
  }
}

void printRows(const std::vector<Row> &rows) {
  llvm::outs() << llvm::format("%-28s %-12s %8s %10s %10s %8s %8s %8s %8s\n",
                               "scenario", "plan", "tokens", "plan ms",
                               "full ms", "tok/full", "flop/fl", "time/fl",
                               "cos-min");
  for (const Row &r : rows)
    llvm::outs() << llvm::format(
        "%-28s %-12s %8lld %10.2f %10.2f %8.4f %8.4f %8.4f %8.4f\n",
        r.scenario.c_str(), r.strategy.c_str(), (long long)r.work.prefillTokens,
        r.work.seconds * 1e3, r.fullSeconds * 1e3,
        double(r.work.prefillTokens) / r.fullTokens,
        double(r.work.flops) / r.fullFlops, r.work.seconds / r.fullSeconds,
        r.fidelity.cosineMin);
}

bool benchModel(const kvrt_model *model, const std::string &description) {
  kvrt_model_config c;
  kvrt_model_get_config(model, &c);
  std::unique_ptr<ComputeBackend> backend = makeBackend(model);
  if (!backend)
    return false;
  // A scenario holds a few copies of its context at once (plan, full
  // prefill, their views).
  int64_t longest =
      std::max({int64_t(history) + 2200, int64_t(longHistory) + 2200,
                64 + int64_t(blockCount) * blockTokens + 64});
  bench::PoolRef pool = bench::createPool(
      model, std::max<int64_t>(4096, 8 * (longest / 16 + 1)), "kv-bench");
  if (!pool)
    return false;
  llvm::outs() << bench::modelHeading(description, c) << "), backend "
               << backend->name() << "\n";
  std::vector<Row> rows;
  // One untimed pass of a whole plan first: the caches warm.
  if (!measure(*backend, model, pool.get(), agentProgram(c, history, "exact"),
               "warm-up", "exact", rows))
    return false;
  rows.clear();
  for (const char *strategy : {"cot_slice", "exact"})
    if (!measure(*backend, model, pool.get(),
                 agentProgram(c, history, strategy), "agent edit", strategy,
                 rows))
      return false;
  if (!measure(*backend, model, pool.get(),
               composeProgram(c, blockTokens, blockCount),
               "compose " + std::to_string(int(blockCount)) + "x" +
                   std::to_string(int(blockTokens)),
               "compose", rows))
    return false;
  // The long context's cot_slice edit alone: the kernels are warm, and its
  // full prefill is most of the report's run time.
  if (longHistory > 0 && !measure(*backend, model, pool.get(),
                                  agentProgram(c, longHistory, "cot_slice"),
                                  "agent edit", "cot_slice", rows))
    return false;
  printRows(rows);
  printShares(rows);
  return true;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::opt<int> &threads = compiler::registerThreadsOption(category);
  compiler::registerCacheOptions(category);
  compiler::parseToolOptions(
      argc, argv, "kv-bench", category,
      "kv-bench: edit (cot_slice, exact) and compose vs full prefill\n");
  if (!compiler::applyThreadsOption(threads, "kv-bench") ||
      !compiler::applyCacheOptions("kv-bench"))
    return 1;
  if (hardware) {
    // The kernels against the machine, then the scenarios at 8K tokens
    // with the same build, in the same run.
    if (bench::hardwareReport(/*prefillTokens=*/256) != 0)
      return 1;
    std::fflush(stdout);
    if (!history.getNumOccurrences())
      history = 6000;
    if (!longHistory.getNumOccurrences())
      longHistory = 30668;
    if (!blockCount.getNumOccurrences())
      blockCount = 8;
    if (!blockTokens.getNumOccurrences())
      blockTokens = 1024;
    if (!models.stories.getNumOccurrences())
      models.stories = "";
    // The scenarios run on the threads --threads chose (every core).
    compiler::applyThreadsOption(threads, "kv-bench");
    llvm::outs() << "\n== edit and compose vs full prefill\n";
  }
  if (history < 0 || longHistory < 0 || blockTokens < 1 || blockCount < 1 ||
      int64_t(blockTokens) * blockCount > 1 << 20) {
    llvm::errs() << "kv-bench: --history and --long-history must be >= 0, "
                    "--block and --blocks "
                    ">= 1, and blocks x block at most 2^20 tokens\n";
    return 1;
  }
  bool ok = true;
  if (!models.skipSynthetic) {
    // Room for the longest context a scenario builds.
    kvrt_model_config c = bench::syntheticConfig(
        synthDim, synthLayers, synthVocab,
        std::max({4096, int(history) + 2200, int(longHistory) + 2200,
                  64 + int(blockCount) * int(blockTokens) + 64}));
    kvrt_model *model = nullptr;
    if (kvrt_model_synthetic(&c, 42, &model)) {
      llvm::errs() << "kv-bench: " << kvrt_last_error() << "\n";
      return 1;
    }
    ok &= benchModel(model, "synthetic model (seed 42)");
    kvrt_model_release(model);
  }
  ok &= models.onStories(benchModel);
  return ok ? 0 : 1;
}
