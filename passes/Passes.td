//===- Passes.td - The kv passes --------------------------*- tablegen -*-===//

#ifndef KVIR_PASSES_PASSES_TD
#define KVIR_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Conversion
//===----------------------------------------------------------------------===//

def ConvertKVToCPUPass : Pass<"convert-kv-to-cpu", "ModuleOp"> {
  let summary = "Emits the generated CPU forward of every model the module asks for";
  let description = [{
    Reads the module attribute `kv.forward`, a dictionary from a name to a
    `!kv.model` type, and emits for each entry NAME the decoder forward of
    that config as functions in upstream dialects (func, scf, arith, math,
    memref, vector), specialised to its dimensions:

    * `NAME_prefill`: RMSNorm, Q/K/V projections, RoPE (angles from integer
      positions in f64), K/V written into the pages of the new run, attention
      over the runs of a view with one query rotation per run offset Δ and an
      online-softmax merge, output projection, SwiGLU FFN, residuals, final
      norm and logits;
    * `NAME_attention`: the attention alone (n queries over a run table);
    * `NAME_materialize`: keys rotated by their run's offset into new pages
      (`kv.materialize`).

    `NAME_prefill` takes the number of layers to run: fewer than all for the
    deviation scan of a `fraction` repair, which reads one layer's K/V.

    The public functions carry `llvm.emit_c_interface`; their run-table ABI is
    documented in docs/cpu-backend.md. The attribute is removed.

    Before:
    ```mlir
    module attributes {kv.forward = {tiny = !kv.model<dim = 64, hidden = 172,
        layers = 5, heads = 8, kv_heads = 4, vocab = 512>}} {}
    ```
    After:
    ```mlir
    module {
      func.func private @tiny_rmsnorm(...)
      ...
      func.func @tiny_prefill(%x: memref<?xf32>, ...) attributes {llvm.emit_c_interface}
    }
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::vector::VectorDialect"];
  let statistics = [
    Statistic<"numForwards", "forwards", "Number of model forwards emitted">
  ];
}

//===----------------------------------------------------------------------===//
// Transforms
//===----------------------------------------------------------------------===//

def KVDeriveCotSlicesPass : Pass<"kv-derive-cot-slices", "ModuleOp"> {
  let summary = "Plans every kv.edit and kv.compose into primitive ops";
  let description = [{
    Rewrites each `kv.edit` according to its strategy, from the dependency
    graph of the context its cache type names:

    * `exact`: keep the segments before the edited one, prefill the new tokens
      and every later segment again;
    * `cot_slice`: keep the segments before, prefill the new tokens and every
      later segment that reaches the edited one (its dependency slice), and
      reuse every other later segment relocated by
      Δ = len(new tokens) - len(old segment);
    * `cot_slice` with `first_k = N`: also prefill again the first N tokens of
      every reused segment; with `fraction = f`: also recompute, per reused
      segment, the fraction f of tokens whose K/V deviate most at layer 1
      (`kv.selective_recompute`).

    Each `kv.compose` becomes a `kv.rope_shift` of the block by
    Δ = position - start_position(block) and a `kv.concat` (with its repair
    budget, like an edit's). Each `kv.logits` becomes a prefill of the
    segment's tokens over the view before it, or, when an edit plan already
    recomputed that segment, the logits of that prefill.

    Before:
    ```mlir
    %e = kv.edit %m, %c[@city] = %new strategy <cot_slice>
        : !model, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>
    ```
    After (for @system, @city, @tools, @think deps(@city)):
    ```mlir
    %b, %e = kv.segment_bounds %c[@city] : ...
    %prefix = kv.slice %c[%c0, %b] : ...
    %v1, %l1 = kv.prefill %m, %prefix, %new segment @city last : ...
    %tb, %te = kv.segment_bounds %c[@tools] : ...
    %tools = kv.slice %c[%tb, %te] : ...
    %shifted = kv.rope_shift %tools by %delta : ...
    %v2 = kv.concat %v1, %shifted : ...
    ...
    %v3, %l3 = kv.prefill %m, %v2, %think_tokens segment @think last : ...
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
  let options = [
    Option<"emitPlan", "emit-plan", "bool", /*default=*/"false",
           "Emit each plan and its cost (tokens recomputed, model FLOPs, next "
           "to the exact strategy and a full prefill) as remarks">,
    Option<"emitStatistics", "emit-statistics", "bool", /*default=*/"false",
           "Emit the pass statistics as a remark on the module (Debian's "
           "LLVM is built without the statistics -mlir-pass-statistics "
           "prints)">
  ];
  let statistics = [
    Statistic<"numEdits", "edits", "Number of kv.edit ops planned">,
    Statistic<"numComposes", "composes", "Number of kv.compose ops planned">,
    Statistic<"numSegmentsRecomputed", "segments-recomputed",
              "Number of segments prefilled again by edit plans">,
    Statistic<"numSegmentsReused", "segments-reused",
              "Number of later segments reused (relocated) by edit plans">,
    Statistic<"numLogitsReused", "logits-reused",
              "Number of kv.logits answered by a prefill the plan already does">
  ];
}

def KVFuseRopeShiftPass : Pass<"kv-fuse-rope-shift", "ModuleOp"> {
  let summary = "Turns RoPE shifts into per-run offsets of attention and prefill";
  let description = [{
    Every `kv.rope_shift` (and every `kv.concat`) that reaches a `kv.prefill`
    or `kv.attention` is folded into that consumer's view list: the consumer
    reads the unshifted views, each with a position offset, and rotates its
    query once per run (R(m)q · R(Δ)K = R(m - Δ)q · K). Chains of shifts add
    up; no key is rewritten. A `kv.materialize` feeding such a consumer is
    bypassed (the result is the same up to rounding, without the rewrite);
    one whose result escapes elsewhere (returned, exported) stays.

    Before:
    ```mlir
    %s = kv.rope_shift %tools by %d : !cache
    %v = kv.concat %prefix, %s : !cache, !cache -> !cache
    %r, %l = kv.prefill %m, %v, %t : ...
    ```
    After:
    ```mlir
    %r, %l = kv.prefill %m, [%prefix + %c0, %tools + %d], %t : ...
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
  let options = [
    Option<"emitStatistics", "emit-statistics", "bool", /*default=*/"false",
           "Emit the pass statistics as a remark on the module (Debian's "
           "LLVM is built without the statistics -mlir-pass-statistics "
           "prints)">
  ];
  let statistics = [
    Statistic<"numShiftsFused", "shifts-fused",
              "Number of rope_shift ops folded into a consumer's view offsets">,
    Statistic<"numConcatsFlattened", "concats-flattened",
              "Number of concat ops flattened into a consumer's view list">,
    Statistic<"numMaterializeBypassed", "materialize-bypassed",
              "Number of materialize ops an attention or prefill no longer "
              "reads through">,
    Statistic<"numMaterializeKept", "materialize-kept",
              "Number of materialize ops kept because a consumer needs "
              "physical keys">
  ];
}

#endif // KVIR_PASSES_PASSES_TD
