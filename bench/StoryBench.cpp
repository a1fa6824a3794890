//===- StoryBench.cpp - Edit strategies decided in text ---------*- C++ -*-===//
//
// kv-bench-stories: the decision-level fidelity suite (docs/fidelity.md). For
// every story of bench/stories/edits.txt (a short context for stories260K
// whose continuation is decided by one fact) and every edit strategy, it
// compiles a kv program that prefills the story segment by segment, edits
// the fact and asks for the answer's logits, runs it as kv-run does, and
// compares the answer with a full prefill of the edited context: tokens
// recomputed, KL at the answer rows, greedy agreement over the continuation,
// and whether the continuation names the new entity. One table per run,
// per-story continuations with --details.
//
//===----------------------------------------------------------------------===//

#include "bench/StorySuite.h"
#include "driver/compiler/VersionOption.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace cl = llvm::cl;
using namespace kvir;
using namespace kvir::stories;

namespace {

cl::OptionCategory category("kv-bench-stories options");

cl::opt<std::string> modelPath("model", cl::desc("llama2.c checkpoint"),
                               cl::init(KVIR_TEST_MODEL), cl::cat(category));
cl::opt<std::string>
    tokenizerPath("tokenizer",
                  cl::desc("its tokenizer (default: tok<vocab>.bin beside it)"),
                  cl::cat(category));
cl::opt<std::string> storiesPath("stories",
                                 cl::desc("the story file (docs/fidelity.md)"),
                                 cl::init(KVIR_STORIES_FILE),
                                 cl::cat(category));
cl::opt<std::string> backendName(
    "backend",
    cl::desc("where the math runs: cpu (generated, the default), cuda or "
             "reference"),
    cl::init("cpu"), cl::cat(category));
cl::opt<int> greedy("greedy", cl::desc("tokens of greedy continuation"),
                    cl::init(24), cl::cat(category));
cl::list<std::string>
    strategies("strategy",
               cl::desc("strategies to run (repeatable; default: the suite's "
                        "list); '!' before a cot_slice strategy drops the "
                        "thought's dependency on the fact"),
               cl::cat(category));
cl::opt<bool> calibrate(
    "calibrate",
    cl::desc("run the deviation threshold's calibration sweep instead of "
             "the suite's strategies"),
    cl::init(false), cl::cat(category));
cl::opt<bool> details("details", cl::desc("print every story's continuations"),
                      cl::init(false), cl::cat(category));

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  kvir::compiler::parseToolOptions(
      argc, argv, "kv-bench-stories", category,
      "kv-bench-stories: edit strategies on short stories, judged in text\n\n"
      "  kv-bench-stories                 the suite's table (stories260K)\n"
      "  kv-bench-stories --details       and every story's continuations\n"
      "  kv-bench-stories --calibrate     the deviation threshold's sweep\n"
      "  kv-bench-stories --strategy 'cot_slice, first_k = 4' "
      "--strategy '!cot_slice'\n");
  SuiteOptions options;
  options.modelPath = modelPath;
  options.tokenizerPath = tokenizerPath;
  options.storiesPath = storiesPath;
  options.backend = backendName;
  options.greedy = greedy;
  options.details = details;
  for (const std::string &s : strategies)
    options.strategies.push_back(parseStrategySpec(s));
  if (calibrate && !options.strategies.empty()) {
    llvm::errs() << "kv-bench-stories: error: --calibrate and --strategy "
                    "exclude each other\n";
    return 1;
  }
  if (options.strategies.empty())
    options.strategies =
        calibrate ? calibrationStrategies() : defaultStrategies();
  std::string error;
  SuiteResult result;
  if (!runSuite(options, result, error)) {
    llvm::errs() << "kv-bench-stories: error: " << error << "\n";
    return 1;
  }
  printSuite(result, llvm::outs(), details);
  return 0;
}
