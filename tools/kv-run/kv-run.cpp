//===- kv-run.cpp - Run kv programs, report cost and fidelity ---*- C++ -*-===//
//
// Two forms:
//   kv-run PROGRAM.mlir [--model FILE] [--input NAME=FILE]...
//          [--text NAME=STRING]... [--compare-full-prefill] [--attribute]
//     plans the program with kv-optimize, lowers it to one module,
//     JIT-compiles it, runs its entry over the backend and prints its
//     results and, on request, the cost and fidelity of the plan against a
//     full prefill and the attribution of an edited answer (kv-run-jit.cpp);
//   kv-run --model FILE (--tokens "1 2 3" | --tokens-file F | --text STRING)
//          [--greedy N] [--json] [--dump-logits OUT]
//     prefills a token list from position 0, then generates N tokens
//     greedily, timing the prefill and the decode steps.
// --model takes a llama2.c checkpoint or a GGUF file. Without --model, a
// built-in synthetic model of stories260K's shape is used.
//
// This executable never loads LLVM or MLIR (their libraries alone hold
// about 80 MiB): it runs the token-list form on a forward kept as a shared
// library in the compile cache, compiled by kv-aot --forward in a child
// process on a miss (ForwardLibrary.h), and hands every other run, a
// program or the CUDA backend, to kv-run-jit beside it (exec, same
// arguments), which compiles just in time. docs/kv-run.md "Start-up and
// memory".
//
//===----------------------------------------------------------------------===//

#include "driver/cache/ForwardLibraryCache.h"
#include "tools/kv-run/CommandLine.h"
#include "tools/kv-run/ForwardLibrary.h"
#include "tools/kv-run/TokenList.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include <unistd.h>

using namespace kvir;
using namespace kvir::run;

int main(int argc, char **argv) {
  KvRunOptions options;
  ParsedCommandLine parsed = parseKvRunCommandLine(argc, argv, options);
  if (!parsed.run)
    return parsed.status;
  std::string jit = besideThisExecutable("kv-run-jit");
  if (!runsWithoutCompiler(options)) {
    ::execv(jit.c_str(), argv);
    printError(cache::errnoText("cannot start " + jit +
                                " (kv-run runs programs and the CUDA "
                                "backend with it)"));
    return 1;
  }
  std::string compiler = besideThisExecutable("kv-aot");
  std::unique_ptr<cache::ForwardLibraryCache> cache;
  if (!options.cache.disabled) {
    cache::ForwardLibraryCache::Config config;
    config.directory = cache::defaultCacheDirectory();
    config.maxBytes = uint64_t(options.cache.maxMb) << 20;
    config.identity = cache::forwardLibraryIdentity(compiler);
    std::string problem;
    cache = cache::ForwardLibraryCache::open(config, problem);
    if (!cache)
      printWarning("compile cache off: " + problem);
  }
  ForwardSource forward = [&](Runner &r, Forward &out, std::string &error) {
    if (loadForwardLibrary(r, options.quantDot, cache.get(), compiler, out,
                           error))
      return true;
    // No library (no linker on this machine, kv-aot missing): the JIT runs
    // the same forward. Nothing was printed to stdout yet.
    printNote(error + "\nkv-run: note: running the forward with " + jit +
              " instead");
    std::fflush(stderr);
    ::execv(jit.c_str(), argv);
    return false;
  };
  std::string error;
  bool ok = runTokenList(options, forward, error);
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
