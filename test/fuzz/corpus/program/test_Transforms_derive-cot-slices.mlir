// RUN: kv-opt %s --kv-derive-cot-slices -cse -split-input-file | FileCheck %s

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32, @ctx>
kv.context @ctx {
  kv.segment @a kind(system) tokens(4)
  kv.segment @f kind(fact) tokens(?)
  kv.segment @t kind(thought) tokens(3) deps(@f)
  kv.segment @b kind(tool) tokens(5)
  kv.segment @ans kind(answer) tokens(2) deps(@t, @b)
}

// cot_slice: the prefix before @f is kept, @f and its slice (@t, @ans) are
// prefilled again, @b is reused, shifted by len(new) - len(old).
// CHECK-LABEL: func.func @cot_slice
// CHECK-SAME: (%[[M:.+]]: !model, %[[C:.+]]: !kv.cache<1x1x4xf32, @ctx>, %[[NEW:.+]]: tensor<?xi32>)
// CHECK:       %[[FB:.+]], %[[FE:.+]] = kv.segment_bounds %[[C]][@f]
// CHECK:       %[[ZERO:.+]] = arith.constant 0 : index
// CHECK:       %[[PREFIX:.+]] = kv.slice %[[C]][%[[ZERO]], %[[FB]]]
// CHECK:       %[[V1:.+]], %{{.+}} = kv.prefill %[[M]], %[[PREFIX]], %[[NEW]] segment @f last
// CHECK:       %[[NEWLEN:.+]] = tensor.dim %[[NEW]], %[[ZERO]]
// CHECK:       %[[OLDLEN:.+]] = arith.subi %[[FE]], %[[FB]]
// CHECK:       %[[DELTA:.+]] = arith.subi %[[NEWLEN]], %[[OLDLEN]]
// CHECK:       %[[TB:.+]], %[[TE:.+]] = kv.segment_bounds %[[C]][@t]
// CHECK:       %[[TSEG:.+]] = kv.slice %[[C]][%[[TB]], %[[TE]]]
// CHECK:       %[[TTOK:.+]] = kv.tokens %[[TSEG]]
// CHECK:       %[[V2:.+]], %{{.+}} = kv.prefill %[[M]], %[[V1]], %[[TTOK]] segment @t last
// CHECK:       %[[BB:.+]], %[[BE:.+]] = kv.segment_bounds %[[C]][@b]
// CHECK:       %[[BSEG:.+]] = kv.slice %[[C]][%[[BB]], %[[BE]]]
// CHECK:       %[[BSHIFT:.+]] = kv.rope_shift %[[BSEG]] by %[[DELTA]]
// CHECK:       %[[V3:.+]] = kv.concat %[[V2]], %[[BSHIFT]]
// CHECK:       kv.segment_bounds %[[C]][@ans]
// CHECK:       %[[V4:.+]], %{{.+}} = kv.prefill %[[M]], %[[V3]], %{{.+}} segment @ans last
// Tokens after the last declared segment are prefilled again.
// CHECK:       %[[LEN:.+]] = kv.length %[[C]]
// CHECK:       %[[REST:.+]] = kv.slice %[[C]][%{{.+}}, %[[LEN]]]
// CHECK:       %[[RTOK:.+]] = kv.tokens %[[REST]]
// CHECK:       %[[V5:.+]], %{{.+}} = kv.prefill %[[M]], %[[V4]], %[[RTOK]] :
// CHECK-NOT:   kv.edit
// CHECK:       return %[[V5]]
func.func @cot_slice(%m: !model, %c: !cache, %new: tensor<?xi32>) -> !cache {
  %e = kv.edit %m, %c[@f] = %new strategy <cot_slice> : !model, !cache, tensor<?xi32>
  return %e : !cache
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32, @ctx>
kv.context @ctx {
  kv.segment @a kind(system) tokens(4)
  kv.segment @f kind(fact) tokens(?)
  kv.segment @t kind(thought) tokens(3) deps(@f)
  kv.segment @b kind(tool) tokens(5)
}

// exact: every later segment is prefilled again; nothing is shifted.
// CHECK-LABEL: func.func @exact
// CHECK:     kv.prefill {{.+}} segment @f last
// CHECK:     kv.prefill {{.+}} segment @t last
// CHECK:     kv.prefill {{.+}} segment @b last
// CHECK-NOT: kv.rope_shift
// CHECK-NOT: kv.edit
// CHECK:     return
func.func @exact(%m: !model, %c: !cache, %new: tensor<?xi32>) -> !cache {
  %e = kv.edit %m, %c[@f] = %new strategy <exact> : !model, !cache, tensor<?xi32>
  return %e : !cache
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32, @ctx>
kv.context @ctx {
  kv.segment @f kind(fact) tokens(2)
  kv.segment @b kind(tool) tokens(5)
}

// first_k: the first min(k, len) tokens of a reused segment are prefilled
// again over the new prefix, the rest is reused shifted.
// CHECK-LABEL: func.func @first_k
// CHECK:     %[[V1:.+]], %{{.+}} = kv.prefill {{.+}} segment @f last
// CHECK:     %[[BB:.+]], %[[BE:.+]] = kv.segment_bounds %{{.+}}[@b]
// CHECK:     %[[K:.+]] = arith.constant 3 : index
// CHECK:     %[[BLEN:.+]] = arith.subi %[[BE]], %[[BB]]
// CHECK:     %[[KK:.+]] = arith.minsi %[[K]], %[[BLEN]]
// CHECK:     %[[MID:.+]] = arith.addi %[[BB]], %[[KK]]
// CHECK:     %[[HEAD:.+]] = kv.slice %{{.+}}[%[[BB]], %[[MID]]]
// CHECK:     %[[HTOK:.+]] = kv.tokens %[[HEAD]]
// CHECK:     %[[V2:.+]], %{{.+}} = kv.prefill %{{.+}}, %[[V1]], %[[HTOK]] segment @b last
// CHECK:     %[[TAIL:.+]] = kv.slice %{{.+}}[%[[MID]], %[[BE]]]
// CHECK:     %[[SHIFTED:.+]] = kv.rope_shift %[[TAIL]] by
// CHECK:     kv.concat %[[V2]], %[[SHIFTED]]
func.func @first_k(%m: !model, %c: !cache, %new: tensor<2xi32>) -> !cache {
  %e = kv.edit %m, %c[@f] = %new strategy <cot_slice, first_k = 3> : !model, !cache, tensor<2xi32>
  return %e : !cache
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32, @ctx>
kv.context @ctx {
  kv.segment @f kind(fact) tokens(2)
  kv.segment @b kind(tool) tokens(5)
}

// fraction: the reused segment is appended shifted, then its deviating tokens
// are recomputed at run time.
// CHECK-LABEL: func.func @fraction
// CHECK:     %[[V1:.+]], %{{.+}} = kv.prefill {{.+}} segment @f last
// CHECK:     %[[START:.+]] = kv.length %[[V1]]
// CHECK:     %[[SHIFTED:.+]] = kv.rope_shift
// CHECK:     %[[V2:.+]] = kv.concat %[[V1]], %[[SHIFTED]]
// CHECK:     %[[END:.+]] = kv.length %[[V2]]
// CHECK:     kv.selective_recompute %{{.+}}, %[[V2]][%[[START]], %[[END]]] fraction 1.500000e-01
func.func @fraction(%m: !model, %c: !cache, %new: tensor<2xi32>) -> !cache {
  %e = kv.edit %m, %c[@f] = %new strategy <cot_slice, fraction = 0.15> : !model, !cache, tensor<2xi32>
  return %e : !cache
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32, @ctx>
kv.context @ctx {
  kv.segment @f kind(fact) tokens(2)
  kv.segment @b kind(tool) tokens(5)
}

// deviation: like fraction, the reused segment is appended shifted, then the
// tokens whose relative deviation exceeds the threshold are recomputed at
// run time.
// CHECK-LABEL: func.func @deviation
// CHECK:     %[[V1:.+]], %{{.+}} = kv.prefill {{.+}} segment @f last
// CHECK:     %[[START:.+]] = kv.length %[[V1]]
// CHECK:     %[[SHIFTED:.+]] = kv.rope_shift
// CHECK:     %[[V2:.+]] = kv.concat %[[V1]], %[[SHIFTED]]
// CHECK:     %[[END:.+]] = kv.length %[[V2]]
// CHECK:     %[[R:.+]] = kv.selective_recompute %{{.+}}, %[[V2]][%[[START]], %[[END]]] deviation 5.000000e-02 :
// CHECK-NOT: fraction
// CHECK:     kv.prefill %{{.+}}, %[[R]], %{{.+}} :
func.func @deviation(%m: !model, %c: !cache, %new: tensor<2xi32>) -> !cache {
  %e = kv.edit %m, %c[@f] = %new strategy <cot_slice, deviation = 0.05> : !model, !cache, tensor<2xi32>
  return %e : !cache
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32, @ctx>
kv.context @ctx {
  kv.segment @a kind(system) tokens(4)
  kv.segment @f kind(fact) tokens(2)
  kv.segment @t kind(thought) tokens(3) deps(@f)
  kv.segment @ans kind(answer) tokens(2) deps(@t)
  kv.segment @note kind(other) tokens(3)
}

// erratum: the old cache up to the answer is kept as it is (@f with its old
// tokens, @t not recomputed), the correction is prefilled after it labelled
// @f.erratum, then the answer and what follows it (@note, the continuation)
// are prefilled again; the new tokens of @f are not used. The kv.logits of
// @ans takes the answer's prefill.
// CHECK-LABEL: func.func @erratum
// CHECK-SAME: (%[[M:.+]]: !model, %[[C:.+]]: !kv.cache<1x1x4xf32, @ctx>, %[[NEW:.+]]: tensor<2xi32>, %[[FIX:.+]]: tensor<?xi32>)
// CHECK-NOT: kv.segment_bounds %[[C]][@f]
// CHECK:     %[[AB:.+]], %[[AE:.+]] = kv.segment_bounds %[[C]][@ans]
// CHECK:     %[[ZERO:.+]] = arith.constant 0 : index
// CHECK:     %[[KEPT:.+]] = kv.slice %[[C]][%[[ZERO]], %[[AB]]]
// CHECK:     %[[V1:.+]], %{{.+}} = kv.prefill %[[M]], %[[KEPT]], %[[FIX]] segment @f.erratum last :
// CHECK:     %[[ANS:.+]] = kv.slice %[[C]][%[[AB]], %[[AE]]]
// CHECK:     %[[ATOK:.+]] = kv.tokens %[[ANS]]
// CHECK:     %[[V2:.+]], %[[L:.+]] = kv.prefill %[[M]], %[[V1]], %[[ATOK]] segment @ans : {{.+}} -> !kv.cache<1x1x4xf32, @ctx>, tensor<?x10xf32>
// CHECK:     %[[NB:.+]], %[[NE:.+]] = kv.segment_bounds %[[C]][@note]
// CHECK:     %[[NOTE:.+]] = kv.slice %[[C]][%[[NB]], %[[NE]]]
// CHECK:     %[[NTOK:.+]] = kv.tokens %[[NOTE]]
// CHECK:     %[[V3:.+]], %{{.+}} = kv.prefill %[[M]], %[[V2]], %[[NTOK]] segment @note last
// CHECK:     %[[LEN:.+]] = kv.length %[[C]]
// CHECK:     %[[REST:.+]] = kv.slice %[[C]][%[[NE]], %[[LEN]]]
// CHECK:     %[[RTOK:.+]] = kv.tokens %[[REST]]
// CHECK:     %[[V4:.+]], %{{.+}} = kv.prefill %[[M]], %[[V3]], %[[RTOK]] :
// CHECK-NOT: kv.rope_shift
// CHECK-NOT: kv.logits
// CHECK-NOT: %[[NEW]]
// CHECK:     return %[[V4]], %[[L]]
func.func @erratum(%m: !model, %c: !cache, %new: tensor<2xi32>, %fix: tensor<?xi32>) -> (!cache, tensor<?x10xf32>) {
  %e = kv.edit %m, %c[@f] = %new strategy <erratum> correction(%fix) : !model, !cache, tensor<2xi32>, tensor<?xi32>
  %l = kv.logits %m, %e[@ans] : !model, !cache -> tensor<?x10xf32>
  return %e, %l : !cache, tensor<?x10xf32>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32, @ctx>
kv.context @ctx {
  kv.segment @f kind(fact) tokens(2)
  kv.segment @t kind(thought) tokens(3) deps(@f)
  kv.segment @q kind(user) tokens(2)
}

// erratum in a context without an answer segment: the last segment is the
// answer, so the correction goes before @q; @t is kept.
// CHECK-LABEL: func.func @erratum_last_segment_is_the_answer
// CHECK-SAME: (%[[M:.+]]: !model, %[[C:.+]]: !kv.cache<1x1x4xf32, @ctx>, %{{.+}}: tensor<2xi32>, %[[FIX:.+]]: tensor<4xi32>)
// CHECK:     %[[QB:.+]], %[[QE:.+]] = kv.segment_bounds %[[C]][@q]
// CHECK:     %[[KEPT:.+]] = kv.slice %[[C]][%{{.+}}, %[[QB]]]
// CHECK:     %[[V1:.+]], %{{.+}} = kv.prefill %[[M]], %[[KEPT]], %[[FIX]] segment @f.erratum last :
// CHECK-NOT: segment @t
// CHECK:     kv.prefill %[[M]], %[[V1]], %{{.+}} segment @q last
func.func @erratum_last_segment_is_the_answer(%m: !model, %c: !cache, %new: tensor<2xi32>, %fix: tensor<4xi32>) -> !cache {
  %e = kv.edit %m, %c[@f] = %new strategy <erratum> correction(%fix) : !model, !cache, tensor<2xi32>, tensor<4xi32>
  return %e : !cache
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32, @ctx>
kv.context @ctx {
  kv.segment @f kind(fact) tokens(2)
  kv.segment @t kind(thought) tokens(3) deps(@f)
  kv.segment @ans kind(answer) tokens(2) deps(@t)
}

// The logits of a segment the plan recomputes come from that prefill, which
// then computes every row; no second prefill of @ans.
// CHECK-LABEL: func.func @logits_reused
// CHECK:     kv.prefill {{.+}} segment @f last
// CHECK:     kv.prefill {{.+}} segment @t last
// CHECK:     %{{.+}}, %[[L:.+]] = kv.prefill {{.+}} segment @ans : {{.+}} -> !kv.cache<1x1x4xf32, @ctx>, tensor<?x10xf32>
// CHECK-NOT: kv.logits
// CHECK:     return %[[L]]
func.func @logits_reused(%m: !model, %c: !cache, %new: tensor<2xi32>) -> tensor<?x10xf32> {
  %e = kv.edit %m, %c[@f] = %new strategy <cot_slice> : !model, !cache, tensor<2xi32>
  %l = kv.logits %m, %e[@ans] : !model, !cache -> tensor<?x10xf32>
  return %l : tensor<?x10xf32>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32, @ctx>
kv.context @ctx {
  kv.segment @f kind(fact) tokens(2)
  kv.segment @t kind(thought) tokens(3)
}

// The logits of a segment no plan recomputes: prefill its tokens over the
// view before it, at the segment's own position.
// CHECK-LABEL: func.func @logits_standalone
// CHECK-SAME: (%[[M:.+]]: !model, %[[C:.+]]: !kv.cache<1x1x4xf32, @ctx>)
// CHECK:     %[[B:.+]], %[[E:.+]] = kv.segment_bounds %[[C]][@t]
// CHECK:     %[[SEG:.+]] = kv.slice %[[C]][%[[B]], %[[E]]]
// CHECK:     %[[POS:.+]] = kv.start_position %[[SEG]]
// CHECK:     %[[ZERO:.+]] = arith.constant 0 : index
// CHECK:     %[[PREFIX:.+]] = kv.slice %[[C]][%[[ZERO]], %[[B]]]
// CHECK:     %[[TOK:.+]] = kv.tokens %[[SEG]]
// CHECK:     %{{.+}}, %[[L:.+]] = kv.prefill %[[M]], %[[PREFIX]], %[[TOK]] at %[[POS]] :
// CHECK:     %[[CAST:.+]] = tensor.cast %[[L]] : tensor<?x10xf32> to tensor<3x10xf32>
// CHECK:     return %[[CAST]]
func.func @logits_standalone(%m: !model, %c: !cache) -> tensor<3x10xf32> {
  %l = kv.logits %m, %c[@t] : !model, !cache -> tensor<3x10xf32>
  return %l : tensor<3x10xf32>
}

// -----

!cache = !kv.cache<1x1x4xf32>

// compose: the block is shifted to the end of the cache and concatenated.
// CHECK-LABEL: func.func @compose
// CHECK-SAME: (%[[C:.+]]: !kv.cache<1x1x4xf32>, %[[B:.+]]: !kv.cache<1x1x4xf32>)
// CHECK:     %[[END:.+]] = kv.end_position %[[C]]
// CHECK:     %[[START:.+]] = kv.start_position %[[B]]
// CHECK:     %[[DELTA:.+]] = arith.subi %[[END]], %[[START]]
// CHECK:     %[[S:.+]] = kv.rope_shift %[[B]] by %[[DELTA]]
// CHECK:     %[[R:.+]] = kv.concat %[[C]], %[[S]]
// CHECK-NOT: kv.compose
// CHECK:     return %[[R]]
func.func @compose(%c: !cache, %b: !cache) -> !cache {
  %r = kv.compose %c, %b : !cache, !cache
  return %r : !cache
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>

// compose at a position with first_k: the block's first tokens are prefilled
// again at the new position, the rest shifted.
// CHECK-LABEL: func.func @compose_first_k
// CHECK-SAME: (%[[M:.+]]: !model, %[[C:.+]]: !kv.cache<1x1x4xf32>, %[[B:.+]]: !kv.cache<1x1x4xf32>, %[[POS:.+]]: index)
// CHECK:     %[[START:.+]] = kv.start_position %[[B]]
// CHECK:     %[[DELTA:.+]] = arith.subi %[[POS]], %[[START]]
// CHECK:     %[[HEAD:.+]] = kv.slice %[[B]]
// CHECK:     %[[HTOK:.+]] = kv.tokens %[[HEAD]]
// CHECK:     %[[V:.+]], %{{.+}} = kv.prefill %[[M]], %[[C]], %[[HTOK]] at %[[POS]] last
// CHECK:     %[[TAIL:.+]] = kv.slice %[[B]]
// CHECK:     %[[S:.+]] = kv.rope_shift %[[TAIL]] by %[[DELTA]]
// CHECK:     kv.concat %[[V]], %[[S]]
func.func @compose_first_k(%m: !model, %c: !cache, %b: !cache, %pos: index) -> !cache {
  %r = kv.compose %c, %b at %pos repair <first_k = 4> using %m : !cache, !cache, !model
  return %r : !cache
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>

// compose with a deviation budget: the block is appended shifted, then its
// tokens above the threshold are recomputed.
// CHECK-LABEL: func.func @compose_deviation
// CHECK-SAME: (%[[M:.+]]: !model, %[[C:.+]]: !kv.cache<1x1x4xf32>, %[[B:.+]]: !kv.cache<1x1x4xf32>)
// CHECK:     %[[START:.+]] = kv.length %[[C]]
// CHECK:     %[[S:.+]] = kv.rope_shift
// CHECK:     %[[V:.+]] = kv.concat %[[C]], %[[S]]
// CHECK:     %[[END:.+]] = kv.length %[[V]]
// CHECK:     %[[R:.+]] = kv.selective_recompute %[[M]], %[[V]][%[[START]], %[[END]]] deviation 2.000000e-01
// CHECK:     return %[[R]]
func.func @compose_deviation(%m: !model, %c: !cache, %b: !cache) -> !cache {
  %r = kv.compose %c, %b repair <deviation = 0.2> using %m : !cache, !cache, !model
  return %r : !cache
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32, @ctx>
kv.context @ctx {
  kv.segment @a kind(system) tokens(4)
  kv.segment @f kind(fact) tokens(2)
}

// An edit of the last segment reuses nothing: no shift, no length arithmetic.
// CHECK-LABEL: func.func @negative_nothing_to_reuse
// CHECK:     kv.prefill {{.+}} segment @f last
// CHECK-NOT: kv.rope_shift
// CHECK-NOT: tensor.dim
// CHECK:     return
func.func @negative_nothing_to_reuse(%m: !model, %c: !cache, %new: tensor<2xi32>) -> !cache {
  %e = kv.edit %m, %c[@f] = %new strategy <cot_slice> : !model, !cache, tensor<2xi32>
  return %e : !cache
}

// -----

!cache = !kv.cache<1x1x4xf32>

// Functions without kv.edit, kv.compose or kv.logits are left alone.
// CHECK-LABEL: func.func @negative_no_plan
// CHECK-NEXT:  kv.rope_shift
// CHECK-NEXT:  return
func.func @negative_no_plan(%c: !cache, %d: index) -> !cache {
  %s = kv.rope_shift %c by %d : !cache
  return %s : !cache
}
