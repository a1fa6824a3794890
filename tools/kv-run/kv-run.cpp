//===- kv-run.cpp - Run kv programs, report cost and fidelity ---*- C++ -*-===//
//
// Two forms:
//   kv-run PROGRAM.mlir [--model FILE] [--input NAME=FILE]...
//          [--text NAME=STRING]... [--compare-full-prefill] [--attribute]
//     plans the program with kv-optimize, lowers it to one module, compiles
//     it, runs its entry over the backend and prints its results and, on
//     request, the cost and fidelity of the plan against a full prefill and
//     the attribution of an edited answer;
//   kv-run --model FILE (--tokens "1 2 3" | --tokens-file F | --text STRING)
//          [--greedy N] [--json] [--dump-logits OUT]
//     prefills a token list from position 0, then generates N tokens
//     greedily, timing the prefill and the decode steps.
// --model takes a llama2.c checkpoint or a GGUF file. Without --model, a
// built-in synthetic model of stories260K's shape is used.
//
// This executable never loads LLVM or MLIR (their libraries alone hold
// about 80 MiB): it runs compiled code kept as shared libraries in the
// compile cache, compiled by kv-aot in a child process on a miss
// (CachedLibrary.h): the token-list form's forward, and a program whose run
// goes as planned. Everything else it hands to kv-run-jit beside it (exec,
// the same arguments), which compiles just in time and says what went wrong
// at the program's ops: --attribute, --retarget-model, the CUDA backend, a
// program kv-aot refuses, one whose arguments do not bind, whose run
// reports a problem or whose comparison needs its exact reference.
// docs/kv-run.md "Start-up and memory".
//
//===----------------------------------------------------------------------===//

#include "driver/cache/LibraryCache.h"
#include "driver/runner/ProgramLibrary.h"
#include "runtime/core/ForwardCall.h"
#include "runtime/core/ModelConfig.h"
#include "tools/kv-run/CachedLibrary.h"
#include "tools/kv-run/CommandLine.h"
#include "tools/kv-run/TokenList.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

using namespace kvir;
using namespace kvir::run;

namespace {

/// The largest program read here (kv-run-jit reads at most 256 MiB).
constexpr off_t kMaxProgramBytes = off_t(16) << 20;

/// What became of a program run here.
enum class ProgramRun { Done, Failed, UseJit };

/// The program form from a library, where nothing needs the compiler's
/// diagnostics (the header); UseJit for kv-run-jit to do the run instead
/// (nothing printed on stdout yet).
ProgramRun runProgram(const KvRunOptions &options, cache::LibraryCache *cache,
                      const std::string &compiler, std::string &error) {
  const RunOptions &o = options.run;
  // A block store's run has effects a second run would see: it runs once,
  // in kv-run-jit.
  if (options.attribute || options.retarget || options.tokensGiven ||
      options.tokensFileGiven || options.printTokens || o.runner.storeGiven)
    return ProgramRun::UseJit;
  // A program that is not a regular file of a readable size is kv-run-jit's
  // to refuse.
  struct stat st;
  if (::stat(options.program.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size > kMaxProgramBytes)
    return ProgramRun::UseJit;
  exec::InputOptions inputs;
  exec::TextOptions text;
  std::string program, why;
  if (!readInputFiles(o.request, inputs, why) ||
      !readTextOptions(o.runner, o.request, /*onePrompt=*/false, text, why) ||
      cache::readWhole(options.program, program) != 0)
    return ProgramRun::UseJit;
  std::unique_ptr<Runner> runner = makeRunner(o.runner, why);
  if (!runner || !runner->encodeInputs(text, inputs, why))
    return ProgramRun::UseJit;
  // What the code depends on: the program (its text, and its file's name,
  // which its sites carry), the entry, the model's shape and weight formats
  // (the forward exported for comparisons) and how products are taken.
  const std::string &entryName = o.request.entry;
  std::string formats = modelWeightFormats(runner->model()).spec();
  std::string key = "program " + options.program + " entry=" + entryName +
                    " quant-dot=" + options.quantDot + " model " +
                    configKey(runner->config(), KVRT_KV_F32) +
                    " weights=" + formats + "\n" + program;
  ProgramLibrary library;
  auto open = [&](const std::string &path, std::string &problem) {
    library = ProgramLibrary();
    return openProgramLibrary(path, entryName, library, problem);
  };
  if (!loadCachedLibrary({compiler, options.program, "--target", "cpu",
                          "--entry", entryName, "--weight-formats",
                          formats.empty() ? "f32" : formats, "--quant-dot",
                          options.quantDot},
                         key, cache, open, why) ||
      library.manifest.target != "cpu")
    return ProgramRun::UseJit;
  Report report;
  std::vector<exec::Value> args;
  if (!runner->preparePool(library.manifest.kvDtype, /*fromProgram=*/true,
                           why) ||
      !runner->bind(library.manifest, inputs, args, report, why) ||
      (runner->backend().runsGeneratedCode() &&
       !library.checkFormats(runner->model()).empty()))
    return ProgramRun::UseJit;
  Entry entry{library.entry, &library.manifest,
              library.forward(runner->config()), options.program};
  exec::RunOutcome outcome = runner->run(entry, args);
  bool problems = false;
  Runner::reportProblems(
      outcome, [&](int32_t, bool, const std::string &) { problems = true; });
  if (problems || outcome.failed ||
      (o.request.compareFull && needsExactReference(outcome)) ||
      ((o.request.greedyTokens() > 0 || o.request.compareFull) &&
       runner->backend().runsGeneratedCode() && !entry.forward.prefill))
    return ProgramRun::UseJit;
  warnBeyondTraining(*runner, outcome.contextTokens);
  if (!runner->complete(report, entry, outcome, o.request,
                        /*reference=*/nullptr, error))
    return ProgramRun::Failed;
  printReport(report, o.request.json);
  return ProgramRun::Done;
}

} // namespace

int main(int argc, char **argv) {
  KvRunOptions options;
  ParsedCommandLine parsed = parseKvRunCommandLine(argc, argv, options);
  if (!parsed.run)
    return parsed.status;
  std::string jit = besideThisExecutable("kv-run-jit");
  auto execJit = [&] {
    std::fflush(stdout);
    std::fflush(stderr);
    ::execv(jit.c_str(), argv);
    printError(cache::errnoText("cannot start " + jit +
                                " (kv-run runs programs and the CUDA "
                                "backend with it)"));
    return 1;
  };
  if (!runsWithoutCompiler(options))
    return execJit();
  std::string compiler = besideThisExecutable("kv-aot");
  std::unique_ptr<cache::LibraryCache> cache;
  if (!options.cache.disabled) {
    cache::LibraryCache::Config config;
    config.directory = cache::defaultCacheDirectory();
    config.maxBytes = uint64_t(options.cache.maxMb) << 20;
    config.identity = cache::libraryIdentity(compiler);
    std::string problem;
    cache = cache::LibraryCache::open(config, problem);
    if (!cache)
      printWarning("compile cache off: " + problem);
  }
  std::string error;
  bool ok = true;
  if (!options.program.empty()) {
    ProgramRun run = runProgram(options, cache.get(), compiler, error);
    if (run == ProgramRun::UseJit)
      return execJit();
    ok = run == ProgramRun::Done;
  } else {
    ForwardSource forward = [&](Runner &r, Forward &out, std::string &why) {
      if (loadForwardLibrary(r, options.quantDot, cache.get(), compiler, out,
                             why))
        return true;
      // No library (no linker on this machine, kv-aot missing): the JIT
      // runs the same forward. Nothing was printed to stdout yet.
      printNote(why + "\nkv-run: note: running the forward with " + jit +
                " instead");
      execJit();
      return false;
    };
    ok = runTokenList(options, forward, error);
  }
  if (options.cache.stats)
    std::fprintf(
        stderr, "%s\n",
        cache ? cache::describeCacheStats(cache->stats(), cache->directory())
                    .c_str()
              : "compile cache: off");
  // The report went to stdout: a full disk or a closed pipe is a failure.
  if (ok && (std::fflush(stdout) != 0 || std::ferror(stdout))) {
    ok = false;
    error = std::string("cannot write the report to stdout: ") +
            std::strerror(errno);
  }
  if (!ok) {
    printError(error);
    return 1;
  }
  return 0;
}
