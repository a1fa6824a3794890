//===- kv-aot-run.cpp - Run kv programs compiled ahead of time --*- C++ -*-===//
//
// The runner of kv-aot's libraries, for machines without LLVM/MLIR (the GPU
// machine): links the runtime only (the exec ABI, the backends, the CUDA
// driver layer), loads a program library with dlopen, binds its entry from
// the manifest the library embeds, runs it and prints the same report as
// kv-run (docs/gpu-backend.md). The options, the run and the report are the
// runner's (driver/runner), shared with kv-run; what is here is the library
// and the commands of this tool.
//
//   kv-aot-run info
//   kv-aot-run LIB.so [--entry main] [--backend cuda|cpu|reference]
//              [--model FILE | --synthetic NAME] [--input NAME=FILE]...
//              [--text NAME=STRING]... [--text-file NAME=FILE]... [--bos NAME]
//              [--tokenizer FILE] [--synthesize-inputs]
//              [--compare-full-prefill] [--kv-store URL ...]
//              [--json] ...
//   kv-aot-run bench-attention LIB.so [--entry E] [--synthetic NAME]
//              [--context N] [--runs R] [--iters K]
//   kv-aot-run compare A.f32 B.f32 [--tolerance T]
//
// Exit status: 0 success, 1 a failed run (a launch or copy that fails
// included) or check, 2 a usage or setup error (no driver, no device, a
// library that is not a kv program or lacks the entry), with its message.
// bench-attention prints each figure with its target and whether it is met
// (docs/gpu-backend.md); a target missed is not an error.
//
//===----------------------------------------------------------------------===//

#include "driver/runner/ProgramLibrary.h"
#include "driver/runner/Runner.h"
#include "driver/version/Version.h"

#include "runtime/core/ForwardCall.h"
#include "runtime/core/KVElement.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaRuntime.h"

#include <dlfcn.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace kvir;
using namespace kvir::run;

namespace {

int usageError(const std::string &message) {
  std::fprintf(stderr, "kv-aot-run: error: %s\n", message.c_str());
  return 2;
}

const char *kUsage =
    "kv-aot-run: run kv programs kv-aot compiled ahead of time, on machines "
    "without\nLLVM (docs/gpu-backend.md)\n\n"
    "usage: kv-aot-run info\n"
    "       kv-aot-run LIB.so [options]\n"
    "       kv-aot-run bench-attention LIB.so [options]\n"
    "       kv-aot-run compare A.f32 B.f32 [--tolerance T]\n";

/// The command line: a command, its files, the runners' options and this
/// tool's own.
struct Args {
  std::string command = "run", library;
  std::vector<std::string> files;
  RunOptions run;
  int64_t context = 16384, runs = 16, iters = 5;
  double tolerance = 1e-3;
};

/// Declares the options: the runners' and this tool's own.
void declareOptions(OptionParser &parser, Args &a) {
  addRunOptions(parser, a.run);
  parser.section("kv-aot-run's own");
  parser.integer("context", "N",
                 "bench-attention: keys attended (default 16384)", a.context);
  parser.integer("runs", "N",
                 "bench-attention: the shifted runs compared against one "
                 "(default 16)",
                 a.runs);
  parser.integer("iters", "N",
                 "bench-attention: calls timed per layer (default 5)", a.iters);
  parser.custom(
      "tolerance", "T", "compare: the largest |a - b| allowed (default 1e-3)",
      [&a](const std::string &text, std::string &error) {
        char *end = nullptr;
        a.tolerance = std::strtod(text.c_str(), &end);
        if (text.empty() || *end || !(a.tolerance >= 0)) {
          error = "--tolerance needs a non-negative number, got '" + text + "'";
          return false;
        }
        return true;
      });
  parser.refuse("attribute",
                "--attribute is kv-run's: its auxiliary entry is derived "
                "when the program is compiled just in time");
}

/// Reads the command line into `a`; false with `problem`.
bool parse(int argc, char **argv, OptionParser &parser, Args &a,
           std::string &problem) {
  int first = 1;
  if (first < argc && (std::string(argv[first]) == "info" ||
                       std::string(argv[first]) == "bench-attention" ||
                       std::string(argv[first]) == "compare"))
    a.command = argv[first++];
  std::vector<std::string> positionals;
  if (!parser.parse(argc, argv, first, positionals, problem))
    return false;
  if (parser.helpRequested() || parser.versionRequested())
    return true;
  if (a.command == "compare") {
    a.files = positionals;
    if (a.files.size() != 2) {
      problem = "compare needs two float32 files (kv-aot-run --help)";
      return false;
    }
    return true;
  }
  if (positionals.size() > 1) {
    problem = "unknown argument '" + positionals[1] + "' (kv-aot-run --help)";
    return false;
  }
  if (!positionals.empty())
    a.library = positionals[0];
  if (a.command != "info" && a.library.empty()) {
    problem = "no program library given (kv-aot-run --help)";
    return false;
  }
  return true;
}

using ModelPtr = std::unique_ptr<kvrt_model, void (*)(kvrt_model *)>;

/// Checks, before any backend is created, that `path` is a file that can be
/// a program library (an ELF shared object, as kv-aot writes): a missing
/// file or a program's source is named as such, not hidden behind a backend
/// that cannot start.
bool checkLibraryFile(const std::string &path, std::string &error) {
  std::FILE *file = std::fopen(path.c_str(), "rb");
  if (!file) {
    error = "cannot open the program library '" + path +
            "': " + std::strerror(errno);
    return false;
  }
  char magic[4] = {};
  size_t n = std::fread(magic, 1, sizeof(magic), file);
  std::fclose(file);
  if (n == sizeof(magic) && std::memcmp(magic,
                                        "\x7f"
                                        "ELF",
                                        4) == 0)
    return true;
  std::string hint =
      path.size() > 5 && path.compare(path.size() - 5, 5, ".mlir") == 0
          ? "; a kv program in MLIR runs with kv-run, or is "
            "compiled for kv-aot-run by kv-aot"
          : "";
  error = "'" + path +
          "' is not a program library (an ELF shared object kv-aot wrote, "
          "libNAME.so)" +
          hint;
  return false;
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
    if (!bytes.empty()) // memcpy from an empty string's data() is undefined
      std::memcpy(values[i].data(), bytes.data(), bytes.size());
  }
  // A comparison of nothing would pass whatever the GPU computed.
  if (values[0].empty() || values[1].empty()) {
    std::printf("FAIL  %s vs %s: nothing to compare (%zu and %zu values)\n",
                a.files[0].c_str(), a.files[1].c_str(), values[0].size(),
                values[1].size());
    return 1;
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
  std::printf("device: %s\n", kvrt_cuda_device_description());
  return 0;
}

/// Runs the program and prints kv-run's report.
int runProgram(const Args &a) {
  const RunOptions &o = a.run;
  std::string error;
  exec::InputOptions inputs;
  exec::TextOptions text;
  if (!checkLibraryFile(a.library, error) ||
      !readInputFiles(o.request, inputs, error) ||
      !readTextOptions(o.runner, o.request, /*onePrompt=*/false, text, error))
    return usageError(error);
  // Which backend: the library's target decides the default, read from the
  // manifest beside it (opening the library runs its constructor, which
  // loads GPU kernels); the backend is created before the library is opened,
  // so that a missing driver is a message and not a failure inside the
  // library's constructor.
  RunnerOptions runnerOptions = o.runner;
  if (runnerOptions.backend.empty())
    runnerOptions.backend = targetBeside(a.library) == "cpu" ? "cpu" : "cuda";
  std::unique_ptr<Runner> runner = Runner::create(runnerOptions, error);
  if (!runner)
    return usageError(error);
  ProgramLibrary library;
  if (!openProgramLibrary(a.library, o.request.entry, library, error))
    return usageError(error);
  if (runner->backend().runsGeneratedCode() &&
      (library.manifest.target == "gpu") != (runnerOptions.backend == "cuda"))
    return usageError("the program was compiled for the " +
                      library.manifest.target + ", the backend is " +
                      runnerOptions.backend);
  if (!runner->preparePool(library.manifest.kvDtype, /*fromProgram=*/true,
                           error) ||
      !runner->encodeInputs(text, inputs, error))
    return usageError(error);

  Report report;
  std::vector<exec::Value> args;
  if (!runner->bind(library.manifest, inputs, args, report, error)) {
    std::fprintf(stderr, "kv-aot-run: error: %s\n", error.c_str());
    return 1;
  }
  const kvrt_model_config &config = runner->config();
  if (runner->backend().runsGeneratedCode())
    if (std::string problem = library.checkFormats(runner->model());
        !problem.empty())
      return usageError(problem);
  Entry entry{library.entry, &library.manifest, library.forward(config),
              a.library};
  exec::RunOutcome outcome = runner->run(entry, args);
  std::string warning = runner->contextWarning(outcome.contextTokens);
  if (!warning.empty())
    std::fprintf(stderr, "kv-aot-run: warning: %s\n", warning.c_str());
  // Block store faults the policy let the run go on after, and a failure,
  // named by their op's location.
  auto atSite = [&](int32_t site, bool isError, const std::string &message) {
    std::string where =
        site >= 0 && size_t(site) < library.manifest.sites.size()
            ? library.manifest.sites[site] + ": "
            : std::string();
    std::fprintf(stderr, "%s%s: %s\n", where.c_str(),
                 isError ? "error" : "warning", message.c_str());
  };
  if (!Runner::reportProblems(outcome, atSite))
    return 1;
  if ((o.request.greedyTokens() > 0 || o.request.compareFull) &&
      runner->backend().runsGeneratedCode() && !entry.forward.prefill)
    return usageError("the library has no forward for the model [" +
                      configKey(config, KVRT_KV_F32) +
                      "]: compile it with kv-aot --model, or run a model of "
                      "the program's config");
  if (!runner->complete(report, entry, outcome, o.request,
                        /*reference=*/nullptr, error)) {
    std::fprintf(stderr, "kv-aot-run: error: %s\n", error.c_str());
    return 1;
  }
  printReport(report, o.request.json);
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

/// The targets docs/gpu-backend.md sets the decode attention: a fraction of
/// an H200's memory bandwidth, and R shifted runs at most this much slower
/// than one run.
constexpr double kH200GBs = 4800, kBandwidthTarget = 0.70,
                 kShiftedRunsTarget = 1.10;

/// "  target: WHAT LIMIT: met" or "... NOT met".
void printTarget(const char *what, double limit, const char *unit, bool met) {
  std::printf("  target: %s %g%s: %s\n", what, limit, unit,
              met ? "met" : "NOT met");
}

/// Decode attention of one query over `context` keys, every layer, on the
/// GPU: bytes of K/V read per second, and R shifted runs against one run,
/// each against its target.
int benchAttention(Args &a) {
  std::string error, description;
  if (!checkLibraryFile(a.library, error))
    return usageError(error);
  if (a.run.runner.synthetic == "default")
    a.run.runner.synthetic = "synthetic-bench";
  ModelPtr model(exec::loadModel(a.run.runner.model, a.run.runner.synthetic,
                                 a.run.runner.modelSeed,
                                 a.run.runner.loadFlags(), description, error),
                 kvrt_model_release);
  if (!model)
    return usageError(error);
  std::unique_ptr<cuda::CudaComputeBackend> gpu =
      cuda::createCudaBackend(model.get(), &error);
  if (!gpu)
    return usageError(error);
  ProgramLibrary library;
  if (!openProgramLibrary(a.library, a.run.request.entry, library, error))
    return usageError(error);
  kvrt_model_config c;
  kvrt_model_get_config(model.get(), &c);
  if (std::string problem = library.checkFormats(model.get()); !problem.empty())
    return usageError(problem);
  Forward forward = library.forward(c);
  if (!forward.attention)
    return usageError("the library has no forward for [" +
                      configKey(c, library.manifest.kvDtype) + "]");
  if (a.context <= 0 || a.runs <= 0 || a.iters <= 0)
    return usageError("--context, --runs and --iters must be positive");
  std::printf("device: %s\nmodel: %s\n", kvrt_cuda_device_description(),
              description.c_str());
  double seconds[2] = {0, 0};
  int64_t runCounts[2] = {1, a.runs};
  int32_t elementBytes = 4;
  for (int k = 0; k < 2; ++k) {
    kvrt_pool *pool = nullptr;
    kvrt_view *view = nullptr;
    if (patternView(model.get(), library.manifest.kvDtype, a.context,
                    runCounts[k], &pool, &view))
      return usageError(kvrt_last_error());
    kvrt_page_layout layout;
    kvrt_pool_get_layout(pool, &layout);
    elementBytes = layout.element_bytes;
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
  double bytes = double(a.context) * c.n_layers * 2 * kvDim(c) * elementBytes;
  double gbs = bytes / seconds[0] / 1e9, ratio = seconds[1] / seconds[0];
  std::printf("decode attention, %lld keys x %d layers (%.3f GB of %s K/V): "
              "%.3f ms, %.1f GB/s (%.1f%% of an H200's %.0f GB/s)\n",
              (long long)a.context, c.n_layers, bytes / 1e9,
              kvDtypeName(library.manifest.kvDtype), seconds[0] * 1e3, gbs,
              100 * gbs / kH200GBs, kH200GBs);
  char share[64];
  std::snprintf(share, sizeof(share), " GB/s (%.0f%% of an H200's)",
                100 * kBandwidthTarget);
  printTarget("bandwidth >=", kBandwidthTarget * kH200GBs, share,
              gbs >= kBandwidthTarget * kH200GBs);
  std::printf("%lld shifted runs vs 1 run: %.3f ms, %.3fx\n", (long long)a.runs,
              seconds[1] * 1e3, ratio);
  printTarget("shifted runs <=", kShiftedRunsTarget, "x the time of one run",
              ratio <= kShiftedRunsTarget);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  // Generated code calls the exec ABI through this executable's exported
  // symbols; taking their addresses keeps every one of them linked in.
  if (!kvrt_exec_symbols()->name)
    return usageError("internal error: no exec ABI");
  Args args;
  OptionParser parser("kv-aot-run");
  declareOptions(parser, args);
  if (argc < 2) {
    std::fprintf(stderr, "%s\nkv-aot-run --help lists the options\n", kUsage);
    return 2;
  }
  std::string problem;
  if (!parse(argc, argv, parser, args, problem))
    return usageError(problem);
  if (parser.helpRequested()) {
    parser.printHelp(stdout, kUsage);
    return 0;
  }
  if (parser.versionRequested()) {
    std::fputs(versionText("kv-aot-run").c_str(), stdout);
    return 0;
  }
  if (!applyThreads(args.run.runner.threads, problem) ||
      !checkRunOptions(args.run, problem))
    return usageError(problem);
  if (args.command == "info")
    return info();
  if (args.command == "bench-attention")
    return benchAttention(args);
  if (args.command == "compare")
    return compare(args);
  return runProgram(args);
}
