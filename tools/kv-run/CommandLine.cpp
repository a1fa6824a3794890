//===- CommandLine.cpp - kv-run's command line ----------------------------===//

#include "tools/kv-run/CommandLine.h"

#include "driver/runner/Options.h"
#include "driver/version/Version.h"

#include <cstdio>
#include <vector>

#include <unistd.h>

using namespace kvir;
using namespace kvir::run;

namespace {

const char *kUsage =
    "kv-run: run kv programs (or a token list) on a model; report logits, "
    "cost and\nfidelity (docs/kv-run.md)\n"
    "\n"
    "usage: kv-run PROGRAM.mlir [options]\n"
    "       kv-run [options] (--tokens IDS | --tokens-file FILE | --text "
    "STRING\n"
    "                        | --text-file FILE)\n"
    "\n"
    "  kv-run examples/agent-edit.mlir --synthesize-inputs "
    "--compare-full-prefill\n"
    "  kv-run PROGRAM.mlir --model M.bin --input city=city.txt ...\n"
    "  kv-run examples/story-edit.mlir --model M.bin\n"
    "      --text hero=\"girl named Lily.\" ... --attribute\n"
    "  kv-run --model M.bin --tokens \"1 2 3\" --dump-logits out.f32\n"
    "  kv-run --model M.bin --text \"Once upon a time\" --bos prompt\n"
    "  kv-run --model M.bin --tokens 1 --greedy 64 --json\n"
    "\n"
    "With PROGRAM, kv-run plans it with kv-optimize, JIT-compiles it and runs "
    "its\nentry. Without, it prefills a token list from position 0: --text "
    "and --text-file\ntake the prompt itself (--bos prompt puts BOS in "
    "front), --dump-logits writes\nthe logits of every position, --greedy N "
    "generates N tokens from the prompt\n(prefill and decode timed apart).\n";

/// Declares kv-run's options: the runners' and its own.
void declareOptions(OptionParser &parser, KvRunOptions &options) {
  addRunOptions(parser, options.run);
  addCacheOptions(parser, options.cache);
  parser.section("kv-run's own");
  parser.text("tokens", "IDS",
              "without a program: whitespace-separated token ids, e.g. "
              "\"1 2 3\" (taken verbatim: no BOS is added)",
              options.tokens, &options.tokensGiven);
  parser.text("tokens-file", "FILE",
              "without a program: a file of whitespace-separated token ids",
              options.tokensFile, &options.tokensFileGiven);
  parser.flag("attribute",
              "attribute the change of the answer made by a kv.edit to the "
              "segments before it, by patching each segment's K/V with its "
              "value in the edited context (docs/kv-run.md)",
              options.attribute);
  parser.flag("retarget-model",
              "run a program written for another model's shape: retype its "
              "!kv.model, its !kv.cache shapes and its logits' vocabulary "
              "to the model's (the kv-retarget-model pass; a note says what "
              "changed, a program it cannot retype is an error at the op); "
              "without it a program must name the model's exact type",
              options.retarget);
  parser.flag("print-tokens",
              "without a program: print the ids and pieces of the text of "
              "--text or --text-file (each piece as the vocabulary spells it, "
              "then the text it decodes to) instead of running it",
              options.printTokens);
  parser.text("quant-dot", "auto|f32|int8|amx|avx2",
              "how the generated CPU code multiplies quantised weights: f32 "
              "widens them exactly (the oracle's weights), int8 takes integer "
              "dot products on Q8_0, Q4_0, Q4_K and Q6_K blocks (Q5_K's "
              "in decode steps) "
              "against activations quantised per "
              "block (AVX-512 VNNI; docs/cpu-backend.md), amx the same with "
              "a Q8_0 or Q4_K prefill on AMX tiles, avx2 int8's decode steps "
              "by AVX2's instructions (a prefill widens), auto (default) amx "
              "where the host has AMX, else int8 where it has VNNI, else avx2",
              options.quantDot);
}

/// Prints `message` as kv-run's `kind` (error, warning, note): in color on
/// a terminal, as LLVM's tools do.
void print(const char *kind, const char *color, const std::string &message) {
  std::fflush(stdout);
  if (::isatty(2))
    std::fprintf(stderr, "kv-run: \033[1;%sm%s: \033[0m%s\n", color, kind,
                 message.c_str());
  else
    std::fprintf(stderr, "kv-run: %s: %s\n", kind, message.c_str());
}

} // namespace

void kvir::run::printError(const std::string &message) {
  print("error", "31", message);
}
void kvir::run::printWarning(const std::string &message) {
  print("warning", "35", message);
}
void kvir::run::printNote(const std::string &message) {
  print("note", "30", message);
}

ParsedCommandLine kvir::run::parseKvRunCommandLine(int argc, char **argv,
                                                   KvRunOptions &options) {
  ParsedCommandLine result;
  auto fail = [&](const std::string &message) {
    printError(message);
    result.status = 1;
    return result;
  };
  OptionParser parser("kv-run");
  declareOptions(parser, options);
  std::vector<std::string> positionals;
  std::string problem;
  if (!parser.parse(argc, argv, 1, positionals, problem))
    return fail(problem);
  if (parser.helpRequested()) {
    parser.printHelp(stdout, kUsage);
    return result;
  }
  if (parser.versionRequested()) {
    std::fputs(versionText("kv-run").c_str(), stdout);
    return result;
  }
  if (positionals.size() > 1)
    return fail("one program at a time, got '" + positionals[0] + "' and '" +
                positionals[1] + "'");
  if (!positionals.empty())
    options.program = positionals[0];
  const std::string &q = options.quantDot;
  if (q != "auto" && q != "f32" && q != "int8" && q != "amx" && q != "avx2")
    return fail("unknown --quant-dot '" + q +
                "' (available: auto, f32, int8, amx, avx2)");
  // A forward that widens Q8_0 or takes AVX2's dots never reads the rows
  // repacked for VNNI: none are made.
  if (q == "f32" || q == "avx2") {
    options.run.runner.noRepack = true;
    options.run.runner.repack = false;
  }
  if (!applyThreads(options.run.runner.threads, problem) ||
      !checkRunOptions(options.run, problem) ||
      !checkCacheOptions(options.cache, problem))
    return fail(problem);
  result.run = true;
  return result;
}

bool kvir::run::runsWithoutCompiler(const KvRunOptions &options) {
  const RunnerOptions &runner = options.run.runner;
  return !(runner.backendGiven && runner.backend == "cuda");
}
