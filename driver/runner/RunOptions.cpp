//===- RunOptions.cpp - The options kv-run and kv-aot-run share -*- C++ -*-===//

#include "driver/runner/RunOptions.h"

#include "runtime/core/KVParallel.h"

using namespace kvir;
using namespace kvir::run;

const char *const kvir::run::kThreadsHelp =
    "threads of the generated CPU code's parallel loops (default 0: "
    "KVIR_THREADS if set, else every core); results are bit-identical for "
    "any count";

int64_t RequestOptions::greedyTokens() const {
  return greedyGiven ? greedy : (compareFull ? 16 : 0);
}

uint32_t kvir::run::RunnerOptions::loadFlags() const {
  return (noMmap ? KVRT_LOAD_READ : KVRT_LOAD_MAP) |
         (noRepack ? KVRT_LOAD_NO_REPACK : 0) | (repack ? KVRT_LOAD_REPACK : 0);
}

void kvir::run::addRunOptions(OptionParser &parser, RunOptions &options) {
  RunnerOptions &r = options.runner;
  RequestOptions &q = options.request;

  parser.section("the model and where it runs");
  parser.text("model", "FILE",
              "model to run: a llama2.c checkpoint or a GGUF v3 file of "
              "architecture llama (Llama 1, 2, 3, Mistral) or qwen2, its "
              "matrices F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K (told "
              "by its magic; see docs/models.md) (default: the built-in "
              "synthetic model of stories260K's shape)",
              r.model);
  parser.text("synthetic", "NAME",
              "without --model, the seeded synthetic model to run: default "
              "(stories260K's shape), synthetic-test or synthetic-bench",
              r.synthetic, &r.syntheticGiven);
  parser.unsignedInteger("model-seed", "N",
                         "without --model, the seed of the synthetic model "
                         "(default: the preset's)",
                         r.modelSeed, &r.modelSeedGiven);
  parser.text("backend", "NAME",
              "where the math runs: cpu (the program's generated CPU code), "
              "cuda (its generated GPU code; needs a GPU) or reference (the "
              "C++ oracle, for comparison); default: cpu, and for a library "
              "kv-aot compiled for the GPU, cuda",
              r.backend, &r.backendGiven);
  parser.integer("threads", "N", kThreadsHelp, r.threads);
  parser.flag("no-mmap",
              "read a GGUF file's weights into memory of the process's own "
              "instead of mapping the file: nothing is shared with other "
              "processes, but decode reads them on 2 MiB pages even where "
              "the file's page cache holds 4 KiB ones (a file written or "
              "copied since it was last read from disk); the report's "
              "'on 2 MiB pages' tells which a run got, and a note follows "
              "where less than three quarters of 256 MiB or more are "
              "(docs/models.md)",
              r.noMmap);
  parser.flag("no-repack",
              "keep Q8_0 matrices (and a small model's Q4_K ones) in the "
              "file's layout only: by default, where the backend is the CPU "
              "and the machine has AVX-512 VNNI, they are repacked 16 rows "
              "at a time before the first call (Q4_K where the forward's "
              "matrices take at most 16 MiB; about as many bytes as those "
              "matrices, in place of the file's pages) and decode steps and "
              "prefills read that copy, for faster decode, except on a "
              "machine with AMX, whose decode measured faster from the "
              "file's rows; this saves the copy and its making "
              "(docs/cpu-backend.md)",
              r.noRepack);
  parser.flag("repack",
              "make that copy even on a machine with AMX (where the prefill "
              "still reads the file's rows, so the model holds those "
              "weights twice): to compare the two layouts there",
              r.repack);

  parser.section("the entry and its arguments");
  parser.text("entry", "NAME", "function of the program to run (default main)",
              q.entry);
  parser.list("input", "NAME=FILE",
              "binds an argument (argN, or its kv.name) to a file: "
              "whitespace-separated token ids for token tensors, floats for "
              "query tensors",
              q.inputs);
  parser.flag("synthesize-inputs",
              "make seeded random inputs for the arguments not given: static "
              "ones of their size, dynamic ones of their kv.sample_length or "
              "--sample-length",
              q.synthesize);
  parser.integer("sample-length", "N",
                 "tokens (or query rows) of a synthesized dynamic argument "
                 "without kv.sample_length (default 16)",
                 q.sampleLength);
  parser.unsignedInteger("seed", "N", "seed of synthesized inputs (default 1)",
                         q.seed);

  parser.section("text in and out");
  auto addText = [&q](const char *option) {
    return [&q, option](const std::string &value, std::string &) {
      q.texts.push_back({option, value});
      return true;
    };
  };
  parser.custom("text", "NAME=STRING",
                "binds a token argument (argN, or its kv.name) to the "
                "encoding of STRING (a dummy space in front, no BOS unless "
                "--bos NAME)",
                addText("--text"), /*repeatable=*/true);
  parser.custom("text-file", "NAME=FILE",
                "binds a token argument to the encoding of the text in FILE "
                "(as --text)",
                addText("--text-file"), /*repeatable=*/true);
  parser.list("bos", "NAME",
              "put BOS in front of the encoding of the text argument NAME",
              q.bos);
  parser.flag("special",
              "special tokens written in the text (<|im_start|>, "
              "<|eot_id|>: a byte-level BPE vocabulary's CONTROL tokens) are "
              "those tokens; without it they are plain text (kv-serve: the "
              "default of a request's \"special\")",
              q.special);
  parser.text("tokenizer", "FILE",
              "tokenizer for text in and out, a llama2.c tokenizer.bin or a "
              "GGUF file (default: the tokenizer inside a GGUF --model, else "
              "tok<vocab>.bin beside the --model file when present; none for "
              "synthetic models)",
              r.tokenizer, &r.tokenizerGiven);
  parser.flag("no-tokenizer",
              "run without a tokenizer, even where one lies beside the model",
              r.noTokenizer);

  parser.section("what to measure and print");
  parser.flag("compare-full-prefill",
              "also prefill the final context in full and report cost and "
              "fidelity side by side",
              q.compareFull);
  parser.integer("greedy", "N",
                 "continue greedily for N tokens from the answer (default 16 "
                 "with --compare-full-prefill, else 0); without a program, "
                 "generate N tokens from the prompt and time the decode steps",
                 q.greedy, &q.greedyGiven);
  parser.flag("json", "print the report as JSON", q.json);
  parser.flag("profile",
              "also print the wall time of the program's runtime calls by "
              "site (its op's location) and call, longest first",
              q.profile);
  parser.text("dump-logits", "FILE",
              "write the answer's logits (the first returned logits with "
              "rows; the first returned tensor when there are none; without a "
              "program, every position's) as little-endian float32 "
              "[rows][vocab]",
              q.dumpLogits, &q.dumpLogitsGiven);

  parser.section("the KV pool and the context");
  parser.integer("page-tokens", "N", "token slots per KV page (default 16)",
                 r.pageTokens);
  parser.integer("pool-pages", "N",
                 "capacity of the KV pool in pages (reserved lazily; default "
                 "8192)",
                 r.poolPages);
  parser.text("kv-dtype", "TYPE",
              "element type of the KV pages: f32, f16 or bf16 (default: the "
              "element type of the program's !kv.cache values; f32 for a "
              "token list). With a program it must agree with the program's "
              "caches: the program names the pages its forward reads",
              r.kvDtype, &r.kvDtypeGiven);
  parser.integer("max-context", "N",
                 "refuse to compute a token at position N or beyond (default: "
                 "8 times the context the model was trained on; 0: no limit); "
                 "a context beyond the trained one gets a warning",
                 r.maxContext, &r.maxContextGiven);

  parser.section("the block store");
  parser.text("kv-store", "URL",
              "block store of kv.load_block and kv.store_block: memory (this "
              "process) or redis://HOST[:PORT][/DB] (shared by every process "
              "pointed at it; docs/block-store.md)",
              r.store.url, &r.storeGiven);
  parser.text("kv-store-prefix", "PREFIX",
              "prefix of the block store's keys (default kvir:)",
              r.store.prefix, &r.store.prefixGiven);
  parser.integer("kv-store-ttl", "SECONDS",
                 "expiry of stored blocks in seconds (default 0: none)",
                 r.store.ttlSeconds, &r.store.ttlGiven);
  parser.integer("kv-store-timeout-ms", "MS",
                 "timeout of connecting to the block store and of each "
                 "command (default 2000)",
                 r.store.timeoutMs, &r.store.timeoutGiven);
  parser.text("kv-store-policy", "fallback|fail",
              "on a block store fault (unreachable, timeout, evicted, a "
              "rejected blob): fallback (prefill locally, the default) or "
              "fail (an error)",
              r.store.policy, &r.store.policyGiven);
}

const char *const kvir::run::kNoCacheHelp =
    "compile the program and the forward afresh, and keep nothing: without "
    "it, code compiled before for this machine and this build is loaded from "
    "$KVIR_CACHE_DIR (default $XDG_CACHE_HOME/kvir or ~/.cache/kvir)";
const char *const kvir::run::kCacheMaxMbHelp =
    "bound of the compile cache in MiB: beyond it the least recently used "
    "entries are removed (default 1024)";

void kvir::run::addCacheOptions(OptionParser &parser, CacheOptions &options) {
  parser.section("the compile cache");
  parser.flag("no-cache", kNoCacheHelp, options.disabled);
  parser.integer("cache-max-mb", "N", kCacheMaxMbHelp, options.maxMb);
  parser.flag("cache-stats",
              "print the compile cache's hits and misses on stderr at exit",
              options.stats);
}

bool kvir::run::checkCacheOptions(const CacheOptions &options,
                                  std::string &error) {
  if (options.maxMb > 0 && options.maxMb <= (int64_t(1) << 40))
    return true;
  error = "--cache-max-mb must be in [1, 2^40], got " +
          std::to_string(options.maxMb) + " (--no-cache turns the cache off)";
  return false;
}

bool kvir::run::checkRunOptions(const RunOptions &options, std::string &error) {
  const RequestOptions &q = options.request;
  const RunnerOptions &r = options.runner;
  if (q.greedyGiven && q.greedy < 0) {
    error = "--greedy must not be negative, got " + std::to_string(q.greedy);
    return false;
  }
  if (r.maxContextGiven && r.maxContext < 0) {
    error = "--max-context must not be negative, got " +
            std::to_string(r.maxContext);
    return false;
  }
  // The synthetic model's options would be ignored next to a model file.
  for (auto [given, option] : {std::pair{r.syntheticGiven, "--synthetic"},
                               std::pair{r.modelSeedGiven, "--model-seed"}})
    if (given && !r.model.empty()) {
      error = std::string(option) + " applies to the built-in synthetic " +
              "model, run without --model; --model " + r.model +
              " names a model file: give one of them";
      return false;
    }
  if (r.repack && r.noRepack) {
    error = "--repack and --no-repack together: give one of them";
    return false;
  }
  if (q.dumpLogitsGiven && q.dumpLogits.empty()) {
    error = "--dump-logits: an empty output file name";
    return false;
  }
  return true;
}

bool kvir::run::applyThreads(int64_t threads, std::string &error) {
  if (threads < 0 || threads > KVRT_MAX_THREADS) {
    error = "--threads " + std::to_string(threads) + ": give 1 to " +
            std::to_string(KVRT_MAX_THREADS) + ", or 0 for the default";
    return false;
  }
  kvrt_set_num_threads(int32_t(threads));
  return true;
}

bool kvir::run::readInputFiles(const RequestOptions &request,
                               exec::InputOptions &out, std::string &error) {
  out.synthesize = request.synthesize;
  out.seed = request.seed;
  out.dynamicLength = request.sampleLength;
  if (request.sampleLength < 0) {
    error = "--sample-length must not be negative";
    return false;
  }
  for (const std::string &spec : request.inputs) {
    size_t eq = spec.find('=');
    std::string name = spec.substr(0, eq),
                file = eq == std::string::npos ? "" : spec.substr(eq + 1);
    if (name.empty() || file.empty()) {
      error = "--input expects NAME=FILE, got '" + spec + "'";
      return false;
    }
    if (out.given.count(name)) {
      error = "--input " + name + " is given twice";
      return false;
    }
    std::string text;
    if (!exec::readFile(file, text, error, "input file"))
      return false;
    out.given[name] = {std::move(text), "'" + file + "'"};
  }
  return true;
}

bool kvir::run::readTextOptions(const RunnerOptions &runner,
                                const RequestOptions &request, bool onePrompt,
                                exec::TextOptions &out, std::string &error) {
  out.tokenizer = runner.tokenizer;
  out.noTokenizer = runner.noTokenizer;
  if (runner.tokenizerGiven && runner.tokenizer.empty()) {
    error = "--tokenizer: an empty file name";
    return false;
  }
  for (const auto &[option, spec] : request.texts) {
    bool fromFile = option == "--text-file";
    exec::TextOptions::Item item{"prompt", fromFile ? "" : spec, option,
                                 fromFile ? "" : option};
    std::string file = spec;
    if (!onePrompt && !exec::splitNameValue(spec, option, item.name,
                                            fromFile ? file : item.text, error))
      return false;
    if (fromFile) {
      if (file.empty()) {
        error = "--text-file " + item.name + ": an empty file name";
        return false;
      }
      item.source = "'" + file + "'";
      if (!exec::readFile(file, item.text, error, "text file"))
        return false;
    }
    out.texts.push_back(item);
  }
  out.bos.insert(request.bos.begin(), request.bos.end());
  out.special = request.special;
  return true;
}
