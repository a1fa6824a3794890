//===- Session.h - Running a compiled kv program ----------------*- C++ -*-===//
//
// What every runner of a compiled kv program needs, whether the program was
// JIT-compiled (kv-run, kv-bench) or compiled ahead of time (kv-aot-run on a
// machine without LLVM): the entry's signature (an EntryManifest, written by
// the compiler), binding its arguments from files or seeded samples, calling
// its `_kvrt_entry_<name>` wrapper over an execution context, reading the
// results back, and the measurements kv-run reports (a full prefill of the
// same final context, greedy continuations, logit fidelity). No MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_EXEC_SESSION_H
#define KVIR_RUNTIME_EXEC_SESSION_H

#include "runtime/core/ComputeBackend.h"
#include "runtime/exec/ExecRuntime.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kvir::exec {

//===----------------------------------------------------------------------===//
// The entry's signature
//===----------------------------------------------------------------------===//

/// What crosses the entry boundary.
enum class ValueKind { Model, Index, Tokens, Logits, Cache, Tensor };

/// The spelling of a kind in manifests and reports.
const char *valueKindName(ValueKind kind);

/// One argument of an entry.
struct ArgSpec {
  ValueKind kind = ValueKind::Index;
  /// The argument's `kv.name`, or `argN`.
  std::string name;
  /// Static sizes (-1: dynamic): tokens [dims[0]], tensors [dims[0]][dims[1]]
  /// [dims[2]].
  int64_t dims[3] = {-1, -1, -1};
  /// The `kv.sample_length` of a dynamic argument (-1: none).
  int64_t sampleLength = -1;
  /// For a model: the architecture its `!kv.model` type has.
  kvrt_model_config model{};
};

/// The signature of an entry and what a runner needs to report errors.
struct EntryManifest {
  std::string entry;
  /// Where the program's generated code runs: "cpu" or "gpu".
  std::string target = "cpu";
  /// The element type of the program's K/V pages (its !kv.cache values);
  /// a runner creates its pool with it. A manifest without the line is f32.
  kvrt_kv_dtype kvDtype = KVRT_KV_F32;
  std::vector<ArgSpec> args;
  std::vector<ValueKind> results;
  /// The location of every site (the `site` of the exec ABI), as text.
  std::vector<std::string> sites;
  /// Whether the program held kv.edit, kv.compose or kv.logits ops (else all
  /// of it counts as plan work).
  bool hasPlanOps = false;

  /// A line-based text form, stable across versions of the compiler that
  /// write the same manifest version.
  std::string serialize() const;
  /// Parses serialize()'s output; false with `error` on malformed text.
  static bool parse(const std::string &text, EntryManifest &out,
                    std::string &error);
};

/// The symbols a compiled program exports for an entry.
std::string entrySymbol(const std::string &entry);
std::string manifestSymbol(const std::string &entry);

/// The entry wrapper convert-kv-to-runtime emits: arguments and results as
/// arrays of 64-bit slots.
using EntryFn = void (*)(kvrt_exec_context *ctx, int64_t *args,
                         int64_t *results);

//===----------------------------------------------------------------------===//
// Values
//===----------------------------------------------------------------------===//

/// A shared reference to a view; views are immutable values.
using ViewRef = std::shared_ptr<kvrt_view>;

/// Takes ownership of one reference (NULL gives an empty ViewRef).
ViewRef adoptView(kvrt_view *view);

/// Logits computed by one prefill, with what they were computed from.
struct Logits {
  int64_t rows = 0, vocab = 0;
  std::vector<float> data;
  /// The view the prefill attended (its view list, shifted and concatenated).
  ViewRef context;
  /// The tokens it computed, and the position of the first.
  std::vector<int32_t> tokens;
  int64_t position = 0;
  /// Whether only the last token's row was computed.
  bool lastOnly = false;
  /// The cache the prefill returned (context plus the new run).
  ViewRef result;
};

/// An f32 tensor (attention queries and outputs), row-major.
struct Tensor {
  int64_t dims[3] = {0, 0, 0};
  std::vector<float> data;
};

/// An argument or a result.
struct Value {
  ValueKind kind = ValueKind::Index;
  int64_t index = 0;
  std::vector<int32_t> tokens;
  std::shared_ptr<const Logits> logits;
  std::shared_ptr<const Tensor> tensor;
  ViewRef cache;
};

/// Work done, in the units of docs/design.md ("Costs").
struct WorkStats {
  /// Backend prefill calls and the tokens they computed (all layers).
  int64_t prefillCalls = 0, prefillTokens = 0;
  /// Rows of logits computed.
  int64_t logitsRows = 0;
  /// Tokens whose scan-layer K/V were computed for a deviation scan.
  int64_t scanTokens = 0;
  /// Model FLOPs (runtime/core/ModelCost.h) of all of the above.
  int64_t flops = 0;
  /// Bytes of K/V written to new pages.
  int64_t kvBytesWritten = 0;
  /// Wall time, in seconds.
  double seconds = 0;
};

//===----------------------------------------------------------------------===//
// Binding and running
//===----------------------------------------------------------------------===//

/// How a runner builds the arguments.
struct InputOptions {
  /// Inputs by argument name (`argN` or the argument's kv.name): the text of
  /// a file of whitespace-separated token ids (tokens) or floats (tensors),
  /// and where it came from (for messages).
  std::map<std::string, std::pair<std::string, std::string>> given;
  /// Token lists a runner encoded from text (`--text NAME=STRING`,
  /// `--text-file NAME=FILE`: runtime/exec/Text.h), by argument name as
  /// `given`. Unlike a file of ids, the list may be empty (text "" encodes
  /// to 0 tokens), which a static size then rejects.
  struct Encoded {
    std::vector<int32_t> tokens;
    /// The option that gave it and where it came from (for messages).
    std::string option, source;
    /// The text, and whether BOS was put in front of its encoding.
    std::string text;
    bool bos = false;
  };
  std::map<std::string, Encoded> givenTokens;
  /// Synthesize the inputs not given (else they are an error): seeded
  /// tokens, seeded uniform floats in [-1, 1) for tensors.
  bool synthesize = false;
  uint64_t seed = 1;
  /// Length of a synthesized dynamic input without a `kv.sample_length`.
  int64_t dynamicLength = 16;
  /// The longest input that is synthesized (tokens, or query rows); a
  /// longer one is an error, not an allocation (runners pass their context
  /// limit).
  int64_t maxSynthesized = int64_t(1) << 20;
};

/// The model a runner runs: the llama2.c checkpoint `file` when given, else
/// the seeded synthetic model `synthetic` (`default`: stories260K's shape,
/// `synthetic-test`: dim 256, 4/2 heads of 64, half RoPE, theta 1e6,
/// `synthetic-bench`: dim 1024, 8 layers, 8 heads of 128), with `seed` (0:
/// the preset's). `description` says which, for reports. Null with `error`.
kvrt_model *loadModel(const std::string &file, const std::string &synthetic,
                      uint64_t seed, std::string &description,
                      std::string &error);

/// Parses whitespace-separated token ids (non-negative int32); false with a
/// message naming the first bad item, or an empty list, and `source`.
bool parseTokenList(const std::string &text, const std::string &source,
                    std::vector<int32_t> &out, std::string &error);

/// The largest input file a runner reads (token lists, texts, manifests):
/// 256 MiB, far beyond any context, and a bound on the memory a file costs.
constexpr uint64_t kMaxInputFileBytes = uint64_t(256) << 20;

/// Reads a whole regular file of at most `maxBytes`; false with a message
/// naming it as `what` (e.g. "cannot open token file 'x': No such file or
/// directory"; a FIFO, a device or a directory is refused, not read).
bool readFile(const std::string &path, std::string &out, std::string &error,
              const char *what = "file",
              uint64_t maxBytes = kMaxInputFileBytes);

/// One bound argument, for the report.
struct BoundInput {
  std::string name;
  /// Tokens or rows bound (-1 for the model).
  int64_t size = -1;
  bool synthesized = false;
  /// Bound from text (InputOptions::givenTokens): the text, and whether BOS
  /// was put in front.
  bool fromText = false;
  std::string text{};
  bool bos = false;
};

/// Binds the arguments of `manifest`'s entry: the model (whose !kv.model
/// must match `config`; the message names the first field that differs),
/// token lists and tensors from `options`. False with `error` otherwise.
bool bindArguments(const EntryManifest &manifest,
                   const kvrt_model_config &config, const InputOptions &options,
                   std::vector<Value> &args, std::vector<BoundInput> *bound,
                   std::string &error);

/// The block store a run's kv.load_block and kv.store_block use, and the
/// policy on its faults (KVRT_EXEC_STORE_FALLBACK or _FAIL).
struct BlockStoreBinding {
  kvrt_block_store *store = nullptr;
  int32_t policy = KVRT_EXEC_STORE_FALLBACK;
};

/// One interaction of a block op with the store (kvrt_exec_block_event with
/// its strings copied; the event's own pointers are cleared).
struct BlockEvent {
  kvrt_exec_block_event event{};
  std::string key, message;
};

/// What one run of an entry did.
struct RunOutcome {
  std::vector<Value> results;
  WorkStats plan, setup;
  /// Selective recomputes executed, one record per op run.
  std::vector<kvrt_exec_repair> repairs;
  /// What kv.load_block and kv.store_block did with the block store.
  std::vector<BlockEvent> blockEvents;
  bool failed = false;
  kvrt_status status = KVRT_OK;
  std::string message;
  /// The site of the failing op (-1: none).
  int32_t site = KVRT_EXEC_NO_SITE;
  /// The longest context the run built (the highest position computed, plus
  /// one).
  int64_t contextTokens = 0;
};

/// Calls `entry` on `args` over a fresh execution context of `backend`,
/// `model` and `pool`, and reads the results back (views retained, logits
/// and tensors copied).
/// With `maxContext` > 0, a prefill or attention at a position at or beyond
/// it fails at its site (createExecContext). kv.load_block and
/// kv.store_block use the block store of `blockStore`, when given.
RunOutcome runEntry(EntryFn entry, const EntryManifest &manifest,
                    ComputeBackend &backend, const kvrt_model *model,
                    kvrt_pool *pool, const std::vector<Value> &args,
                    int64_t maxContext = 0,
                    const BlockStoreBinding *blockStore = nullptr);

/// The context limit runners apply unless told otherwise: 8 times the
/// context the model was trained on (its seq_len). Positions beyond the
/// trained context were never seen in training; far beyond it the work is
/// also quadratic in the context.
int64_t defaultMaxContext(const kvrt_model_config &config);

/// The backend called `name` (`cpu`, `cuda`, `reference`) for `model`; null
/// with `error` set otherwise.
std::unique_ptr<ComputeBackend> createBackend(const std::string &name,
                                              const kvrt_model *model,
                                              std::string &error);

//===----------------------------------------------------------------------===//
// Measurements
//===----------------------------------------------------------------------===//

/// Prefills `tokens` from position 0 into an empty view of `pool`, computing
/// logits of the last `rows` tokens only (split in two prefills when
/// rows > 1, which is the same math). An empty token list is an error.
bool fullPrefill(ComputeBackend &backend, const Forward &forward,
                 const kvrt_model *model, kvrt_pool *pool,
                 const std::vector<int32_t> &tokens, int64_t rows, Logits &out,
                 WorkStats &work, std::string &error);

/// Continues greedily from `logits` (its last row) and `cache` for `n`
/// tokens, one prefill per token; returns the tokens chosen.
bool greedyContinue(ComputeBackend &backend, const Forward &forward,
                    const kvrt_model *model, const Logits &logits,
                    ViewRef cache, int64_t n, std::vector<int32_t> &out,
                    std::string &error);

/// The tokens of every run of `view`, in order.
std::vector<int32_t> viewTokens(const kvrt_view *view);

/// Whether the effective positions of `view` are 0, 1, ..., n-1.
bool hasContiguousPositions(const kvrt_view *view);

/// The effective position after the last token of `view` (0 when empty).
int64_t endPosition(const kvrt_view *view);

/// The fidelity of `approx` against `full`, row by row (docs/design.md).
struct Fidelity {
  int64_t rows = 0;
  double cosineMin = 0, cosineMean = 0;
  double klMean = 0, klMax = 0;
  int64_t top1Agree = 0;
  double maxAbsDiff = 0;
};
Fidelity compareLogits(const float *approx, const float *full, int64_t rows,
                       int64_t vocab);

/// Indices of the `k` largest values of `row`, largest first.
std::vector<int32_t> topK(const float *row, int64_t vocab, int64_t k);

} // namespace kvir::exec

#endif // KVIR_RUNTIME_EXEC_SESSION_H
