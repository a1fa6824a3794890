//===- kv-aot-run.cpp - Run kv programs compiled ahead of time --*- C++ -*-===//
//
// The runner of kv-aot's libraries, for machines without LLVM/MLIR (the GPU
// machine): links the runtime only (the exec ABI, the backends, the CUDA
// driver layer), loads a program library with dlopen, binds its entry from
// the manifest the library embeds, runs it and prints the same report as
// kv-run (docs/gpu-backend.md).
//
//   kv-aot-run info
//   kv-aot-run LIB.so [--entry main] [--backend cuda|cpu|reference]
//              [--model FILE | --synthetic NAME] [--input NAME=FILE]...
//              [--text NAME=STRING]... [--text-file NAME=FILE]... [--bos NAME]
//              [--tokenizer FILE] [--synthesize-inputs]
//              [--compare-full-prefill] [--kv-store URL ...]
//              [--json] ...
//   kv-aot-run bench-attention LIB.so [--synthetic NAME] [--context N]
//              [--runs R] [--iters K]
//   kv-aot-run compare A.f32 B.f32 [--tolerance T]
//
// Exit status: 0 success, 1 a failed run or check, 2 a usage or setup error
// (no driver, no device, a library that is not a kv program), with its
// message.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/ForwardCall.h"
#include "runtime/core/KVElement.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaRuntime.h"
#include "runtime/exec/BlockStoreOptions.h"
#include "runtime/exec/Session.h"
#include "runtime/exec/Text.h"
#include "tools/kv-run/Report.h"

#include <dlfcn.h>

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace kvir;

namespace {

int usageError(const std::string &message) {
  std::fprintf(stderr, "kv-aot-run: error: %s\n", message.c_str());
  return 2;
}

const char *kUsage =
    "usage: kv-aot-run info\n"
    "       kv-aot-run LIB.so [options]\n"
    "       kv-aot-run bench-attention LIB.so [options]\n"
    "       kv-aot-run compare A.f32 B.f32 [--tolerance T]\n"
    "options:\n"
    "  --entry NAME            function to run (default main)\n"
    "  --backend NAME          cuda (default for GPU programs), cpu (default "
    "for CPU programs) or reference\n"
    "  --model FILE            llama2.c checkpoint (default: a synthetic "
    "model)\n"
    "  --synthetic NAME        default, synthetic-test or synthetic-bench\n"
    "  --model-seed N          seed of the synthetic model\n"
    "  --input NAME=FILE       binds an argument (argN or its kv.name)\n"
    "  --text NAME=STRING      binds a token argument to the encoding of "
    "STRING\n"
    "  --text-file NAME=FILE   ... of the text in FILE\n"
    "  --bos NAME              BOS in front of the text argument NAME\n"
    "  --tokenizer FILE        llama2.c tokenizer (default: tok<vocab>.bin "
    "beside --model)\n"
    "  --no-tokenizer          none, even where one lies beside the model\n"
    "  --synthesize-inputs     seeded inputs for the arguments not given\n"
    "  --sample-length N       length of a synthesized dynamic argument\n"
    "  --seed N                seed of synthesized inputs\n"
    "  --compare-full-prefill  cost and fidelity against a full prefill\n"
    "  --greedy N              greedy continuation tokens\n"
    "  --dump-logits FILE      the answer's logits as float32\n"
    "  --json                  the report as JSON\n"
    "  --page-tokens N, --pool-pages N   the KV pool\n"
    "  --max-context N         refuse positions at or beyond N (default: 8 "
    "times the\n                          trained context; 0: no limit)\n"
    "  --kv-store URL          block store of kv.load_block/kv.store_block: "
    "memory or\n                          redis://HOST[:PORT][/DB] "
    "(docs/block-store.md)\n"
    "  --kv-store-prefix P, --kv-store-ttl S, --kv-store-timeout-ms MS,\n"
    "  --kv-store-policy fallback|fail   its key prefix (kvir:), expiry "
    "(none), "
    "timeout\n                          (2000) and what a fault does "
    "(fallback: prefill)\n"
    "  --context N, --runs R, --iters K  bench-attention: keys, runs, calls\n"
    "  --tolerance T           compare: the largest |a - b| allowed (1e-3)\n";

struct Args {
  std::string command = "run", library, entry = "main", backend;
  std::string model, synthetic = "default", dumpLogits;
  uint64_t modelSeed = 0;
  exec::InputOptions inputs;
  exec::TextOptions text;
  exec::StoreOptions store;
  bool compareFull = false, json = false;
  int64_t greedy = -1, pageTokens = 16, poolPages = 8192, maxContext = -1;
  int64_t context = 16384, runs = 16, iters = 5;
  double tolerance = 1e-3;
  std::vector<std::string> files;
};

bool parseInt(const char *text, int64_t &out) {
  char *end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  if (!*text || *end)
    return false;
  out = v;
  return true;
}

bool parse(int argc, char **argv, Args &a, std::string &problem) {
  int i = 1;
  if (i < argc && (std::string(argv[i]) == "info" ||
                   std::string(argv[i]) == "bench-attention" ||
                   std::string(argv[i]) == "compare"))
    a.command = argv[i++];
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string &out) {
      if (i + 1 >= argc) {
        problem = arg + " needs a value";
        return false;
      }
      out = argv[++i];
      return true;
    };
    auto number = [&](int64_t &out) {
      std::string text;
      if (!value(text))
        return false;
      if (!parseInt(text.c_str(), out)) {
        problem = arg + " needs an integer, got '" + text + "'";
        return false;
      }
      return true;
    };
    std::string text;
    int64_t n = 0;
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--entry") {
      if (!value(a.entry))
        return false;
    } else if (arg == "--backend") {
      if (!value(a.backend))
        return false;
    } else if (arg == "--model") {
      if (!value(a.model))
        return false;
    } else if (arg == "--synthetic") {
      if (!value(a.synthetic))
        return false;
    } else if (arg == "--model-seed") {
      if (!number(n))
        return false;
      a.modelSeed = uint64_t(n);
    } else if (arg == "--input") {
      if (!value(text))
        return false;
      size_t eq = text.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
        problem = "--input expects NAME=FILE, got '" + text + "'";
        return false;
      }
      std::string name = text.substr(0, eq), file = text.substr(eq + 1), data;
      if (!exec::readFile(file, data, problem, "input file"))
        return false;
      if (a.inputs.given.count(name)) {
        problem = "--input " + name + " is given twice";
        return false;
      }
      a.inputs.given[name] = {data, "'" + file + "'"};
    } else if (arg == "--text" || arg == "--text-file") {
      if (!value(text))
        return false;
      exec::TextOptions::Item item{"", "", arg, arg};
      std::string file;
      if (!exec::splitNameValue(text, arg, item.name,
                                arg == "--text" ? item.text : file, problem))
        return false;
      if (arg == "--text-file") {
        item.source = "'" + file + "'";
        if (file.empty()) {
          problem = "--text-file " + item.name + ": an empty file name";
          return false;
        }
        if (!exec::readFile(file, item.text, problem, "text file"))
          return false;
      }
      a.text.texts.push_back(item);
    } else if (arg == "--bos") {
      if (!value(text))
        return false;
      a.text.bos.insert(text);
    } else if (arg == "--tokenizer") {
      if (!value(a.text.tokenizer))
        return false;
      if (a.text.tokenizer.empty()) {
        problem = "--tokenizer: an empty file name";
        return false;
      }
    } else if (arg == "--no-tokenizer") {
      a.text.noTokenizer = true;
    } else if (arg == "--attribute") {
      problem = "--attribute is kv-run's: its auxiliary entry is derived "
                "when the program is compiled just in time";
      return false;
    } else if (arg == "--synthesize-inputs") {
      a.inputs.synthesize = true;
    } else if (arg == "--sample-length") {
      if (!number(a.inputs.dynamicLength))
        return false;
    } else if (arg == "--seed") {
      if (!number(n))
        return false;
      a.inputs.seed = uint64_t(n);
    } else if (arg == "--compare-full-prefill") {
      a.compareFull = true;
    } else if (arg == "--greedy") {
      if (!number(a.greedy))
        return false;
      if (a.greedy < 0) {
        problem =
            "--greedy must not be negative, got " + std::to_string(a.greedy);
        return false;
      }
    } else if (arg == "--max-context") {
      if (!number(a.maxContext))
        return false;
      if (a.maxContext < 0) {
        problem = "--max-context must not be negative, got " +
                  std::to_string(a.maxContext);
        return false;
      }
    } else if (arg == "--kv-store") {
      if (!value(a.store.url))
        return false;
    } else if (arg == "--kv-store-prefix") {
      if (!value(a.store.prefix))
        return false;
      a.store.prefixGiven = true;
    } else if (arg == "--kv-store-ttl") {
      if (!number(a.store.ttlSeconds))
        return false;
      a.store.ttlGiven = true;
    } else if (arg == "--kv-store-timeout-ms") {
      if (!number(a.store.timeoutMs))
        return false;
      a.store.timeoutGiven = true;
    } else if (arg == "--kv-store-policy") {
      if (!value(a.store.policy))
        return false;
      a.store.policyGiven = true;
    } else if (arg == "--dump-logits") {
      if (!value(a.dumpLogits))
        return false;
    } else if (arg == "--json") {
      a.json = true;
    } else if (arg == "--page-tokens") {
      if (!number(a.pageTokens))
        return false;
    } else if (arg == "--pool-pages") {
      if (!number(a.poolPages))
        return false;
    } else if (arg == "--context") {
      if (!number(a.context))
        return false;
    } else if (arg == "--runs") {
      if (!number(a.runs))
        return false;
    } else if (arg == "--iters") {
      if (!number(a.iters))
        return false;
    } else if (arg == "--tolerance") {
      if (!value(text))
        return false;
      char *end = nullptr;
      a.tolerance = std::strtod(text.c_str(), &end);
      if (text.empty() || *end || !(a.tolerance >= 0)) {
        problem = "--tolerance needs a non-negative number, got '" + text + "'";
        return false;
      }
    } else if (a.command == "compare" && arg.size() > 0 && arg[0] != '-') {
      a.files.push_back(arg);
    } else if (a.library.empty() && arg.size() > 0 && arg[0] != '-') {
      a.library = arg;
    } else {
      problem = "unknown argument '" + arg + "' (kv-aot-run --help)";
      return false;
    }
  }
  if (a.command == "compare" && a.files.size() != 2) {
    problem = "compare needs two float32 files (kv-aot-run --help)";
    return false;
  }
  if (a.command != "info" && a.command != "compare" && a.library.empty()) {
    problem = "no program library given (kv-aot-run --help)";
    return false;
  }
  return true;
}

using ModelPtr = std::unique_ptr<kvrt_model, void (*)(kvrt_model *)>;
using PoolPtr = std::unique_ptr<kvrt_pool, void (*)(kvrt_pool *)>;

/// A loaded program library: its manifest and entry.
struct Library {
  void *handle = nullptr;
  exec::EntryManifest manifest;
  exec::EntryFn entry = nullptr;

  /// The library's forward of `config` on pages of the manifest's type
  /// (null members if it holds none).
  Forward forward(const kvrt_model_config &config) {
    Forward f;
    key = configKey(config, manifest.kvDtype);
    f.key = key.c_str();
    std::string prefix = forwardPrefix(config, manifest.kvDtype);
    f.prefill = reinterpret_cast<kvrt_prefill_fn>(
        dlsym(handle, (prefix + "_prefill").c_str()));
    f.attention = reinterpret_cast<kvrt_attention_fn>(
        dlsym(handle, (prefix + "_attention").c_str()));
    f.materialize = reinterpret_cast<kvrt_materialize_fn>(
        dlsym(handle, (prefix + "_materialize").c_str()));
    return f;
  }

private:
  std::string key;
};

/// Opens `path` and reads the manifest of `entry`.
bool openLibrary(const std::string &path, const std::string &entry,
                 Library &out, std::string &error) {
  // The library's constructor loads its GPU binary (mgpuModuleLoad): the
  // driver has been checked before, so a failure is recorded, not a crash.
  out.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!out.handle) {
    const char *why = dlerror();
    error = "cannot load the program library " + path + ": " +
            (why ? why : "unknown reason");
    return false;
  }
  auto *text = static_cast<const char *>(
      dlsym(out.handle, exec::manifestSymbol(entry).c_str()));
  if (!text) {
    error = path + " has no entry @" + entry + " (no " +
            exec::manifestSymbol(entry) + "; was it compiled by kv-aot " +
            "with --entry " + entry + "?)";
    return false;
  }
  if (!exec::EntryManifest::parse(text, out.manifest, error)) {
    error = path + ": " + error;
    return false;
  }
  out.entry = reinterpret_cast<exec::EntryFn>(
      dlsym(out.handle, exec::entrySymbol(entry).c_str()));
  if (!out.entry) {
    error = path + " has no " + exec::entrySymbol(entry);
    return false;
  }
  if (out.manifest.target == "gpu" && kvrt_cuda_check() != KVRT_OK) {
    error = std::string("loading the program's GPU kernels failed: ") +
            kvrt_last_error();
    return false;
  }
  return true;
}

/// The target of the program library at `path` as its NAME.manifest beside
/// it says (kv-aot writes lib NAME.so and NAME.manifest), or "". Read without
/// loading the library: its constructor loads GPU kernels, which needs the
/// driver checked first.
std::string targetBeside(const std::string &path) {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  std::string file = slash == std::string::npos ? path : path.substr(slash + 1);
  if (file.rfind("lib", 0) != 0 || file.size() <= 6 ||
      file.compare(file.size() - 3, 3, ".so") != 0)
    return "";
  std::string text, ignored;
  exec::EntryManifest manifest;
  if (!exec::readFile(dir + "/" + file.substr(3, file.size() - 6) + ".manifest",
                      text, ignored) ||
      !exec::EntryManifest::parse(text, manifest, ignored))
    return "";
  return manifest.target;
}

/// Compares two float32 files: max |a - b| against `tolerance`.
int compare(const Args &a) {
  std::vector<float> values[2];
  for (int i = 0; i < 2; ++i) {
    std::string bytes, error;
    if (!exec::readFile(a.files[i], bytes, error, "float32 file"))
      return usageError(error);
    if (bytes.size() % sizeof(float) != 0)
      return usageError(a.files[i] + " is not a file of float32 values");
    values[i].resize(bytes.size() / sizeof(float));
    std::memcpy(values[i].data(), bytes.data(), bytes.size());
  }
  if (values[0].size() != values[1].size()) {
    std::printf("FAIL  %s has %zu values, %s %zu\n", a.files[0].c_str(),
                values[0].size(), a.files[1].c_str(), values[1].size());
    return 1;
  }
  double worst = 0;
  for (size_t i = 0; i < values[0].size(); ++i) {
    double d = std::fabs(double(values[0][i]) - double(values[1][i]));
    if (!(d <= worst))
      worst = std::isnan(d) ? INFINITY : d;
  }
  bool pass = worst <= a.tolerance;
  std::printf("%s  %s vs %s: max |diff| = %.3g (tolerance %.0e, %zu values)\n",
              pass ? "PASS" : "FAIL", a.files[0].c_str(), a.files[1].c_str(),
              worst, a.tolerance, values[0].size());
  return pass ? 0 : 1;
}

int info() {
  if (kvrt_cuda_init() != KVRT_OK)
    return usageError(kvrt_last_error());
  std::printf("device: %s\n", kvrt_cuda_device_name());
  return 0;
}

/// Runs the program and prints kv-run's report.
int runProgram(Args &a) {
  std::string error, description;
  // The store's options are checked before anything loads; nothing is
  // connected until the first block op.
  exec::BlockStoreRef store(nullptr, kvrt_block_store_release);
  exec::BlockStoreBinding storeBinding;
  if (!exec::openBlockStore(a.store, store, storeBinding, error))
    return usageError(error);
  ModelPtr model(
      exec::loadModel(a.model, a.synthetic, a.modelSeed, description, error),
      kvrt_model_release);
  if (!model)
    return usageError(error);
  // Which backend: the library's target decides the default, read from the
  // manifest beside it (opening the library runs its constructor, which
  // loads GPU kernels); the backend is created before the library is opened,
  // so that a missing driver is a message and not a failure inside the
  // library's constructor.
  std::string backendName = a.backend;
  if (backendName.empty())
    backendName = targetBeside(a.library) == "cpu" ? "cpu" : "cuda";
  std::unique_ptr<ComputeBackend> backend =
      exec::createBackend(backendName, model.get(), error);
  if (!backend)
    return usageError(error);
  Library library;
  if (!openLibrary(a.library, a.entry, library, error))
    return usageError(error);
  if (backend->runsGeneratedCode() &&
      (library.manifest.target == "gpu") != (backendName == "cuda"))
    return usageError("the program was compiled for the " +
                      library.manifest.target + ", the backend is " +
                      backendName);

  kvrt_model_config config;
  kvrt_model_get_config(model.get(), &config);
  if (a.pageTokens <= 0 || a.poolPages <= 0)
    return usageError("--page-tokens and --pool-pages must be positive");
  kvrt_pool_config pc;
  kvrt_pool_config_for_model(model.get(), &pc);
  pc.dtype = library.manifest.kvDtype;
  pc.page_tokens = int32_t(a.pageTokens);
  pc.capacity_pages = a.poolPages;
  kvrt_pool *rawPool = nullptr;
  if (kvrt_pool_create(&pc, &rawPool))
    return usageError(std::string("cannot create the kv pool: ") +
                      kvrt_last_error());
  PoolPtr pool(rawPool, kvrt_pool_release);

  run::Report report;
  exec::TokenizerRef tokenizer;
  if (!exec::findTokenizer(a.text, a.model, config.vocab_size, tokenizer,
                           report.tokenizer, error) ||
      !exec::encodeTextInputs(a.text, tokenizer.get(), a.inputs, error))
    return usageError(error);
  int64_t limit =
      a.maxContext >= 0 ? a.maxContext : exec::defaultMaxContext(config);
  a.inputs.maxSynthesized = a.poolPages * a.pageTokens;
  if (limit > 0)
    a.inputs.maxSynthesized = std::min(a.inputs.maxSynthesized, limit);
  std::vector<exec::Value> args;
  if (!exec::bindArguments(library.manifest, config, a.inputs, args,
                           &report.inputs, error)) {
    std::fprintf(stderr, "kv-aot-run: error: %s\n", error.c_str());
    return 1;
  }
  exec::RunOutcome outcome =
      exec::runEntry(library.entry, library.manifest, *backend, model.get(),
                     pool.get(), args, limit, &storeBinding);
  auto siteOf = [&](int32_t site) {
    return site >= 0 && size_t(site) < library.manifest.sites.size()
               ? library.manifest.sites[site] + ": "
               : std::string();
  };
  // Faults the policy let the run go on after: a warning naming the op.
  for (const exec::BlockEvent &e : outcome.blockEvents)
    if (e.event.outcome == KVRT_EXEC_BLOCK_FAULT && e.event.fell_back)
      std::fprintf(stderr, "%swarning: %s\n", siteOf(e.event.site).c_str(),
                   exec::describeBlockEvent(e).c_str());
  if (outcome.failed) {
    std::fprintf(stderr, "%serror: %s\n", siteOf(outcome.site).c_str(),
                 outcome.message.c_str());
    return 1;
  }
  report.program = a.library;
  report.entry = a.entry;
  report.model = description;
  report.backend = backend->name();
  report.config = run::describeConfig(config);
  run::MeasureOptions measure;
  measure.greedy = a.greedy >= 0 ? a.greedy : (a.compareFull ? 16 : 0);
  measure.compareFull = a.compareFull;
  measure.dumpLogits = a.dumpLogits;
  measure.tokenizer = tokenizer.get();
  measure.maxContext = limit;
  Forward forward = library.forward(config);
  if ((measure.greedy > 0 || a.compareFull) && backend->runsGeneratedCode() &&
      !forward.prefill)
    return usageError("the library has no forward for the model [" +
                      configKey(config, KVRT_KV_F32) +
                      "]: compile it with kv-aot --model, or run a model of "
                      "the program's config");
  if (!run::completeReport(report, outcome, library.manifest.hasPlanOps,
                           *backend, forward, model.get(), pool.get(), measure,
                           error)) {
    std::fprintf(stderr, "kv-aot-run: error: %s\n", error.c_str());
    return 1;
  }
  run::addBlockStore(report, store.get(), storeBinding.policy, outcome);
  if (a.json)
    run::printJson(report);
  else
    run::printText(report);
  return 0;
}

/// A view of `tokens` slots of K/V filled with a pattern (contents do not
/// matter to bandwidth), as one run or `runs` runs with offsets.
kvrt_status patternView(const kvrt_model *model, kvrt_kv_dtype dtype,
                        int64_t tokens, int64_t runs, kvrt_pool **poolOut,
                        kvrt_view **out) {
  kvrt_pool_config pc;
  if (kvrt_status s = kvrt_pool_config_for_model(model, &pc))
    return s;
  pc.dtype = dtype;
  int64_t nPages = (tokens + pc.page_tokens - 1) / pc.page_tokens;
  pc.capacity_pages = 2 * nPages + 4096;
  if (kvrt_status s = kvrt_pool_create(&pc, poolOut))
    return s;
  kvrt_page_layout layout;
  kvrt_pool_get_layout(*poolOut, &layout);
  std::vector<int32_t> pages(nPages);
  if (kvrt_status s = kvrt_pool_alloc_pages(*poolOut, nPages, pages.data()))
    return s;
  for (int64_t p = 0; p < nPages; ++p) {
    void *data = nullptr;
    kvrt_pool_page_bytes(*poolOut, pages[p], &data);
    for (int64_t i = 0; i < layout.page_stride; ++i)
      kvrt::storeElement(data, i, dtype,
                         float((i * 13 + p * 7) % 23) * 0.01f - 0.1f);
    kvrt_pool_seal_page(*poolOut, pages[p]);
  }
  std::vector<int32_t> ids(tokens);
  for (int64_t i = 0; i < tokens; ++i)
    ids[i] = int32_t(i % 97);
  kvrt_view *view = nullptr;
  if (kvrt_status s = kvrt_view_create(*poolOut, &view))
    return s;
  int64_t perRun = tokens / runs;
  for (int64_t r = 0; r < runs; ++r) {
    int64_t begin = r * perRun, n = r + 1 == runs ? tokens - begin : perRun;
    // Run r's keys were stored at positions 0.. and sit at begin + Δ.
    kvrt_run run{pages.data() + begin / pc.page_tokens,
                 (begin % pc.page_tokens + n + pc.page_tokens - 1) /
                     pc.page_tokens,
                 begin % pc.page_tokens,
                 n,
                 0,
                 begin,
                 ids.data() + begin,
                 "bench"};
    kvrt_view *next = nullptr;
    kvrt_status s = kvrt_view_append(view, &run, &next);
    kvrt_view_release(view);
    if (s)
      return s;
    view = next;
  }
  for (int32_t page : pages)
    kvrt_pool_release_page(*poolOut, page);
  *out = view;
  return KVRT_OK;
}

/// Decode attention of one query over `context` keys, every layer, on the
/// GPU: bytes of K/V read per second, and R shifted runs against one run.
int benchAttention(Args &a) {
  std::string error, description;
  if (a.synthetic == "default")
    a.synthetic = "synthetic-bench";
  ModelPtr model(
      exec::loadModel(a.model, a.synthetic, a.modelSeed, description, error),
      kvrt_model_release);
  if (!model)
    return usageError(error);
  std::unique_ptr<cuda::CudaComputeBackend> gpu =
      cuda::createCudaBackend(model.get(), &error);
  if (!gpu)
    return usageError(error);
  Library library;
  if (!openLibrary(a.library, a.entry, library, error))
    return usageError(error);
  kvrt_model_config c;
  kvrt_model_get_config(model.get(), &c);
  Forward forward = library.forward(c);
  if (!forward.attention)
    return usageError("the library has no forward for [" +
                      configKey(c, library.manifest.kvDtype) + "]");
  if (a.context <= 0 || a.runs <= 0 || a.iters <= 0)
    return usageError("--context, --runs and --iters must be positive");
  std::printf("device: %s\nmodel: %s\n", kvrt_cuda_device_name(),
              description.c_str());
  double seconds[2] = {0, 0};
  int64_t runCounts[2] = {1, a.runs};
  for (int k = 0; k < 2; ++k) {
    kvrt_pool *pool = nullptr;
    kvrt_view *view = nullptr;
    if (patternView(model.get(), library.manifest.kvDtype, a.context,
                    runCounts[k], &pool, &view))
      return usageError(kvrt_last_error());
    double total = 0;
    for (int32_t layer = 0; layer < c.n_layers; ++layer) {
      double t = 0;
      if (gpu->timeAttention(forward, model.get(), view, a.context + 1, layer,
                             int(a.iters), &t)) {
        error = kvrt_last_error();
        kvrt_view_release(view);
        kvrt_pool_release(pool);
        return usageError(error);
      }
      total += t;
    }
    seconds[k] = total;
    kvrt_view_release(view);
    kvrt_pool_release(pool);
  }
  double bytes = double(a.context) * c.n_layers * 2 * kvDim(c) * 4;
  std::printf("decode attention, %lld keys x %d layers (%.3f GB of f32 K/V): "
              "%.3f ms, %.1f GB/s\n",
              (long long)a.context, c.n_layers, bytes / 1e9, seconds[0] * 1e3,
              bytes / seconds[0] / 1e9);
  std::printf("%lld shifted runs vs 1 run: %.3f ms, %.3fx\n", (long long)a.runs,
              seconds[1] * 1e3, seconds[1] / seconds[0]);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  // Generated code calls the exec ABI through this executable's exported
  // symbols; taking their addresses keeps every one of them linked in.
  if (!kvrt_exec_symbols()->name)
    return usageError("internal error: no exec ABI");
  Args args;
  std::string problem;
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (!parse(argc, argv, args, problem))
    return usageError(problem);
  if (args.command == "info")
    return info();
  if (args.command == "bench-attention")
    return benchAttention(args);
  if (args.command == "compare")
    return compare(args);
  return runProgram(args);
}
