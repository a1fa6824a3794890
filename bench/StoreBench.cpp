//===- StoreBench.cpp - A block fetched from a store vs prefilled ---------===//
//
// Times a composed block fetched from the block store against prefilling it,
// per block size, on stories260K and a synthetic model of dim 512. The
// program is the block-store test's: a 64-token system prompt, a skill block
// of N tokens named by kv.load_block, composed after it, and a 24-token
// question over the result. For each N it measures, with the forward
// compiled once and warm:
//   - prefill: the block's own prefill (N tokens at position 0);
//   - fetch: kv.load_block on a hit (lookup, GET, checks, pages), and the
//     bytes fetched;
//   - store: the SET of the block after a miss;
//   - run without a store, run on a miss (prefill + store) and run on a hit:
//     the whole entry, wall time (time to the question's logits);
// the median of --repeat runs each. A hit's logits must equal the logits
// without a store (max |diff| <= 1e-6), or the benchmark fails.
//
//   bash tools/with-redis.sh build/bin/kv-bench-store
//
// uses the private server tools/with-redis.sh starts ($KVIR_REDIS_URL);
// `--kv-store URL` names another (`memory` for the in-process store).
//
//===----------------------------------------------------------------------===//

#include "bench/BenchModels.h"
#include "bench/BenchProgram.h"
#include "driver/compiler/Compiler.h"
#include "driver/compiler/VersionOption.h"

#include "runtime/core/ComputeBackend.h"
#include "runtime/exec/BlockStoreOptions.h"
#include "runtime/exec/Session.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

namespace cl = llvm::cl;
using namespace kvir;
using namespace kvir::exec;

namespace {

cl::OptionCategory category("kv-bench-store options");

cl::opt<std::string>
    storeUrl("kv-store",
             cl::desc("block store to fetch from (default: $KVIR_REDIS_URL, "
                      "which tools/with-redis.sh sets)"),
             cl::value_desc("url"), cl::cat(category));
bench::ModelOptions models(category, KVIR_TEST_MODEL,
                           "skip the dim-512 synthetic model");
cl::list<int>
    blockSizes("blocks",
               cl::desc("block sizes in tokens (default 64,256,1024)"),
               cl::CommaSeparated, cl::cat(category));
cl::opt<int> repeat("repeat", cl::desc("runs per figure; the median is shown"),
                    cl::init(3), cl::cat(category));

/// The system prompt, a block of `block` tokens by kv.load_block composed
/// after it, and a question over the result.
std::string program(const kvrt_model_config &c, int block) {
  std::string m = bench::modelType(c), cache = bench::cacheType(c);
  std::string v = std::to_string(c.vocab_size);
  std::string b = "tensor<" + std::to_string(block) + "xi32>";
  return "func.func @main(%m: " + m + ", %sys: tensor<64xi32>, %skill: " + b +
         ", %q: tensor<24xi32>) -> tensor<?x" + v + "xf32> {\n" +
         "  %e = kv.empty : " + cache + "\n" +
         "  %c, %l0 = kv.prefill %m, %e, %sys last : " + m + ", (" + cache +
         "), tensor<64xi32> -> " + cache + ", tensor<1x" + v + "xf32>\n" +
         "  %b = kv.load_block %m, %skill : " + m + ", " + b + " -> " + cache +
         "\n  %w = kv.compose %c, %b : " + cache + ", " + cache + "\n" +
         "  %f, %l = kv.prefill %m, %w, %q : " + m + ", (" + cache +
         "), tensor<24xi32> -> " + cache + ", tensor<?x" + v + "xf32>\n" +
         "  return %l : tensor<?x" + v + "xf32>\n}\n";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Row {
  int block = 0;
  int64_t bytes = 0;
  double prefillMs = 0, fetchMs = 0, storeMs = 0;
  double runNoStoreMs = 0, runMissMs = 0, runHitMs = 0;
  double maxDiff = 0;
};

/// One run of the entry; its wall time, logits and block events.
struct Run {
  double ms = 0;
  RunOutcome outcome;
};

class Bench {
public:
  Bench(const kvrt_model *model, kvrt_pool *pool, ComputeBackend &backend)
      : model(model), pool(pool), backend(backend) {}

  bool measure(int block, Row &row);

private:
  bool run(const compiler::CompiledProgram &compiled,
           const std::vector<Value> &args, const BlockStoreBinding *store,
           Run &out);

  const kvrt_model *model;
  kvrt_pool *pool;
  ComputeBackend &backend;
};

bool Bench::run(const compiler::CompiledProgram &compiled,
                const std::vector<Value> &args, const BlockStoreBinding *store,
                Run &out) {
  auto start = std::chrono::steady_clock::now();
  out.outcome = runEntry(compiled.entry, compiled.manifest, backend, model,
                         pool, args, /*maxContext=*/0, store);
  out.ms = std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now() - start)
               .count();
  if (out.outcome.failed || out.outcome.results.empty() ||
      out.outcome.results[0].kind != ValueKind::Logits) {
    llvm::errs() << "kv-bench-store: " << out.outcome.message << "\n";
    return false;
  }
  return true;
}

bool Bench::measure(int block, Row &row) {
  bench::ProgramContext context;
  kvrt_model_config config;
  kvrt_model_get_config(model, &config);
  std::vector<Value> args;
  auto compiled =
      bench::compileBenchProgram(context.get(), program(config, block), config,
                                 compiler::Target::Cpu, args, "kv-bench-store");
  if (mlir::failed(compiled))
    return false;
  std::string error;
  // The skill's tokens: the only argument of `block` ids (the system
  // prompt has 64, the question 24; a block of 64 is the second of 64).
  std::vector<int32_t> skill;
  int seen = 0;
  for (const Value &arg : args)
    if (arg.kind == ValueKind::Tokens && arg.tokens.size() == size_t(block) &&
        ++seen == (block == 64 ? 2 : 1))
      skill = arg.tokens;
  if (skill.empty()) {
    llvm::errs() << "kv-bench-store: no argument of " << block << " tokens\n";
    return false;
  }

  row.block = block;
  std::vector<double> prefill, fetch, store, noStore, miss, hit;
  Run reference;
  // One untimed run first: the kernels and caches warm.
  if (!run(*compiled, args, nullptr, reference))
    return false;
  const Logits &expected = *reference.outcome.results[0].logits;
  for (int r = 0; r < repeat; ++r) {
    Logits blockLogits;
    WorkStats work;
    if (!fullPrefill(backend, compiled->forward, model, pool, skill, 1,
                     blockLogits, work, error)) {
      llvm::errs() << "kv-bench-store: " << error << "\n";
      return false;
    }
    prefill.push_back(work.seconds * 1e3);
    Run plain;
    if (!run(*compiled, args, nullptr, plain))
      return false;
    noStore.push_back(plain.ms);

    // A prefix of its own per repetition: the first run misses, stores;
    // the second hits.
    StoreOptions so;
    so.url = storeUrl;
    so.prefix = "kvbench:" + std::to_string(getpid()) + ":" +
                std::to_string(block) + ":" + std::to_string(r) + ":";
    so.timeoutMs = 10000;
    BlockStoreRef handle(nullptr, kvrt_block_store_release);
    BlockStoreBinding binding;
    if (!openBlockStore(so, handle, binding, error)) {
      llvm::errs() << "kv-bench-store: " << error << "\n";
      return false;
    }
    binding.policy = KVRT_EXEC_STORE_FAIL;
    Run first, second;
    if (!run(*compiled, args, &binding, first) ||
        !run(*compiled, args, &binding, second))
      return false;
    miss.push_back(first.ms);
    hit.push_back(second.ms);
    const std::vector<BlockEvent> &a = first.outcome.blockEvents;
    const std::vector<BlockEvent> &b = second.outcome.blockEvents;
    if (a.size() != 2 || a[0].event.outcome != KVRT_EXEC_BLOCK_MISS ||
        a[1].event.outcome != KVRT_EXEC_BLOCK_STORED || b.size() != 1 ||
        b[0].event.outcome != KVRT_EXEC_BLOCK_HIT) {
      llvm::errs() << "kv-bench-store: expected a miss and a store, then a "
                      "hit, from "
                   << kvrt_block_store_describe(handle.get()) << "\n";
      return false;
    }
    store.push_back(a[1].event.seconds * 1e3);
    fetch.push_back(b[0].event.seconds * 1e3);
    row.bytes = b[0].event.bytes;
    const Logits &got = *second.outcome.results[0].logits;
    for (size_t i = 0; i < got.data.size(); ++i)
      row.maxDiff = std::max(row.maxDiff,
                             double(std::abs(got.data[i] - expected.data[i])));
  }
  row.prefillMs = median(prefill);
  row.fetchMs = median(fetch);
  row.storeMs = median(store);
  row.runNoStoreMs = median(noStore);
  row.runMissMs = median(miss);
  row.runHitMs = median(hit);
  return true;
}

bool benchModel(const kvrt_model *model, const std::string &description) {
  kvrt_model_config c;
  kvrt_model_get_config(model, &c);
  std::string error;
  std::unique_ptr<ComputeBackend> backend =
      exec::createBackend("cpu", model, error);
  if (!backend) {
    llvm::errs() << "kv-bench-store: " << error << "\n";
    return false;
  }
  bench::PoolRef pool = bench::createPool(model, 1024, "kv-bench-store");
  if (!pool)
    return false;
  llvm::outs() << bench::modelHeading(description, c)
               << ", f32 K/V), backend cpu, median of " << int(repeat) << "\n";
  llvm::outs() << llvm::format("%6s %10s %10s %9s %9s %8s %11s %10s %9s %10s\n",
                               "block", "bytes", "prefill", "fetch", "store",
                               "pf/fetch", "run nostore", "run miss", "run hit",
                               "max|diff|");
  Bench bench(model, pool.get(), *backend);
  std::vector<int> sizes(blockSizes.begin(), blockSizes.end());
  if (sizes.empty())
    sizes = {64, 256, 1024};
  for (int block : sizes) {
    Row row;
    if (!bench.measure(block, row))
      return false;
    llvm::outs() << llvm::format(
        "%6d %10lld %8.2fms %7.2fms %7.2fms %8.1f %9.2fms %8.2fms %7.2fms "
        "%10.2g\n",
        row.block, (long long)row.bytes, row.prefillMs, row.fetchMs,
        row.storeMs, row.prefillMs / row.fetchMs, row.runNoStoreMs,
        row.runMissMs, row.runHitMs, row.maxDiff);
    llvm::outs().flush();
    if (row.maxDiff > 1e-6) {
      llvm::errs() << "kv-bench-store: a fetched block's logits differ from "
                      "a prefilled one's by "
                   << row.maxDiff << "\n";
      return false;
    }
  }
  return true;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  kvir::compiler::parseToolOptions(
      argc, argv, "kv-bench-store", category,
      "kv-bench-store: a block fetched from the block store vs prefilled\n");
  if (storeUrl.empty()) {
    const char *env = std::getenv("KVIR_REDIS_URL");
    if (!env || !*env) {
      llvm::errs() << "kv-bench-store: no store: pass --kv-store URL, or run "
                      "under tools/with-redis.sh\n";
      return 2;
    }
    storeUrl = env;
  }
  if (repeat < 1) {
    llvm::errs() << "kv-bench-store: --repeat must be at least 1\n";
    return 2;
  }
  llvm::outs() << "store: " << storeUrl
               << "; prefill = the block's own prefill, fetch = kv.load_block "
                  "on a hit (lookup, GET, checks, pages), store = the SET "
                  "after a miss, run = the whole entry (system 64 + block + "
                  "question 24 tokens)\n";
  bool ok = true;
  ok &= models.onStories(benchModel);
  if (ok && !models.skipSynthetic) {
    kvrt_model_config c = bench::syntheticConfig(512, 8, 32000, 4096);
    kvrt_model *model = nullptr;
    if (kvrt_model_synthetic(&c, 42, &model)) {
      llvm::errs() << "kv-bench-store: " << kvrt_last_error() << "\n";
      return 1;
    }
    ok &= benchModel(model, "synthetic model (seed 42)");
    kvrt_model_release(model);
  }
  return ok ? 0 : 1;
}
