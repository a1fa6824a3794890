//===- RunOptions.h - The options kv-run and kv-aot-run share ---*- C++ -*-===//
//
// The options of a run, declared once for every runner: what a Runner is
// made of (the model, the backend, the KV pool, the tokenizer, the block
// store, the context limit, the threads) and what one run of an entry takes
// (its inputs and what to measure and print). kv-run and kv-aot-run add
// their own options to the same parser; a server takes RunnerOptions from
// its command line and one RequestOptions per request. docs/kv-run.md
// describes every option.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_RUNNER_RUNOPTIONS_H
#define KVIR_DRIVER_RUNNER_RUNOPTIONS_H

#include "driver/runner/Options.h"
#include "runtime/exec/BlockStoreOptions.h"
#include "runtime/exec/Session.h"
#include "runtime/exec/Text.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvir::run {

/// What a Runner is made of, fixed for its life.
struct RunnerOptions {
  /// `--model FILE` ("": the synthetic model `--synthetic NAME`, seeded with
  /// `--model-seed N`, 0 for the preset's seed).
  std::string model, synthetic = "default";
  uint64_t modelSeed = 0;
  bool syntheticGiven = false, modelSeedGiven = false;
  /// `--backend NAME`; without it the tool chooses (kv-run: cpu; kv-aot-run:
  /// the library's target).
  std::string backend;
  bool backendGiven = false;
  /// `--tokenizer FILE` and `--no-tokenizer`.
  std::string tokenizer;
  bool tokenizerGiven = false, noTokenizer = false;
  /// `--max-context N` (-1: 8 times the model's trained context; 0: none).
  int64_t maxContext = -1;
  bool maxContextGiven = false;
  /// `--page-tokens N`, `--pool-pages N`: the KV pool.
  int64_t pageTokens = 16, poolPages = 8192;
  /// `--kv-dtype TYPE` (without it: the program's page type; f32 for a
  /// token list).
  std::string kvDtype;
  bool kvDtypeGiven = false;
  /// `--kv-store URL` and its options.
  exec::StoreOptions store;
  bool storeGiven = false;
  /// `--threads N` (0: KVIR_THREADS if set, else every core).
  int64_t threads = 0;
  /// `--no-mmap`: a GGUF file's weights read into memory (KVRT_LOAD_READ).
  bool noMmap = false;
  /// `--no-repack`: no copy of the matrices repacked for decode
  /// (KVRT_LOAD_NO_REPACK).
  bool noRepack = false;
  /// `--repack`: that copy made even on a host that keeps the file's rows
  /// (KVRT_LOAD_REPACK).
  bool repack = false;
  /// The kvrt_model_load_ex flags these options ask for.
  uint32_t loadFlags() const;
};

/// One run of an entry: which, on what, and what to measure and print.
struct RequestOptions {
  /// `--entry NAME`.
  std::string entry = "main";
  /// `--input NAME=FILE`, in order.
  std::vector<std::string> inputs;
  /// `--text NAME=STRING` and `--text-file NAME=FILE`, in order: the option
  /// and its value.
  std::vector<std::pair<std::string, std::string>> texts;
  /// `--bos NAME`.
  std::vector<std::string> bos;
  /// `--special`.
  bool special = false;
  /// `--synthesize-inputs`, `--sample-length N`, `--seed N`.
  bool synthesize = false;
  int64_t sampleLength = 16;
  uint64_t seed = 1;
  /// `--compare-full-prefill`, `--greedy N`, `--json`, `--profile`.
  bool compareFull = false, json = false, profile = false;
  int64_t greedy = -1;
  bool greedyGiven = false;
  /// `--dump-logits FILE`.
  std::string dumpLogits;
  bool dumpLogitsGiven = false;

  /// Tokens of greedy continuation: `--greedy N`, else 16 with
  /// `--compare-full-prefill`, else 0.
  int64_t greedyTokens() const;
};

struct RunOptions {
  RunnerOptions runner;
  RequestOptions request;
};

/// Declares the options every runner takes in `parser`, stored in `options`.
void addRunOptions(OptionParser &parser, RunOptions &options);

/// The compile cache of the tools that compile code (kv-run, kv-serve;
/// driver/compiler/CompileCache.h): where it lives is $KVIR_CACHE_DIR, else
/// $XDG_CACHE_HOME/kvir, else ~/.cache/kvir.
struct CacheOptions {
  /// `--no-cache`: compile everything, read and write nothing.
  bool disabled = false;
  /// `--cache-max-mb N`: the bound on the entries' total size.
  int64_t maxMb = 1024;
  /// `--cache-stats`: a line of hits and misses on stderr at exit.
  bool stats = false;
};

/// The help of `--no-cache` and `--cache-max-mb`; kv-bench's llvm::cl
/// options show the same.
extern const char *const kNoCacheHelp;
extern const char *const kCacheMaxMbHelp;

/// Declares `--no-cache`, `--cache-max-mb` and `--cache-stats`.
void addCacheOptions(OptionParser &parser, CacheOptions &options);

/// Rejects a bound that is not positive.
bool checkCacheOptions(const CacheOptions &options, std::string &error);

/// Rejects values that make no sense before anything is loaded (a negative
/// --greedy or --max-context, an empty --dump-logits file name).
bool checkRunOptions(const RunOptions &options, std::string &error);

/// The help of `--threads`; kv-bench's llvm::cl option shows the same.
extern const char *const kThreadsHelp;

/// Sets the runtime's thread count to `threads` (--threads); false with
/// `error` where it is out of range.
bool applyThreads(int64_t threads, std::string &error);

/// Reads the `--input NAME=FILE` files of `request` into `out`, with its
/// synthesis options; false with `error`.
bool readInputFiles(const RequestOptions &request, exec::InputOptions &out,
                    std::string &error);

/// The text options of a run: the tokenizer options of `runner`, and the
/// texts of `request` (`--text-file` files read). With `onePrompt`, each
/// value is the whole text of an argument named `prompt` (kv-run's first
/// form) rather than NAME=VALUE. False with `error`.
bool readTextOptions(const RunnerOptions &runner, const RequestOptions &request,
                     bool onePrompt, exec::TextOptions &out,
                     std::string &error);

} // namespace kvir::run

#endif // KVIR_DRIVER_RUNNER_RUNOPTIONS_H
