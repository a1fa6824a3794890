//===- ComputeBackend.h - Where a kv program's math runs --------*- C++ -*-===//
//
// A kv program, once planned by kv-optimize, needs math in four places: a
// prefill of new tokens over a view, the K/V of tokens at one layer (the
// deviation scan of a `fraction` repair), attention of given queries over a
// view (kv.attention), and keys rewritten by their offsets (kv.materialize).
// Everything else (slices, shifts, concatenation, bookkeeping) is view
// metadata the runtime core does.
//
// The math itself is generated code: the forward the compiler put into the
// program's module, handed over as a kvir::Forward (ForwardABI.h). A
// ComputeBackend is where it runs: it lays out the memory the forward reads
// and writes (host memory for `cpu`, device memory for `cuda`), calls the
// entry point, and turns the result into pages and views. The `reference`
// backend is the exception: it ignores the Forward and computes with the
// plain C++ oracle (runtime/reference), for tests and comparisons.
//
// Errors follow the C ABI: a kvrt_status, the message in kvrt_last_error();
// no exception escapes. On any error, the views and the pool are as they were.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_COMPUTEBACKEND_H
#define KVIR_RUNTIME_CORE_COMPUTEBACKEND_H

#include "runtime/core/ForwardABI.h"
#include "runtime/core/KVRuntime.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace kvir {

/// Which rows of a prefill of n tokens get logits: every row, or the last
/// `count` (the last row alone; the last segment of a fused chain of
/// prefills, whose earlier rows nobody reads). Rows before the first one
/// computed skip the classifier. Built only through all() and last(), so a
/// bool or a row index never converts into one by mistake.
class LogitRows {
public:
  static LogitRows all() { return LogitRows(-1); }
  static LogitRows last(int64_t count = 1) { return LogitRows(count); }

  /// The first of `n` rows whose logits are computed (n when none is).
  int64_t first(int64_t n) const {
    return count < 0 ? 0 : count >= n ? 0 : n - count;
  }
  /// Whether only the last row is asked for.
  bool lastOnly() const { return count == 1; }

private:
  explicit LogitRows(int64_t count) : count(count) {}
  int64_t count;
};

class ComputeBackend {
public:
  virtual ~ComputeBackend() = default;

  /// The backend's name as kv-run spells it (`reference`, `cpu`, `cuda`).
  virtual const char *name() const = 0;

  /// Whether the backend runs the generated forward (then every call needs
  /// the Forward of the model's config) or computes by itself (the oracle).
  virtual bool runsGeneratedCode() const = 0;

  /// Prefills `n` tokens at positions pos .. pos+n-1 over `view`: each new
  /// token attends the view (a key counts iff its effective position is <= the
  /// query's) and the new tokens up to itself. The new K/V go to fresh sealed
  /// pages appended as one run labelled `label` (may be NULL); the new view is
  /// returned in `*out` (a new reference). `*logits` receives the rows
  /// `rows` names, [n - rows.first(n)][vocab] floats (every row, or the last
  /// ones); a null `logits` asks for none, and the classifier does not run
  /// (a program that never reads a prefill's logits: logitsFrom).
  virtual kvrt_status prefill(const Forward &forward, const kvrt_model *model,
                              const kvrt_view *view, const int32_t *tokens,
                              int64_t n, int64_t pos, const char *label,
                              LogitRows rows, std::vector<float> *logits,
                              kvrt_view **out) = 0;

  /// The K (rotated at its position) and V of layer `layer` of `n` tokens at
  /// positions pos .. pos+n-1 over `view`, as a prefill would compute them
  /// (running layers 0 .. layer only), without appending anything: `k` and
  /// `v` receive [n][kv_heads][head_size] floats each.
  virtual kvrt_status layerKV(const Forward &forward, const kvrt_model *model,
                              const kvrt_view *view, const int32_t *tokens,
                              int64_t n, int64_t pos, int32_t layer,
                              std::vector<float> *k, std::vector<float> *v) = 0;

  /// Attention of `n` queries `q` ([n][heads][head_size], not rotated; query
  /// t at position pos + t) over the keys of layer `layer` in `view`, each
  /// run's offset applied by rotating the query (kv.attention). `*out`
  /// receives [n][heads][head_size]; a head that sees no key gets zeros.
  virtual kvrt_status attention(const Forward &forward, const kvrt_model *model,
                                const kvrt_view *view, const float *q,
                                int64_t n, int64_t pos, int32_t layer,
                                std::vector<float> *out) = 0;

  /// The view with every run's offset applied to its keys: runs with Δ != 0
  /// are copied to fresh pages with keys rotated by R(Δ) (values copied) and
  /// stored at base_pos + Δ with Δ = 0; other runs are shared
  /// (kv.materialize).
  virtual kvrt_status materialize(const Forward &forward,
                                  const kvrt_model *model,
                                  const kvrt_view *view, kvrt_view **out) = 0;
};

/// Which entry point of a Forward a call needs.
enum class ForwardEntry { Prefill, Attention, Materialize };

/// Checks that `forward` was compiled for the config and the weights'
/// formats of `model` (K/V pages of the element type its key names: the
/// backend checks the pool's against it) and has `entry`; the message names
/// the two configs, the two sets of formats, or the missing entry.
kvrt_status checkForward(const Forward &forward, const kvrt_model *model,
                         ForwardEntry entry);

/// The reference oracle as a backend (runtime/reference).
std::unique_ptr<ComputeBackend> createReferenceBackend();

/// The first row whose logits a prefill of `n` rows computes: rows.first(n),
/// or n when `logits` is null (none).
inline int64_t logitsFrom(int64_t n, LogitRows rows,
                          const std::vector<float> *logits) {
  return !logits ? n : rows.first(n);
}

} // namespace kvir

#endif // KVIR_RUNTIME_CORE_COMPUTEBACKEND_H
