//===- StorySuite.h - The story-edit fidelity suite -------------*- C++ -*-===//
//
// The pieces of kv-bench-stories (docs/fidelity.md), apart from its command
// line so that tests can reach them: the story file, the strategies, the kv
// program each (story, strategy) runs, and the measurements.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_BENCH_STORYSUITE_H
#define KVIR_BENCH_STORYSUITE_H

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

struct kvrt_model_config;

namespace kvir::stories {

/// One story: the segments of the old context, the edit and what judges it.
struct Story {
  std::string name;
  /// intro, fact, world, thought, answer: the segments, in context order.
  std::string segments[5];
  std::string newFact, newEntity, correction;
};

/// The segment names, in context order.
extern const char *const kSegmentNames[5];

/// Parses the story file format (docs/fidelity.md): one story a line,
/// `name|intro|fact|world|thought|answer|new fact|new entity|correction`,
/// `#` comments and blank lines ignored. False with a message naming the
/// line otherwise.
bool parseStories(const std::string &text, std::vector<Story> &out,
                  std::string &error);

/// A strategy as the suite runs it: an edit of the fact, or the story's
/// body composed after its intro.
struct StrategySpec {
  /// Edit: the `#kv.strategy<...>` parameters, e.g. "cot_slice, first_k =
  /// 4". Compose: the `#kv.repair<...>` parameters, or "" for none.
  std::string strategy;
  /// The body (new fact, world, thought) prefilled on its own and composed
  /// after the intro, instead of an edit.
  bool compose = false;
  /// Edit: the program declares no dependency of the thought on the fact (a
  /// mis-declared dependency: the thought is reused).
  bool misdeclared = false;
  /// How the table names it.
  std::string label() const;
};

/// "cot_slice, first_k = 4"; with a leading '!' a mis-declared one;
/// "compose" or "compose, first_k = 4" a compose with that repair.
StrategySpec parseStrategySpec(const std::string &text);
/// The suite's strategies when none are given.
std::vector<StrategySpec> defaultStrategies();
/// The deviation threshold's calibration sweep (`--calibrate`).
std::vector<StrategySpec> calibrationStrategies();

/// The kv program of a strategy for a model config: all five segments of
/// dynamic length, prefilled in order, the fact edited, the answer's logits
/// returned (`@main(model, intro, fact, world, thought, answer, new)`).
std::string storyProgram(const kvrt_model_config &config,
                         const StrategySpec &strategy);

/// The kv program of a compose: the intro prefilled, the body (new fact,
/// world, thought) prefilled on its own by a helper and composed after it
/// (with the repair, if any), the answer prefilled over the result and its
/// logits returned (`@main(model, intro, body, answer)`).
std::string composeProgram(const kvrt_model_config &config,
                           const StrategySpec &strategy);

/// Whether `text` names `entity`: the entity as a word, or followed by "s"
/// or "es" (plurals), case-sensitively.
bool namesEntity(const std::string &text, const std::string &entity);

/// One story under one strategy.
struct StoryRow {
  std::string story, strategy;
  int64_t recomputed = 0, contextTokens = 0;
  double klMean = 0;
  int64_t greedyAgree = 0;
  bool namesNew = false;
  std::string continuation;
};

/// The suite's results.
struct SuiteResult {
  std::string model, backend;
  int64_t greedy = 0;
  std::vector<Story> stories;
  std::vector<StrategySpec> strategies;
  /// Per story: the continuations of full prefills of the old and of the
  /// edited context, and whether they name the new entity.
  std::vector<std::string> oldContinuation, newContinuation;
  std::vector<bool> oldNamesNew, newNamesNew;
  /// Per strategy, per story.
  std::vector<std::vector<StoryRow>> rows;
  /// Per story: recovered(S) of attribution by KV patching for the segments
  /// before the answer (intro, fact, world, thought), or the reason there
  /// is none.
  std::vector<std::vector<double>> recovered;
  std::vector<std::string> attributionError;
};

struct SuiteOptions {
  std::string modelPath, tokenizerPath, storiesPath, backend = "cpu";
  int64_t greedy = 24;
  bool details = false;
  std::vector<StrategySpec> strategies;
};

/// Runs every story under every strategy. False with a message on a bad
/// file, a failed compile or run.
bool runSuite(const SuiteOptions &options, SuiteResult &out,
              std::string &error);

/// The table (and with `details` every story's continuations).
void printSuite(const SuiteResult &result, llvm::raw_ostream &os, bool details);

} // namespace kvir::stories

#endif // KVIR_BENCH_STORYSUITE_H
