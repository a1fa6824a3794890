//===- BuildForward.h - The model forward, described once -------*- C++ -*-===//
//
// Emits the decoder forward of one model config into a module, for a target
// (ForwardTarget.h): the layer sequence (RMSNorm, Q/K/V projections, K/V
// stored into pages with RoPE, attention over the run table, output
// projection, SwiGLU FFN, final norm and logits), written once here over the
// target's stages, and the three entry points the runtime calls with an
// argument struct (runtime/core/ForwardABI.h):
//
//   func.func @<prefix>_prefill(!llvm.ptr)      kvrt_prefill_args *
//   func.func @<prefix>_attention(!llvm.ptr)    kvrt_attention_args *
//   func.func @<prefix>_materialize(!llvm.ptr)  kvrt_materialize_args *
//
// with <prefix> = kvir::forwardPrefix(config, dtype, formats): a forward is
// specialised for a config, a K/V element type and the formats of the
// weights it reads (kv.weight_formats below). Each entry unpacks its
// struct (fields in ForwardABI.def order) into memrefs and scalars and calls
// `<prefix>_<entry>_impl`, whose arguments are those fields.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_PASSES_CONVERSION_FORWARD_BUILDFORWARD_H
#define KVIR_PASSES_CONVERSION_FORWARD_BUILDFORWARD_H

#include "passes/Conversion/Forward/ForwardTarget.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"

#include <string>

namespace mlir::kv {

/// The entry points of a forward.
enum class ForwardEntryPoint { Prefill, Attention, Materialize };

/// `<forwardPrefix(config, dtype, formats)>_<prefill|attention|materialize>`.
std::string forwardEntryName(const kvrt_model_config &config,
                             kvrt_kv_dtype dtype,
                             const kvir::WeightFormats &formats,
                             ForwardEntryPoint entry);

/// The module attribute naming the formats of the weights a model config's
/// forward is built for: an array of `[!kv.model, "formats"]` (the spec of
/// runtime/core/WeightFormat.h, "f32" for all f32). A program names the
/// model's shape, not its file: a runner that binds a model of other
/// formats sets this before lowering (driver/compiler's LowerOptions), and
/// every forward of that config (buildProgramForwards) and every call of it
/// (convert-kv-to-runtime, which removes the attribute) uses them. A config
/// the attribute does not name is all f32.
constexpr llvm::StringLiteral kWeightFormatsAttrName = "kv.weight_formats";

/// The formats `module` names for `config` (all f32 where it names none),
/// or a diagnostic at `loc` for a malformed attribute.
FailureOr<kvir::WeightFormats>
weightFormatsOf(ModuleOp module, const kvrt_model_config &config, Location loc);

/// The kv.weight_formats entry of `config` with `formats`.
Attribute weightFormatsEntry(MLIRContext *ctx, const kvrt_model_config &config,
                             const kvir::WeightFormats &formats);

/// The K/V element type a cache element type stands for (f32, f16, bf16).
kvrt_kv_dtype kvDtypeOf(Type element);

/// Why `config` has no forward on `target`, or "" (every target takes K/V
/// pages of every element type).
std::string checkForward(const kvrt_model_config &config,
                         const ForwardTarget &target);

/// Emits the forward of `config` with K/V pages of `dtype` and weights in
/// `formats` into `module` for `target`, unless its entry points exist
/// already. Fails with a diagnostic at `loc` when the config is not
/// supported or one of the symbols it emits exists.
LogicalResult buildForward(ModuleOp module, const kvrt_model_config &config,
                           kvrt_kv_dtype dtype,
                           const kvir::WeightFormats &formats,
                           ForwardTarget &target, Location loc);

/// The module attribute naming forwards to emit even when no op of the
/// module uses them: an array whose entries are a `!kv.model` type (f32
/// pages) or `[!kv.model, f16 | bf16 | f32]` (runners use it for the model
/// they bind, to compare against a full prefill).
constexpr llvm::StringLiteral kExportForwardsAttrName = "kv.export_forwards";

/// The kv.export_forwards entry of `config` with pages of `dtype`.
Attribute exportForwardEntry(MLIRContext *ctx, const kvrt_model_config &config,
                             kvrt_kv_dtype dtype);

/// Emits, for `target`, the forward of every (model config, K/V element
/// type) the module's kv ops use (the model operand of kv.prefill,
/// kv.attention, kv.materialize, kv.selective_recompute and the element type
/// of their caches) and of every entry of `kv.export_forwards`, with the
/// weight formats `kv.weight_formats` names for the config, then removes
/// `kv.export_forwards`. Returns how many forwards were emitted, or
/// failure with a diagnostic at the op that needs an unsupported one.
FailureOr<unsigned> buildProgramForwards(ModuleOp module,
                                         ForwardTarget &target);

/// Registers the dialects the forward uses on every target.
void registerForwardDialects(DialectRegistry &registry);

} // namespace mlir::kv

#endif // KVIR_PASSES_CONVERSION_FORWARD_BUILDFORWARD_H
