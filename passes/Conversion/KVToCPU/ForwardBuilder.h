//===- ForwardBuilder.h - The model forward as upstream IR ------*- C++ -*-===//
//
// Emits the decoder forward of a !kv.model as functions in upstream dialects
// (func, scf, arith, math, memref, vector): the kernels the CPU backend runs.
// The run-table ABI of these functions is documented in docs/cpu-backend.md
// and mirrored by runtime/cpu/CpuKernels.h.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_PASSES_CONVERSION_KVTOCPU_FORWARDBUILDER_H
#define KVIR_PASSES_CONVERSION_KVTOCPU_FORWARDBUILDER_H

#include "runtime/core/KVRuntime.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/LLVM.h"

#include "llvm/ADT/StringMap.h"

#include <cstdint>
#include <string>

namespace mlir::kv {

class ModelType;

/// The configuration a forward is specialised for (a !kv.model's parameters).
struct ForwardConfig {
  int64_t dim = 0;
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kvHeads = 0;
  int64_t vocab = 0;
  /// True for pairs (i, i + d/2), false for interleaved pairs (2i, 2i+1).
  bool halfRope = false;
  double theta = 10000.0;
  double eps = 1e-5;

  static ForwardConfig fromModelType(ModelType type);
  /// The config of a model the runtime loaded.
  static ForwardConfig fromRuntimeConfig(const kvrt_model_config &c) {
    ForwardConfig f;
    f.dim = c.dim;
    f.hidden = c.hidden_dim;
    f.layers = c.n_layers;
    f.heads = c.n_heads;
    f.kvHeads = c.n_kv_heads;
    f.vocab = c.vocab_size;
    f.halfRope = c.rope_layout == KVRT_ROPE_HALF;
    f.theta = c.rope_theta;
    f.eps = c.rms_eps;
    return f;
  }
  int64_t headSize() const { return dim / heads; }
  int64_t kvDim() const { return kvHeads * headSize(); }
};

/// Width of one row of the run table (`memref<?x8xi64>`): page-list offset,
/// slot_begin, n_tokens, base_pos, delta, then three reserved zeros.
constexpr int64_t kRunTableWidth = 8;

/// Why `config` cannot be compiled, or an empty string when it can.
std::string checkForwardConfig(const ForwardConfig &config);

/// The MLIR source of the forward functions, each public one named
/// `<prefix>_<kernel>`: `prefill`, `attention`, `materialize`.
std::string getForwardSource(const ForwardConfig &config, StringRef prefix);

/// The placeholders shared by the CPU and GPU templates (model sizes, RoPE
/// layout, theta, eps, scale) for `config` and `prefix`.
llvm::StringMap<std::string>
getForwardSubstitutions(const ForwardConfig &config, StringRef prefix);

/// `text` with every `${KEY}` replaced by map[KEY] (each key must exist).
std::string substituteTemplate(StringRef text,
                               const llvm::StringMap<std::string> &map);

/// Parses the forward of `config` and moves its functions into `module`.
/// Fails with a diagnostic at `loc` when a function of that name exists or the
/// config is not supported.
LogicalResult buildForwardFunctions(ModuleOp module,
                                    const ForwardConfig &config,
                                    StringRef prefix, Location loc);

/// Parses `source` (a forward, CPU or GPU) and moves its top-level ops into
/// `module`; `what` names it in the diagnostics at `loc` (a parse failure, a
/// symbol that exists already).
LogicalResult insertForwardSource(ModuleOp module, StringRef source,
                                  StringRef what, Location loc);

/// Registers the dialects the emitted functions use.
void registerForwardDialects(DialectRegistry &registry);

/// The module attribute naming the forwards to emit: a dictionary from a
/// name to a !kv.model type.
constexpr llvm::StringLiteral kForwardAttrName = "kv.forward";

/// Calls `build` for every entry of `module`'s `kv.forward` dictionary, then
/// removes the attribute. Returns how many forwards were built (0 without the
/// attribute), or failure with a diagnostic on a malformed entry or a failed
/// build.
FailureOr<unsigned> buildRequestedForwards(
    ModuleOp module,
    function_ref<LogicalResult(const ForwardConfig &, StringRef name)> build);

} // namespace mlir::kv

#endif // KVIR_PASSES_CONVERSION_KVTOCPU_FORWARDBUILDER_H
