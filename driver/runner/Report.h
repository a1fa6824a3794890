//===- Report.h - What kv-run prints about a run ----------------*- C++ -*-===//
//
// The report of one program run: its inputs and results, the work of the
// plan and of the setup, and, with --compare-full-prefill, cost and fidelity
// side by side with a full prefill of the same final context. Printed as
// text or as JSON (docs/kv-run.md lists the fields). Shared by kv-run (JIT)
// and kv-aot-run (ahead of time, no LLVM), so plain C++.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_RUNNER_REPORT_H
#define KVIR_DRIVER_RUNNER_REPORT_H

#include "runtime/exec/Attribution.h"
#include "runtime/exec/BlockStoreOptions.h"
#include "runtime/exec/Session.h"
#include "runtime/exec/Text.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvir::run {

struct Report {
  std::string program, entry, model, backend, config;
  std::vector<exec::BoundInput> inputs;
  std::vector<exec::Value> results;
  exec::WorkStats plan, setup;
  bool hasPlanOps = false;
  std::vector<kvrt_exec_repair> repairs;
  int64_t greedy = 0;
  std::vector<int32_t> greedyPlan;
  // --compare-full-prefill
  bool compared = false;
  std::string compareNote;
  int64_t answerResult = -1;
  /// What the full prefill ran: the plan's "final context", or with an
  /// exact reference (MeasureOptions::reference) the "edited context", and
  /// then the length of the plan's own final context.
  std::string referenceName = "final context";
  int64_t planContextTokens = -1;
  int64_t finalTokens = 0;
  bool contiguous = true;
  exec::WorkStats full;
  exec::Fidelity fidelity;
  std::vector<int32_t> greedyFull;
  int64_t greedyAgree = 0;
  // With a tokenizer (runtime/exec/Text.h): its file, and the greedy
  // continuations decoded.
  std::string tokenizer;
  bool decoded = false;
  std::string greedyText, fullGreedyText;
  // --attribute (kv-run): runtime/exec/Attribution.h.
  bool attributed = false;
  exec::Attribution attribution;
  // --kv-store: the store (its description, "" for none), the policy, what
  // each kv.load_block and kv.store_block did, and the store's counters.
  std::string blockStore;
  int32_t storePolicy = KVRT_EXEC_STORE_FALLBACK;
  std::vector<exec::BlockEvent> blockEvents;
  kvrt_block_store_stats storeStats{};
  // --profile: each site's runtime calls, and the program's site texts.
  bool profiled = false;
  std::vector<exec::SiteTime> siteTimes;
  std::vector<std::string> sites;
};

/// Records the block store of a run in `report`: `store` (may be null: then
/// nothing is reported), its policy and the events of `outcome`.
void addBlockStore(Report &report, const kvrt_block_store *store,
                   int32_t policy, const exec::RunOutcome &outcome);

/// What to measure beyond the run itself.
struct MeasureOptions {
  /// Tokens of greedy continuation from the answer (0: none).
  int64_t greedy = 0;
  /// Prefill the final context in full and compare.
  bool compareFull = false;
  /// Where to write the answer's logits (float32 [rows][vocab]), or the
  /// first returned tensor when there are none ("": not).
  std::string dumpLogits;
  /// The run's context limit (0: none): a greedy continuation that would
  /// go beyond it is an error before it starts.
  int64_t maxContext = 0;
  /// Decode the greedy continuations with this tokenizer (null: not).
  const kvrt_tokenizer *tokenizer = nullptr;
  /// A run of the program with every erratum edit planned `exact` (its exact
  /// reference), or null. When the answer's context holds a correction, the
  /// full prefill runs the final context of that run's answer (the edited
  /// context) instead of the plan's own, which holds the old segment and the
  /// correction.
  const exec::RunOutcome *reference = nullptr;
};

/// The final context of the answer (result `answerResult`) of `reference`,
/// the exact reference of a run whose answer is `answer`: the tokens of the
/// view its prefill attended followed by those it computed. False with
/// `error` when that result is not logits of the same tokens.
bool referenceContext(const exec::RunOutcome &reference, int64_t answerResult,
                      const exec::Logits &answer, std::vector<int32_t> &out,
                      std::string &error);

/// The label of the first run of `view` that is an erratum's correction
/// (`<segment>.erratum`), or "" when there is none.
std::string findCorrection(const kvrt_view *view);

/// Whether the answer of `outcome` (its first returned logits with rows) was
/// computed after an erratum's correction: then its full-prefill comparison
/// needs the exact reference (MeasureOptions::reference).
bool needsExactReference(const exec::RunOutcome &outcome);

/// The report line of one selective recompute, e.g. "selective recompute: 7
/// of 120 reused tokens recomputed (deviation > t = 0.05; ...)".
std::string describeRepair(const kvrt_exec_repair &repair);

/// Fills `report` from a successful run: its results and work, then the
/// answer (the first returned logits with rows), its greedy continuation,
/// the logits dump and the comparison with a full prefill, each computed on
/// `backend` with `forward`. False with `error` when a step fails.
bool completeReport(Report &report, const exec::RunOutcome &outcome,
                    bool hasPlanOps, ComputeBackend &backend,
                    const Forward &forward, const kvrt_model *model,
                    kvrt_pool *pool, const MeasureOptions &options,
                    std::string &error);

/// Writes float32 values in host (little-endian) order; false with `error`.
bool writeFloats(const std::vector<float> &values, const std::string &path,
                 std::string &error);

/// "dim 64, hidden 172, layers 5, heads 8/4, vocab 512".
std::string describeConfig(const kvrt_model_config &config);

/// What kv-run's token-list form (no program) prints; Runner::printTokenList
/// fills it.
struct TokenListReport {
  std::string model, config, backend;
  /// The tokenizer's file ("" without one).
  std::string tokenizer;
  std::vector<int32_t> tokens;
  /// Where the tokens came from text: the text, whether BOS went in front,
  /// and the tokens decoded back.
  bool fromText = false, bos = false;
  std::string text, decoded;
  /// The argmax of the last position's logits, and its text (with a
  /// tokenizer).
  int64_t argmax = 0;
  float argmaxLogit = 0;
  std::string argmaxText;
  /// The greedy tokens (--greedy N) and their text (with a tokenizer).
  std::vector<int32_t> generated;
  std::string generatedText;
  /// The prefill's time, and the decode steps' (generated - 1 of them).
  double prefillSeconds = 0, decodeSeconds = 0;
  /// Bytes of the model's weights in memory, as they are kept (mapped from
  /// the file or owned), with the CPU backend's packed copies once a call
  /// made them (packedWeightBytes of them: the layers' f32 matrices for the
  /// matmul, the Q8_0 and Q4_K matrices for decode), less the file's rows those
  /// replaced (Runner::residentWeightBytes).
  uint64_t weightBytes = 0, packedWeightBytes = 0;
  /// How long the runner took to repack the Q8_0 and Q4_K matrices for decode
  /// before the run (Runner::repackSeconds).
  double repackSeconds = 0;
  /// Of weightBytes, those on 2 MiB pages at the end of the run
  /// (kvir::weightHugePageBytes).
  uint64_t weightHugePageBytes = 0;
  /// What a decode step reads, on average over the run's steps: every weight
  /// but the embedding table's unused rows, and the K/V its token attends.
  double decodeStepBytes = 0;
  /// Where --dump-logits wrote its rows ("" without it), and their shape.
  std::string logitsFile;
  int64_t logitsRows = 0, vocab = 0;
};

/// Prints `report` as text or (`json`) JSON.
void printTokenListReport(const TokenListReport &report, bool json);

void printText(const Report &report);
void printJson(const Report &report);
/// printJson with `json` (--json), else printText.
void printReport(const Report &report, bool json);

} // namespace kvir::run

#endif // KVIR_DRIVER_RUNNER_REPORT_H
