//===- KVOps.td - Operations of the kv dialect ------------*- tablegen -*-===//

#ifndef KVIR_DIALECTS_KV_KVOPS_TD
#define KVIR_DIALECTS_KV_KVOPS_TD

include "dialects/KV/KVTypes.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

class KV_Op<string mnemonic, list<Trait> traits = []>
    : Op<KV_Dialect, mnemonic, traits>;

// ODS checks that the operand groups of an op with AttrSizedOperandSegments
// add up to its operands, but not that a non-variadic group holds exactly one
// value: a generic-form op with `operandSegmentSizes = array<i32: 0, 1, ...>`
// would make `getModel()` return an operand of another group, or read past the
// end. This trait checks the listed groups; being structural, it runs before
// the ODS-generated checks and verifiers, which call those accessors.
class KV_SingleValuedOperandGroups<string groups>
    : ParamNativeOpTrait<"SingleValuedOperandGroups", groups>, StructuralOpTrait {
  let cppNamespace = "::mlir::kv::OpTrait";
}

def KV_TokensType : 1DTensorOf<[I32]>;
def KV_LogitsType : 2DTensorOf<[F32]>;
def KV_QueryType : 3DTensorOf<[F32]>;
def KV_SegmentRefList : TypedArrayAttrBase<FlatSymbolRefAttr,
                                           "list of segment references"> {
  let constBuilderCall = "$_builder.getArrayAttr($0)";
}

//===----------------------------------------------------------------------===//
// Context declaration
//===----------------------------------------------------------------------===//

def KV_ContextOp : KV_Op<"context", [
    Symbol, SymbolTable, IsolatedFromAbove, NoTerminator, SingleBlock,
    NoRegionArguments]> {
  let summary = "Declares the layout of a context: its segments and dependencies";
  let description = [{
    A context is an ordered list of named segments (`kv.segment`). Each segment
    may depend on earlier segments; the dependencies form a DAG whose slices
    tell an edit what to recompute. A dependency may only point backwards, so a
    reference to a later segment (and therefore any cycle) is an error.

    ```mlir
    kv.context @agent {
      kv.segment @system kind(system) tokens(1200)
      kv.segment @city kind(fact) tokens(?)
      kv.segment @tools kind(tool) tokens(800)
      kv.segment @think kind(thought) tokens(40) deps(@city)
      kv.segment @answer kind(answer) tokens(8) deps(@think, @tools)
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
  let hasRegionVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [OpBuilder<(ins "::llvm::StringRef":$name)>];
  let extraClassDeclaration = [{
    /// The segments in declaration order.
    auto getSegments() { return getBody().front().getOps<SegmentOp>(); }
    /// The segment named `name`, or null.
    SegmentOp lookupSegment(::llvm::StringRef name);
  }];
}

def KV_SegmentOp : KV_Op<"segment", [Symbol, HasParent<"ContextOp">]> {
  let summary = "A named run of tokens of a context";
  let description = [{
    A segment has a kind (its role), a token count (`?` when only known at run
    time; a dynamic segment may be empty at run time, a static one may not) and
    the earlier segments it depends on.

    ```mlir
    kv.segment @think1 kind(thought) tokens(40) deps(@city)
    kv.segment @city kind(fact) tokens(?)
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, KV_SegmentKind:$kind,
                       OptionalAttr<I64Attr>:$tokens,
                       DefaultValuedAttr<KV_SegmentRefList, "{}">:$deps);
  let assemblyFormat = [{
    $sym_name `kind` `(` $kind `)` custom<SegmentSizeAndDeps>($tokens, $deps)
    attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    bool isDynamic() { return !getTokens().has_value(); }
  }];
}

//===----------------------------------------------------------------------===//
// Cache construction and computation
//===----------------------------------------------------------------------===//

def KV_EmptyOp : KV_Op<"empty", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "An empty cache";
  let description = [{
    A cache with no runs. Its type fixes the K/V shape and, optionally, the
    context whose segments it will hold.

    ```mlir
    %c = kv.empty : !kv.cache<5x4x8xf32, @agent>
    ```
  }];
  let results = (outs KV_CacheType:$result);
  let assemblyFormat = "attr-dict `:` qualified(type($result))";
}

def KV_PrefillOp : KV_Op<"prefill", [Pure, AttrSizedOperandSegments,
    KV_SingleValuedOperandGroups<"0, 3">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Computes the K/V and logits of new tokens over a view";
  let description = [{
    Runs the model on `tokens` placed at positions `position, position + 1, ...`
    (by default, the position right after the last token of the view). Every
    new token attends causally to the view and to the new tokens before it; a
    key attends a query at position m when its effective position (stored
    position plus the run's offset Δ) is at most m. The result is the view with
    one more run holding the new K/V (labelled `segment` when given), and the
    logits of every new token (`last`: of the last one only).

    The view may be given as a list of caches, each with a position offset added
    to its runs (the fused form `kv-fuse-rope-shift` produces): either every
    entry has an offset or none has.

    ```mlir
    %c1, %logits = kv.prefill %m, %c0, %tokens segment @system
        : !kv.model<...>, (!kv.cache<5x4x8xf32, @agent>), tensor<?xi32>
        -> !kv.cache<5x4x8xf32, @agent>, tensor<?x512xf32>
    %c3, %l3 = kv.prefill %m, [%prefix + %zero, %tools + %delta], %t at %pos last
        : ...
    ```
  }];
  let arguments = (ins KV_ModelType:$model, Variadic<KV_CacheType>:$views,
                       Variadic<Index>:$offsets, KV_TokensType:$tokens,
                       Optional<Index>:$position,
                       OptionalAttr<FlatSymbolRefAttr>:$segment,
                       UnitAttr:$last);
  let results = (outs KV_CacheType:$result, KV_LogitsType:$logits);
  let assemblyFormat = [{
    $model `,` custom<ViewList>($views, $offsets) `,` $tokens
    (`at` $position^)? (`segment` $segment^)? (`last` $last^)? attr-dict
    `:` qualified(type($model)) `,` `(` qualified(type($views)) `)` `,` qualified(type($tokens))
    `->` qualified(type($result)) `,` qualified(type($logits))
  }];
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

def KV_PrefillChainOp : KV_Op<"prefill_chain", [Pure, AttrSizedOperandSegments,
    KV_SingleValuedOperandGroups<"0">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Prefills several token lists one after the other in one "
                "forward call";
  let description = [{
    The same as a chain of `kv.prefill` ops, each over the result of the one
    before, where only the last one's logits are read: the token lists are
    placed one after the other at the end of the view (no `at` position) and
    computed by one call of the forward, so the weights and the view's K/V
    are streamed once for all of them. Each list becomes one run of the
    result, labelled by its entry of `segments` when given (one per list),
    so `kv.segment_bounds` finds each segment as after the chain. The logits
    are those of the last list's tokens (`last`: of its last token only);
    the classifier runs for no other row. `kv-fuse-prefills` builds it.

    The view list has the form of `kv.prefill`'s.

    ```mlir
    %c, %logits = kv.prefill_chain %m, %view, [%think1, %think2, %answer]
        segments [@think1, @think2, @answer]
        : !kv.model<...>, (!kv.cache<5x4x8xf32, @agent>),
          (tensor<32xi32>, tensor<32xi32>, tensor<8xi32>)
        -> !kv.cache<5x4x8xf32, @agent>, tensor<8x512xf32>
    ```
  }];
  let arguments = (ins KV_ModelType:$model, Variadic<KV_CacheType>:$views,
                       Variadic<Index>:$offsets,
                       Variadic<KV_TokensType>:$tokens,
                       OptionalAttr<KV_SegmentRefList>:$segments,
                       UnitAttr:$last);
  let results = (outs KV_CacheType:$result, KV_LogitsType:$logits);
  let assemblyFormat = [{
    $model `,` custom<ViewList>($views, $offsets) `,` `[` $tokens `]`
    (`segments` $segments^)? (`last` $last^)? attr-dict
    `:` qualified(type($model)) `,` `(` qualified(type($views)) `)` `,`
    `(` qualified(type($tokens)) `)`
    `->` qualified(type($result)) `,` qualified(type($logits))
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The label of token list `i`, or null.
    ::mlir::FlatSymbolRefAttr getSegmentOf(unsigned i) {
      if (auto segments = getSegmentsAttr())
        return ::llvm::cast<::mlir::FlatSymbolRefAttr>(segments[i]);
      return {};
    }
  }];
}

def KV_EditOp : KV_Op<"edit", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    AllTypesMatch<["cache", "result"]>]> {
  let summary = "Replaces the tokens of one segment and recomputes what depends on it";
  let description = [{
    The result holds the context of `cache` with the tokens of `segment`
    replaced by `tokens` (whose length may differ). What is recomputed and what
    is reused, relocated by RoPE, is decided by `strategy`: see
    `#kv.strategy`. The cache type must name the context whose dependency graph
    the plan follows. `kv-derive-cot-slices` rewrites this op into primitives.

    The `erratum` strategy changes nothing in place: it needs `correction`,
    the token ids of a correction segment (e.g. "the city is now Paris"),
    which is prefilled after the kept segments and before the answer, which is
    recomputed after it. Its result is an approximation of the edited context
    whose reference (for fidelity) is still the edited context built from
    `tokens`. `correction` is required with `erratum` and allowed with no
    other strategy.

    Pages are immutable: if the edit fails at run time, `cache` is intact.

    ```mlir
    %c2 = kv.edit %m, %c[@city] = %new strategy <cot_slice, first_k = 32>
        : !kv.model<...>, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>
    %c3 = kv.edit %m, %c[@city] = %new strategy <erratum> correction(%fix)
        : !kv.model<...>, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>,
          tensor<?xi32>
    ```
  }];
  let arguments = (ins KV_ModelType:$model, KV_CacheType:$cache,
                       FlatSymbolRefAttr:$segment, KV_TokensType:$tokens,
                       Optional<KV_TokensType>:$correction,
                       KV_StrategyAttr:$strategy);
  let results = (outs KV_CacheType:$result);
  let assemblyFormat = [{
    $model `,` $cache `[` $segment `]` `=` $tokens `strategy` $strategy
    (`correction` `(` $correction^ `)`)? attr-dict
    `:` qualified(type($model)) `,` qualified(type($cache)) `,` qualified(type($tokens))
    (`,` qualified(type($correction))^)?
  }];
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

def KV_LogitsOp : KV_Op<"logits", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The logits of the tokens of one segment of a cache";
  let description = [{
    A cache holds K/V, not hidden states, so the logits of a segment are those
    of a prefill of its token ids over the part of the view that precedes it.
    Plans that recompute the segment anyway reuse that prefill's logits.

    ```mlir
    %l = kv.logits %m, %c2[@answer]
        : !kv.model<...>, !kv.cache<5x4x8xf32, @agent> -> tensor<?x512xf32>
    ```
  }];
  let arguments = (ins KV_ModelType:$model, KV_CacheType:$cache,
                       FlatSymbolRefAttr:$segment);
  let results = (outs KV_LogitsType:$logits);
  let assemblyFormat = [{
    $model `,` $cache `[` $segment `]` attr-dict `:` qualified(type($model)) `,`
    qualified(type($cache)) `->` qualified(type($logits))
  }];
  let hasVerifier = 1;
}

def KV_ComposeOp : KV_Op<"compose", [Pure, AttrSizedOperandSegments,
    KV_SingleValuedOperandGroups<"0, 1">,
    AllTypesMatch<["cache", "result"]>]> {
  let summary = "Appends an independently prefilled block at a new position";
  let description = [{
    Appends the runs of `block` to `cache`, relocated by Δ = position -
    (effective position of the block's first token). `position` defaults to
    the position right after the last token of `cache`. Nothing is prefilled
    again; the relocation is a RoPE shift the attention applies to its query.

    With a repair budget (which needs the model), the chosen tokens of the block
    are recomputed over the new prefix.

    ```mlir
    %all = kv.compose %main, %skill : !kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32>
    %r = kv.compose %main, %doc at %pos repair <first_k = 16> using %m
        : !kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32>, !kv.model<...>
    ```
  }];
  let arguments = (ins KV_CacheType:$cache, KV_CacheType:$block,
                       Optional<Index>:$position,
                       Optional<KV_ModelType>:$model,
                       OptionalAttr<KV_RepairAttr>:$repair);
  let results = (outs KV_CacheType:$result);
  let assemblyFormat = [{
    $cache `,` $block (`at` $position^)? (`repair` $repair^)?
    (`using` $model^)? attr-dict `:` qualified(type($cache)) `,` qualified(type($block))
    (`,` qualified(type($model))^)?
  }];
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

//===----------------------------------------------------------------------===//
// Blocks shared through a block store
//===----------------------------------------------------------------------===//

// What kv.load_block and kv.store_block read and write besides their
// operands: the block store of the run (runtime/store/KVBlockStore.h). The
// effects keep them from being merged by CSE or erased when unused.
def KV_BlockStoreResource : Resource<"::mlir::kv::BlockStoreResource">;

def KV_LoadBlockOp : KV_Op<"load_block", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead<KV_BlockStoreResource>,
                   MemWrite<KV_BlockStoreResource>]>]> {
  let summary = "A prefilled block named by its tokens: fetched from the "
                "block store, or prefilled and stored";
  let description = [{
    The block of `tokens` under `model`: their K/V prefilled at positions
    `position, position + 1, ...` (default 0) over nothing, as one run
    (labelled `segment` when given). The result is the cache `kv.prefill`
    of the same tokens over `kv.empty` would return, and a `kv.compose`
    consumes it like any other block.

    A block is a value with a name: its key is a content hash of the model's
    fingerprint (configuration and weights), the K/V element type, the
    layout version of the K/V, the base position and the token ids. Where
    the run has a block store (`kv-run --kv-store redis://...`), the block
    is looked up by that key at run time: a hit is fetched and mapped into
    fresh pages, no prefill; a miss is a prefill followed by a store, so the
    next process that asks for the block fetches it. A fault of the store
    (unreachable, a timeout, a key evicted between lookup and fetch, a blob
    that fails its checks: corrupt, truncated, of another model) is, by the
    run's policy, a local prefill or an error; caches already built are
    never touched. Without a store the block is prefilled.

    No logits: a block is K/V only (`kv.logits` or a prefill after it gives
    logits).

    ```mlir
    %skill = kv.load_block %m, %tokens segment @tools
        : !kv.model<...>, tensor<?xi32> -> !kv.cache<5x4x8xf32, @agent>
    %doc = kv.load_block %m, %doc_tokens at %base
        : !kv.model<...>, tensor<?xi32> -> !kv.cache<5x4x8xf32>
    %all = kv.compose %main, %skill : !kv.cache<5x4x8xf32, @agent>, ...
    ```
  }];
  let arguments = (ins KV_ModelType:$model, KV_TokensType:$tokens,
                       Optional<Index>:$position,
                       OptionalAttr<FlatSymbolRefAttr>:$segment);
  let results = (outs KV_CacheType:$result);
  let assemblyFormat = [{
    $model `,` $tokens (`at` $position^)? (`segment` $segment^)? attr-dict
    `:` qualified(type($model)) `,` qualified(type($tokens)) `->`
    qualified(type($result))
  }];
  let hasVerifier = 1;
}

def KV_StoreBlockOp : KV_Op<"store_block", [
    MemoryEffects<[MemWrite<KV_BlockStoreResource>]>]> {
  let summary = "Stores a block under the key of its tokens";
  let description = [{
    Writes `cache` to the run's block store under the key `kv.load_block`
    of the same model, tokens and base position (the position of its first
    token) looks up, so that other processes fetch it instead of prefilling
    it. The cache must be a block: its K/V computed over nothing before it,
    at consecutive positions (a `kv.prefill` over `kv.empty`, a prefill at
    the end of such a cache, a `kv.load_block`, or a prefix slice of one of
    these). A composed, shifted, edited or repaired cache is not one (its
    K/V depend on more than its tokens), and storing it is a run-time error.
    A store fault follows the run's policy (skipped or an error); without a
    store nothing is written.

    ```mlir
    %e = kv.empty : !kv.cache<5x4x8xf32>
    %b, %l = kv.prefill %m, %e, %manual at %c0
        : !kv.model<...>, (!kv.cache<5x4x8xf32>), tensor<?xi32>
        -> !kv.cache<5x4x8xf32>, tensor<?x512xf32>
    kv.store_block %m, %b : !kv.model<...>, !kv.cache<5x4x8xf32>
    ```
  }];
  let arguments = (ins KV_ModelType:$model, KV_CacheType:$cache);
  let assemblyFormat = [{
    $model `,` $cache attr-dict `:` qualified(type($model)) `,`
    qualified(type($cache))
  }];
  let hasVerifier = 1;
}

def KV_RopeShiftOp : KV_Op<"rope_shift", [Pure, AllTypesMatch<["cache", "result"]>]> {
  let summary = "Relocates every run of a view by a position offset";
  let description = [{
    Adds `delta` (a signed number of positions) to the offset of every run: a
    key stored at p behaves as if it were at p + Δ + delta. Since RoPE rotations
    compose, this is exact. It rewrites no key: `kv-fuse-rope-shift` folds it
    into the consumers, which rotate their query instead. `kv.materialize`
    is the op that rewrites keys.

    ```mlir
    %s = kv.rope_shift %tools by %delta : !kv.cache<5x4x8xf32>
    ```
  }];
  let arguments = (ins KV_CacheType:$cache, Index:$delta);
  let results = (outs KV_CacheType:$result);
  let assemblyFormat = "$cache `by` $delta attr-dict `:` qualified(type($cache))";
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def KV_MaterializeOp : KV_Op<"materialize", [Pure,
    AllTypesMatch<["cache", "result"]>]> {
  let summary = "Rewrites shifted keys into new pages";
  let description = [{
    Returns a view with the same tokens whose runs all have offset 0: keys of
    runs with Δ != 0 are rotated by R(Δ) into new pages (values are copied).
    Used only where a consumer needs physical keys (export); attention never
    needs it.

    ```mlir
    %p = kv.materialize %m, %c : !kv.model<...>, !kv.cache<5x4x8xf32>
    ```
  }];
  let arguments = (ins KV_ModelType:$model, KV_CacheType:$cache);
  let results = (outs KV_CacheType:$result);
  let assemblyFormat = "$model `,` $cache attr-dict `:` qualified(type($model)) `,` qualified(type($cache))";
  let hasVerifier = 1;
}

def KV_AttentionOp : KV_Op<"attention", [Pure, AttrSizedOperandSegments,
    KV_SingleValuedOperandGroups<"0, 1, 4">]> {
  let summary = "Attention of queries at consecutive positions over a view";
  let description = [{
    `query` holds un-rotated queries `[n][heads][head_size]` of layer `layer`
    at positions `position ... position + n - 1`. For every run with offset Δ,
    the query is rotated to m - Δ and scored against the stored keys:
    (R(m)q)·(R(Δ)K) = (R(m - Δ)q)·K; runs are merged with online softmax.
    Causal: a key takes part when its effective position is at most m.
    Grouped-query heads share KV heads as the model type says.

    ```mlir
    %o = kv.attention %m, %q over [%a + %c0, %b + %d] layer 2 at %pos
        : !kv.model<...>, (!kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32>),
          tensor<?x8x8xf32> -> tensor<?x8x8xf32>
    ```
  }];
  let arguments = (ins KV_ModelType:$model, KV_QueryType:$query,
                       Variadic<KV_CacheType>:$views, Variadic<Index>:$offsets,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$layer,
                       Index:$position);
  let results = (outs KV_QueryType:$result);
  let assemblyFormat = [{
    $model `,` $query `over` custom<ViewList>($views, $offsets) `layer` $layer
    `at` $position attr-dict `:` qualified(type($model)) `,` `(` qualified(type($views)) `)` `,`
    qualified(type($query)) `->` qualified(type($result))
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Views
//===----------------------------------------------------------------------===//

def KV_ConcatOp : KV_Op<"concat", [Pure]> {
  let summary = "Concatenates the runs of several views";
  let description = [{
    The runs of every input, in order, with their offsets unchanged.

    ```mlir
    %c = kv.concat %prefix, %fact, %rest
        : !kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32>
        -> !kv.cache<5x4x8xf32>
    ```
  }];
  let arguments = (ins Variadic<KV_CacheType>:$inputs);
  let results = (outs KV_CacheType:$result);
  let assemblyFormat = "$inputs attr-dict `:` qualified(type($inputs)) `->` qualified(type($result))";
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
  let hasFolder = 1;
}

def KV_SliceOp : KV_Op<"slice", [Pure, AllTypesMatch<["cache", "result"]>]> {
  let summary = "The tokens [begin, end) of a view";
  let description = [{
    A view of the tokens with index `begin` (inclusive) to `end` (exclusive),
    counted over the whole view; runs keep their pages and offsets. Out of
    range bounds are a run-time error.

    ```mlir
    %s = kv.slice %c[%begin, %end] : !kv.cache<5x4x8xf32>
    ```
  }];
  let arguments = (ins KV_CacheType:$cache, Index:$begin, Index:$end);
  let results = (outs KV_CacheType:$result);
  let assemblyFormat = "$cache `[` $begin `,` $end `]` attr-dict `:` qualified(type($cache))";
}

def KV_SegmentBoundsOp : KV_Op<"segment_bounds", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Where a segment starts and ends in a view";
  let description = [{
    The token indices [begin, end) of the runs labelled `segment`. A segment
    the view does not hold is a run-time error.

    ```mlir
    %b, %e = kv.segment_bounds %c[@city] : !kv.cache<5x4x8xf32, @agent>
    ```
  }];
  let arguments = (ins KV_CacheType:$cache, FlatSymbolRefAttr:$segment);
  let results = (outs Index:$begin, Index:$end);
  let assemblyFormat = "$cache `[` $segment `]` attr-dict `:` qualified(type($cache))";
}

def KV_TokensOp : KV_Op<"tokens", [Pure]> {
  let summary = "The token ids a view was computed from";
  let description = [{
    ```mlir
    %t = kv.tokens %c : !kv.cache<5x4x8xf32> -> tensor<?xi32>
    ```
  }];
  let arguments = (ins KV_CacheType:$cache);
  let results = (outs KV_TokensType:$tokens);
  let assemblyFormat = "$cache attr-dict `:` qualified(type($cache)) `->` qualified(type($tokens))";
}

def KV_LengthOp : KV_Op<"length", [Pure]> {
  let summary = "The number of tokens of a view";
  let description = [{
    ```mlir
    %n = kv.length %c : !kv.cache<5x4x8xf32>
    ```
  }];
  let arguments = (ins KV_CacheType:$cache);
  let results = (outs Index:$length);
  let assemblyFormat = "$cache attr-dict `:` qualified(type($cache))";
}

def KV_StartPositionOp : KV_Op<"start_position", [Pure]> {
  let summary = "The effective position of the first token of a view";
  let description = [{
    The stored position plus the offset Δ of the first token of the view; 0 for
    an empty view. Compose relocates a block by `position - start_position`.

    ```mlir
    %p = kv.start_position %block : !kv.cache<5x4x8xf32>
    ```
  }];
  let arguments = (ins KV_CacheType:$cache);
  let results = (outs Index:$position);
  let assemblyFormat = "$cache attr-dict `:` qualified(type($cache))";
}

def KV_EndPositionOp : KV_Op<"end_position", [Pure]> {
  let summary = "The position right after the last token of a view";
  let description = [{
    One past the effective position of the last token of the view; 0 for an
    empty view. It is where `kv.prefill` places new tokens by default.

    ```mlir
    %p = kv.end_position %c : !kv.cache<5x4x8xf32>
    ```
  }];
  let arguments = (ins KV_CacheType:$cache);
  let results = (outs Index:$position);
  let assemblyFormat = "$cache attr-dict `:` qualified(type($cache))";
}

def KV_SelectiveRecomputeOp : KV_Op<"selective_recompute", [Pure,
    AllTypesMatch<["cache", "result"]>]> {
  let summary = "Recomputes the reused tokens whose K/V deviate most";
  let description = [{
    The run-time step of a `fraction` or `deviation` repair budget: of the
    tokens [begin, end) of the view, compute the values at layer 1 (the first
    layer whose K/V depend on the context) of every token afresh over the view
    before them, compare them with the stored values, and recompute the K/V of
    the chosen tokens; the other tokens keep their K/V. Exactly one of:

    * `fraction f` (0 <= f <= 1): the ceil(f * (end - begin)) tokens whose
      values deviate most (L2 norm of fresh minus stored, over all KV heads;
      CacheBlend's selection);
    * `deviation t` (t > 0): every token whose relative deviation
      ||v_fresh - v_stored|| / ||v_fresh|| (same norms) exceeds t, however
      many.

    The selection is a run-time step; the recomputation attends to the whole
    view before each token. Tokens outside [begin, end) are unchanged.

    ```mlir
    %r = kv.selective_recompute %m, %c[%begin, %end] fraction 0.15
        : !kv.model<...>, !kv.cache<5x4x8xf32>
    %s = kv.selective_recompute %m, %c[%begin, %end] deviation 0.05
        : !kv.model<...>, !kv.cache<5x4x8xf32>
    ```
  }];
  let arguments = (ins KV_ModelType:$model, KV_CacheType:$cache, Index:$begin,
                       Index:$end,
                       OptionalAttr<F64Attr>:$fraction,
                       OptionalAttr<F64Attr>:$deviation);
  let results = (outs KV_CacheType:$result);
  let assemblyFormat = [{
    $model `,` $cache `[` $begin `,` $end `]` (`fraction` $fraction^)?
    (`deviation` $deviation^)? attr-dict
    `:` qualified(type($model)) `,` qualified(type($cache))
  }];
  let hasVerifier = 1;
}

#endif // KVIR_DIALECTS_KV_KVOPS_TD
