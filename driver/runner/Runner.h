//===- Runner.h - Running entries of compiled kv programs -------*- C++ -*-===//
//
// The sequence kv-run and kv-aot-run share, and a server runs per request:
//
//   Runner::create   the block store (checked, not yet connected), the
//                    model, its tokenizer, the backend: once
//   preparePool      the KV pool, of the program's page type: once
//   encodeInputs     a request's texts, with the tokenizer
//   bind             the entry's arguments (runtime/exec/Binding.h)
//   run              the entry over the backend, model, pool and store
//   reportProblems   block store faults and a failure, at their sites
//   complete         the Report: results, work, measurements, the store
//
// and, without a program, a token list prefilled from position 0
// (checkTokenList, prefillTokenList, printTokenList).
//
// A Runner holds one model, pool and backend for its life and runs any
// number of entries through them, one at a time. What differs stays in the
// tools: kv-run compiles the program just in time (its exact reference and
// --attribute too), kv-aot-run opens a library kv-aot wrote. Plain C++, no
// LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_RUNNER_RUNNER_H
#define KVIR_DRIVER_RUNNER_RUNNER_H

#include "driver/runner/Report.h"
#include "driver/runner/RunOptions.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kvir::run {

/// The least weight bytes hugePageNote notes: a smaller model's weights
/// span few 2 MiB pages at all.
constexpr uint64_t kHugePageNoteLeastBytes = uint64_t(256) << 20;

/// The note for a run whose model holds `weightBytes` of weights,
/// `hugeBytes` of them on 2 MiB pages now, mapped from a GGUF file's page
/// cache (`mappedFile`): where they are 256 MiB or more, less than three
/// quarters of them lie on 2 MiB pages, and transparent huge pages are not
/// off (`hugePagesOff`), it says so, why the page cache can hold a file that
/// way, and that --no-mmap reads the weights into huge pages of the
/// process's own (docs/models.md, "Weights on 2 MiB pages"); "" otherwise.
std::string hugePageNote(uint64_t weightBytes, uint64_t hugeBytes,
                         bool mappedFile, bool hugePagesOff);

/// A program's entry as a runner calls it.
struct Entry {
  /// Its `_kvrt_entry_<name>` wrapper and its signature.
  exec::EntryFn fn = nullptr;
  const exec::EntryManifest *manifest = nullptr;
  /// The forward of the runner's model in the same code (the measurements
  /// run it; null members where there is none).
  Forward forward;
  /// What the report calls the program (its file).
  std::string program;
};

/// A token list prefilled from position 0, then continued greedily (kv-run
/// without a program).
struct TokenListRun {
  std::vector<int32_t> tokens;
  /// Where the tokens came from text: the text, and whether BOS went in
  /// front.
  bool fromText = false, bos = false;
  std::string text;
  /// Every position's logits (--dump-logits), else the last one's only: a
  /// prefill that needs one row computes the classifier for one row.
  bool allRows = false;
  /// Tokens to generate greedily from the prompt (--greedy N): the argmax of
  /// the prompt's last logits, then of each decode step's; N - 1 steps of
  /// one token each.
  int64_t greedy = 0;
  /// What the prefill computed (`allRows` or one row), and in how long.
  std::vector<float> logits;
  double seconds = 0;
  /// The generated tokens, and the time of the decode steps together.
  std::vector<int32_t> generated;
  double decodeSeconds = 0;
};

/// Runs entries of compiled kv programs on one model.
class Runner {
public:
  /// Opens what `options` name, in this order: the block store (its options
  /// checked; nothing connects before the first block op), the model, its
  /// tokenizer, the backend (`options.backend`: cpu, cuda or reference; the
  /// cuda one checks the driver before any generated code loads kernels).
  /// Null with `error`.
  static std::unique_ptr<Runner> create(const RunnerOptions &options,
                                        std::string &error);
  ~Runner();
  Runner(const Runner &) = delete;
  Runner &operator=(const Runner &) = delete;

  const kvrt_model *model() const { return modelHandle.get(); }
  const kvrt_model_config &config() const { return modelConfig; }
  /// What the report calls the model (its file, or the synthetic preset).
  const std::string &modelDescription() const { return description; }
  ComputeBackend &backend() { return *computeBackend; }
  /// Null when the run has no tokenizer; tokenizerPath() says which file.
  const kvrt_tokenizer *tokenizer() const { return tokenizerRef.get(); }
  const std::string &tokenizerPath() const { return tokenizerFile; }
  /// Null before preparePool.
  kvrt_pool *pool() const { return poolHandle.get(); }
  /// The element type of the pool's pages (after preparePool).
  kvrt_kv_dtype pageType() const { return poolDtype; }
  /// The context limit of every run (0: none): --max-context, else 8 times
  /// the model's trained context.
  int64_t maxContext() const { return limit; }

  /// The warning for a run whose context reached `tokens`, beyond the
  /// context the model was trained on ("" within it).
  std::string contextWarning(int64_t tokens) const;

  /// The bytes of weights the forward reads that the process holds: the
  /// model's, the runtime's packed copies, less the file's rows those
  /// replaced (kvir::releasedWeightBytes).
  uint64_t residentWeightBytes() const;

  /// The note for a model whose weights lie on 2 MiB pages too little now
  /// (hugePageNote of this model: mapped from a GGUF file unless --no-mmap);
  /// "" when none is due.
  std::string hugePageNote() const;

  /// Creates the KV pool (--page-tokens, --pool-pages) for pages of
  /// `programDtype`, the program's (`fromProgram`), or of --kv-dtype, which
  /// must then agree with it. A second call for the same type keeps the
  /// pool; another type is an error. False with `error`.
  bool preparePool(kvrt_kv_dtype programDtype, bool fromProgram,
                   std::string &error);

  /// Encodes the texts of `text` with the tokenizer into `inputs`, and
  /// bounds synthesized inputs by what a run may compute and the pool may
  /// hold. False with `error`.
  bool encodeInputs(const exec::TextOptions &text, exec::InputOptions &inputs,
                    std::string &error) const;

  /// Binds the arguments of `manifest`'s entry against the runner's model
  /// (exec::bindArguments); what was bound goes to `report.inputs`.
  bool bind(const exec::EntryManifest &manifest,
            const exec::InputOptions &inputs, std::vector<exec::Value> &args,
            Report &report, std::string &error) const;

  /// Runs `entry` on `args` with the context limit and the block store.
  exec::RunOutcome run(const Entry &entry,
                       const std::vector<exec::Value> &args);

  /// Shows a problem at a site of the program (-1: none), as an error or a
  /// warning.
  using SiteReporter = std::function<void(int32_t site, bool isError,
                                          const std::string &message)>;

  /// Reports each block store fault of `outcome` that the policy let the
  /// run go on after as a warning, then its failure as an error, through
  /// `report`. False when the run failed.
  static bool reportProblems(const exec::RunOutcome &outcome,
                             const SiteReporter &report);

  /// Completes `report` after a successful run of `entry`: what ran where,
  /// the results and work, the measurements `request` asks for (greedy
  /// continuation, the logits dump, the comparison with a full prefill;
  /// against `reference`'s context where it is an exact reference of an
  /// erratum plan, see MeasureOptions), and the block store. False with
  /// `error` when a measurement fails.
  bool complete(Report &report, const Entry &entry,
                const exec::RunOutcome &outcome, const RequestOptions &request,
                const exec::RunOutcome *reference, std::string &error);

  /// Checks a token list, and the `greedy` tokens to generate after it
  /// (all but the last enter the context), against the context limit and
  /// the vocabulary before it is prefilled; false with `error`.
  bool checkTokenList(const std::vector<int32_t> &tokens, int64_t greedy,
                      std::string &error) const;

  /// Prefills `run.tokens` from position 0 into an empty view of the pool
  /// with `forward` (the rows of logits `run.allRows` asks for), then
  /// generates `run.greedy` tokens, one decode step per token after the
  /// first; each part timed. False with `error`.
  bool prefillTokenList(const Forward &forward, TokenListRun &run,
                        std::string &error);

  /// Prints what `run` computed, as text or (`json`) JSON: the model, the
  /// tokens (and their text decoded back), the argmax at the last position,
  /// the generated tokens and their text, the times; with `dumpLogits`,
  /// writes every row there. False with `error`.
  bool printTokenList(const TokenListRun &run, const std::string &dumpLogits,
                      bool json, std::string &error);

private:
  Runner() = default;

  // Released in the reverse order: the pool before the backend that may
  // hold its pages' device copies, the store last, as the tools did.
  RunnerOptions options;
  exec::BlockStoreRef store{nullptr, kvrt_block_store_release};
  exec::BlockStoreBinding storeBinding;
  std::unique_ptr<kvrt_model, void (*)(kvrt_model *)> modelHandle{
      nullptr, kvrt_model_release};
  kvrt_model_config modelConfig{};
  std::string description;
  exec::TokenizerRef tokenizerRef;
  std::string tokenizerFile;
  std::unique_ptr<ComputeBackend> computeBackend;
  /// How long making the decode rows took at create (kvir::decodeRows; 0
  /// where the backend is not the CPU or there were none to make).
  double repackSeconds = 0;
  std::unique_ptr<kvrt_pool, void (*)(kvrt_pool *)> poolHandle{
      nullptr, kvrt_pool_release};
  kvrt_kv_dtype poolDtype = KVRT_KV_F32;
  int64_t limit = 0;
};

} // namespace kvir::run

#endif // KVIR_DRIVER_RUNNER_RUNNER_H
