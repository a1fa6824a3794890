//===- Passes.td - The kv passes --------------------------*- tablegen -*-===//

#ifndef KVIR_PASSES_PASSES_TD
#define KVIR_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Conversion
//===----------------------------------------------------------------------===//

def ConvertKVToCPUPass : Pass<"convert-kv-to-cpu", "ModuleOp"> {
  let summary = "Puts the CPU forward of every model the program uses into its module";
  let description = [{
    For every model config (and K/V element type) the module's kv ops use,
    i.e. the `!kv.model` of each `kv.prefill`, `kv.attention`,
    `kv.materialize` and `kv.selective_recompute`, and for every model in
    the module attribute `kv.export_forwards` (an array of `!kv.model`
    types, removed afterwards), emits the decoder forward of that config,
    specialised to its dimensions, as functions in upstream dialects (func,
    scf, arith, math, memref, vector): RMSNorm, Q/K/V projections, RoPE
    (angles from integer positions in f64), K/V written into the pages of the
    new run, attention over the runs of a view with one query rotation per
    run offset Δ and an online-softmax merge, output projection, SwiGLU FFN,
    residuals, final norm and logits; attention alone; keys rotated by their
    run's offset into new pages.

    The entry points are named after the config
    (`kv_fwd_<hash of the config key>_{prefill,attention,materialize}`,
    runtime/core/ModelConfig.h) and take one `!llvm.ptr` to an argument
    struct (runtime/core/ForwardABI.def); `convert-kv-to-runtime` passes
    them to the runtime with each op that needs math. K/V pages of f16 or
    bf16 are read and widened to f32, and rounded once where K/V are
    stored.

    The register blocking (the matmul's tile, attention's blocks of keys,
    rows and head slices) is chosen for the vector width `vector-bits`: 512
    (AVX-512), 256 (AVX2), or 0 for the host's; any choice is correct on
    any host, only its speed differs. `quant-dot` chooses how quantised
    weights are multiplied: `f32` widens their blocks to f32 exactly (the
    oracle's weights), `int8` multiplies Q8_0, Q4_0, Q4_K and Q6_K blocks
    (Q5_K's in decode steps) by integer dot products against activations
    quantised per block of 32 (Q8_0, Q4_0) or of 256 (the K-quants, as
    llama.cpp's Q8_K; AVX-512 VNNI; an
    error on a host without it), `amx` is int8 with a
    Q8_0 or Q4_K prefill's products on AMX int8 tiles (the same results; an error
    on a host without AMX or whose Linux refuses this process the tile
    state), `avx2` is int8's decode steps by AVX2's instructions
    (vpmaddubsw and vpmaddwd on 256-bit halves: any x86-64-v3) with a
    prefill widened as f32's, `auto` (the default) is amx where the host has
    AMX, else int8 where it has VNNI, else avx2. `check-host=false` drops the
    host checks, for code built for another CPU whose features the caller
    checked (kv-aot --cpu: a cross-build for an AMX machine on one without).

    Before:
    ```mlir
    %c1, %l = kv.prefill %m, %c0, %t : !kv.model<dim = 64, ...>, ...
    ```
    After (added to the module):
    ```mlir
    func.func private @kv_fwd_5c0e..._rmsnorm(...)
    ...
    func.func private @kv_fwd_5c0e..._prefill_impl(%x: memref<?xf32>, ...)
    func.func @kv_fwd_5c0e..._prefill(%args: !llvm.ptr)
    func.func @kv_fwd_5c0e..._attention(%args: !llvm.ptr)
    func.func @kv_fwd_5c0e..._materialize(%args: !llvm.ptr)
    ```
  }];
  let dependentDialects = ["::mlir::amx::AMXDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::vector::VectorDialect"];
  let options = [
    Option<"vectorBits", "vector-bits", "int64_t", /*default=*/"0",
           "Vector width the register blocking is chosen for: 512 (AVX-512), "
           "256 (AVX2) or 0 (the host's)">,
    Option<"quantDot", "quant-dot", "std::string", /*default=*/"\"auto\"",
           "How quantised weights are multiplied: f32 (widened exactly), "
           "int8 (integer dot products, activations quantised per block; "
           "Q8_0, Q4_0, Q4_K and Q6_K, Q5_K in decode steps; needs AVX-512 "
           "VNNI), amx (int8, a Q8_0 "
           "prefill on AMX tiles; needs AMX), avx2 (int8's decode steps by "
           "AVX2's instructions, a prefill widened) or auto (amx where the "
           "host has AMX, else int8 where it has VNNI, else avx2)">,
    Option<"decodePrefetch", "decode-prefetch", "std::string",
           /*default=*/"\"host\"",
           "How far ahead decode tiles prefetch F16 and BF16 rows and Q4_K, "
           "Q5_K and Q6_K blocks: near (256 bytes, one block: measured best "
           "on an AMD EPYC, Zen 4), far (512 bytes, eight blocks: on the "
           "Intel Xeons) or host (far where the host's L1 data cache has 12 "
           "ways or more or does not say, else near)">,
    Option<"checkHost", "check-host", "bool", /*default=*/"true",
           "Refuse a quant-dot whose instructions this host lacks (code "
           "that runs here); false where the caller checked the CPU the "
           "code is for (kv-aot --cpu)">
  ];
  let statistics = [
    Statistic<"numForwards", "forwards", "Number of model forwards emitted">
  ];
}

def ConvertKVToRuntimePass : Pass<"convert-kv-to-runtime", "ModuleOp"> {
  let summary = "Lowers a planned kv program to calls of the execution runtime";
  let description = [{
    Lowers the host program a kv-optimize'd module holds (kv primitives,
    index arithmetic, token tensors, calls) to calls of the C ABI of
    runtime/exec/ExecRuntime.h. `!kv.cache` and `!kv.model` become
    `!llvm.ptr` (a view, the model); 1-D i32 token tensors and 2-D f32
    logits tensors become `!llvm.ptr` handles owned by the runtime context,
    so no bufferization is needed. Each host function takes the context as a
    new first argument; each public one gets a wrapper
    `_kvrt_entry_NAME(ctx, args, results)` over arrays of 64-bit slots and
    becomes private (the wrapper is its interface, and its name cannot clash
    with a symbol of the process that loads the program). The
    location of every op that can fail is recorded in the module attribute
    `kv.exec_sites` (the `site` argument of the calls indexes it); ops whose
    location is fused with the `kv.plan` metadata count as plan work.
    `kv.context` ops are removed.

    Before:
    ```mlir
    func.func @f(%m: !model, %t: tensor<?xi32>) -> !cache {
      %c0 = kv.empty : !cache
      %c1, %l = kv.prefill %m, %c0, %t last
          : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
      return %c1 : !cache
    }
    ```
    After (roughly):
    ```mlir
    func.func @f(%ctx: !llvm.ptr, %m: !llvm.ptr, %t: !llvm.ptr) -> !llvm.ptr {
      %0 = call @kvrt_exec_empty(%ctx, %site0) : (!llvm.ptr, i32) -> !llvm.ptr
      %l = call @kvrt_exec_prefill(%ctx, %site1, %m, ...) : (...) -> !llvm.ptr
      %c1 = llvm.load %slot : !llvm.ptr -> !llvm.ptr
      return %c1 : !llvm.ptr
    }
    func.func @_kvrt_entry_f(%ctx: !llvm.ptr, %args: !llvm.ptr, %res: !llvm.ptr)
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::scf::SCFDialect"];
  let statistics = [
    Statistic<"numFunctions", "functions", "Number of host functions lowered">,
    Statistic<"numSites", "sites", "Number of ops given an error site">
  ];
}

def ConvertKVToGPUPass : Pass<"convert-kv-to-gpu", "ModuleOp"> {
  let summary = "Puts the GPU forward of every model the program uses into its module";
  let description = [{
    The GPU counterpart of `convert-kv-to-cpu`: for every model config the
    module's kv ops use (and every model in `kv.export_forwards`), emits the
    decoder forward for NVIDIA GPUs with the same math and the same entry
    points (`kv_fwd_<hash>_{prefill,attention,materialize}`, one `!llvm.ptr`
    to an argument struct whose buffers are device memory), the outer loops
    of each stage mapped to the grid: `gpu.module @kv_fwd_<hash>_kernels`
    holds the kernels (`rmsnorm`, `matmul`: a warp per output row with
    shuffles, `swiglu`, `store_kv`, `attn_tile`: one block per query, head
    and run tile with the query rotated once per run offset and an online
    softmax, `attn_merge`: the flash-decoding merge of the tiles,
    `materialize`), and the host functions launch them (`gpu.launch_func`).
    The module becomes a `gpu.container_module`. ABI: docs/gpu-backend.md.

    Before:
    ```mlir
    %c1, %l = kv.prefill %m, %c0, %t : !kv.model<dim = 64, ...>, ...
    ```
    After (added to the module):
    ```mlir
    module attributes {gpu.container_module} {
      gpu.module @kv_fwd_5c0e..._kernels { gpu.func @attn_tile(...) kernel ... }
      func.func private @kv_fwd_5c0e..._prefill_impl(...) {
        ... gpu.launch_func @kv_fwd_5c0e..._kernels::@rmsnorm ...
      }
      func.func @kv_fwd_5c0e..._prefill(%args: !llvm.ptr)
    }
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::gpu::GPUDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::vector::VectorDialect"];
  let statistics = [
    Statistic<"numForwards", "forwards", "Number of GPU model forwards emitted">
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
      (`kv.selective_recompute ... fraction f`); with `deviation = t`: every
      reused token whose relative layer-1 value deviation exceeds t
      (`kv.selective_recompute ... deviation t`);
    * `erratum`: keep the old cache up to the answer (the first `answer`
      segment after the edited one, else the last segment) unchanged, the
      edited segment with its old tokens; prefill the correction tokens after
      it, labelled `@<edited>.erratum`; prefill the answer and every later
      segment again after the correction, with their labels.

    Each `kv.compose` becomes a `kv.rope_shift` of the block by
    Δ = position - start_position(block) and a `kv.concat` (with its repair
    budget, like an edit's). Each `kv.logits` becomes a prefill of the
    segment's tokens over the view before it, or, when an edit plan already
    recomputed that segment, the logits of that prefill. A `kv.load_block`
    is left as it is: whether its block is prefilled is decided at run time
    (a hit in the block store fetches it, a miss prefills and stores it);
    `emit-plan` prints both costs.

    `emit-plan` prints each plan and its cost (tokens and model FLOPs, next
    to the exact strategy and a full prefill) as remarks. Where a size is
    dynamic, the cost is a formula of the dynamic sizes (`len(@city')` is
    the new tokens' length), followed by its value at the arguments'
    `kv.sample_length` where every one has one:
    ```
    remark: cost: plan (72 + len(@city')) tokens (70427648 + ...) FLOPs; ...
    remark: cost at the arguments' kv.sample_length (len(@city) = 12,
            len(@city') = 16): plan 88 tokens 84405248 FLOPs; ...
    ```

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
           "to the exact strategy and a full prefill) as remarks: formulas "
           "of the dynamic sizes, and their value at the arguments' "
           "kv.sample_length">,
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
              "Number of kv.logits answered by a prefill the plan already does">,
    Statistic<"numBlockLoads", "block-loads",
              "Number of kv.load_block ops seen (planned at run time)">,
    Statistic<"numCorrections", "corrections",
              "Number of erratum corrections appended by edit plans">
  ];
}

def KVFusePrefillsPass : Pass<"kv-fuse-prefills", "ModuleOp"> {
  let summary = "Fuses chained prefills into one forward call";
  let description = [{
    A `kv.prefill` whose view is exactly the result of another `kv.prefill`
    (or `kv.prefill_chain`) becomes, with it, one `kv.prefill_chain`: one
    call of the forward for both token lists, which streams the layer
    weights and the view's K/V once instead of once per list. Fused only
    when nothing else reads the producer's result or its logits, neither
    has an `at` position, the consumer's view has no offset (or offset 0),
    both run the same model in the same block, both or neither label their
    tokens, and both are plan work or neither is. Repeated along a chain
    (think1, think2, answer: one op). The result, its runs and labels are
    those of the chain; logits may differ in the last bits (the keys are
    visited in other blocks).

    Before:
    ```mlir
    %r1, %l1 = kv.prefill %m, %v, %think1 segment @think1 last : ...
    %r2, %l2 = kv.prefill %m, %r1, %think2 segment @think2 last : ...
    %r3, %l3 = kv.prefill %m, %r2, %answer segment @answer : ...
    ```
    After:
    ```mlir
    %r3, %l3 = kv.prefill_chain %m, %v, [%think1, %think2, %answer]
        segments [@think1, @think2, @answer] : ...
    ```
  }];
  let options = [
    Option<"emitStatistics", "emit-statistics", "bool", /*default=*/"false",
           "Emit the pass statistics as a remark on the module (Debian's "
           "LLVM is built without the statistics -mlir-pass-statistics "
           "prints)">
  ];
  let statistics = [
    Statistic<"numFused", "prefills-fused",
              "Number of prefills fused into the chain of their producer">
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

def KVRetargetModelPass : Pass<"kv-retarget-model", "ModuleOp"> {
  let summary = "Retypes a program written for one model to another model's shape";
  let description = [{
    A kv program names its model's shape in its types: the `!kv.model`
    (dimensions, architecture, RoPE, vocabulary), the layers x KV heads x
    head size of every `!kv.cache`, and the vocabulary as the columns of its
    logits. This pass rewrites all of them from the one model type the
    program uses to `model`, so that a program written for one model (the
    examples are written for stories260K) runs on a model file of another
    shape: every `!kv.model` becomes `model`, every `!kv.cache` takes its
    layers x KV heads x head size (element type and context kept), and the
    logits of `kv.prefill` and `kv.logits` take its vocabulary, followed
    through `func.return` into function results and `func.call` results
    (and through calls into callee arguments).

    A program already of `model` is left untouched. The pass refuses, with
    a diagnostic at the op or type and without changing anything, what it
    cannot retype soundly: a program of two model types, a cache that does
    not hold K/V of the program's model, logits used by any other op (its
    result type would have to be derived), a `kv.attention` whose query
    shape (heads x head size) or layer the target does not have, and a
    constant token id outside the target vocabulary. Token arguments are
    the caller's: their ids and lengths are checked when they are bound.

    `kv-run --retarget-model` runs it with the type of the `--model` file.

    Before (`model="!kv.model<dim = 64, hidden = 128, layers = 2, heads = 4,
    kv_heads = 2, vocab = 1462, rope = half, theta = 1000000.0, eps = 1.0e-06,
    qkv_bias = true>"`):
    ```mlir
    !model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8,
                       kv_heads = 4, vocab = 512>
    func.func @main(%m: !model, %t: tensor<?xi32>) -> tensor<1x512xf32> {
      %c0 = kv.empty : !kv.cache<5x4x8xf32>
      %c1, %l = kv.prefill %m, %c0, %t last : ... -> ..., tensor<1x512xf32>
      return %l : tensor<1x512xf32>
    }
    ```
    After:
    ```mlir
    func.func @main(%m: !kv.model<dim = 64, ..., qkv_bias = true>,
                    %t: tensor<?xi32>) -> tensor<1x1462xf32> {
      %c0 = kv.empty : !kv.cache<2x2x16xf32>
      %c1, %l = kv.prefill %m, %c0, %t last : ... -> ..., tensor<1x1462xf32>
      return %l : tensor<1x1462xf32>
    }
    ```
  }];
  let options = [
    Option<"model", "model", "std::string", /*default=*/"",
           "The !kv.model to retarget the program to, as its type text "
           "(kv-run --retarget-model takes it from the --model file)">,
    Option<"emitStatistics", "emit-statistics", "bool", /*default=*/"false",
           "Emit the pass statistics as a remark on the module (Debian's "
           "LLVM is built without the statistics -mlir-pass-statistics "
           "prints)">
  ];
  let statistics = [
    Statistic<"numModels", "models", "Number of !kv.model values retyped">,
    Statistic<"numCaches", "caches", "Number of !kv.cache values retyped">,
    Statistic<"numLogits", "logits",
              "Number of logits values given the target vocabulary">
  ];
}

#endif // KVIR_PASSES_PASSES_TD
