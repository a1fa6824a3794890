// Plans the verifier would reject: the pass must still diagnose them, never
// crash. The input is parsed without verification to let them reach the pass.
// RUN: kv-opt %s --mlir-very-unsafe-disable-verifier-on-parsing -verify-each=false --kv-derive-cot-slices -split-input-file -verify-diagnostics

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
kv.context @ctx {
  kv.segment @f kind(fact) tokens(2)
}
// An edit of a segment the context does not declare.
func.func @unknown_segment(%m: !model, %c: !kv.cache<1x1x4xf32, @ctx>, %new: tensor<2xi32>) -> !kv.cache<1x1x4xf32, @ctx> {
  // expected-error @below {{cannot plan: context @ctx declares no segment @nosuch}}
  %e = kv.edit %m, %c[@nosuch] = %new strategy <cot_slice> : !model, !kv.cache<1x1x4xf32, @ctx>, tensor<2xi32>
  return %e : !kv.cache<1x1x4xf32, @ctx>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
// A cycle: @a depends on the later @b, which depends on @a.
kv.context @ctx {
  // expected-error @below {{cannot plan: dependency @b of segment @a is not an earlier segment (dangling or cyclic)}}
  kv.segment @a kind(fact) tokens(2) deps(@b)
  kv.segment @b kind(thought) tokens(2) deps(@a)
}
func.func @cycle(%m: !model, %c: !kv.cache<1x1x4xf32, @ctx>, %new: tensor<2xi32>) -> !kv.cache<1x1x4xf32, @ctx> {
  %e = kv.edit %m, %c[@a] = %new strategy <cot_slice> : !model, !kv.cache<1x1x4xf32, @ctx>, tensor<2xi32>
  return %e : !kv.cache<1x1x4xf32, @ctx>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
// A dangling dependency.
kv.context @ctx {
  kv.segment @a kind(fact) tokens(2)
  // expected-error @below {{cannot plan: dependency @gone of segment @b is not an earlier segment (dangling or cyclic)}}
  kv.segment @b kind(thought) tokens(2) deps(@gone)
}
func.func @dangling(%m: !model, %c: !kv.cache<1x1x4xf32, @ctx>, %new: tensor<2xi32>) -> !kv.cache<1x1x4xf32, @ctx> {
  %e = kv.edit %m, %c[@a] = %new strategy <cot_slice> : !model, !kv.cache<1x1x4xf32, @ctx>, tensor<2xi32>
  return %e : !kv.cache<1x1x4xf32, @ctx>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
// The cache type names no context: there is no graph to plan with.
func.func @no_context(%m: !model, %c: !kv.cache<1x1x4xf32>, %new: tensor<2xi32>) -> !kv.cache<1x1x4xf32> {
  // expected-error @below {{cannot plan: the cache type names no kv.context}}
  %e = kv.edit %m, %c[@f] = %new strategy <cot_slice> : !model, !kv.cache<1x1x4xf32>, tensor<2xi32>
  return %e : !kv.cache<1x1x4xf32>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
// The cache type names a context that does not exist.
func.func @missing_context(%m: !model, %c: !kv.cache<1x1x4xf32, @nowhere>, %new: tensor<2xi32>) -> !kv.cache<1x1x4xf32, @nowhere> {
  // expected-error @below {{cannot plan: context @nowhere is not defined}}
  %e = kv.edit %m, %c[@f] = %new strategy <cot_slice> : !model, !kv.cache<1x1x4xf32, @nowhere>, tensor<2xi32>
  return %e : !kv.cache<1x1x4xf32, @nowhere>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
kv.context @ctx {
  kv.segment @f kind(fact) tokens(2)
}
// A repair budget outside [0, 1] cannot even be built: the attribute's
// verifier rejects it when it is parsed, before any pass.
func.func @fraction_out_of_range(%m: !model, %c: !kv.cache<1x1x4xf32, @ctx>, %new: tensor<2xi32>) -> !kv.cache<1x1x4xf32, @ctx> {
  // expected-error @below {{repair budget fraction must be in [0, 1], got 1.5}}
  %e = kv.edit %m, %c[@f] = %new strategy <cot_slice, fraction = 1.5> : !model, !kv.cache<1x1x4xf32, @ctx>, tensor<2xi32>
  return %e : !kv.cache<1x1x4xf32, @ctx>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
kv.context @ctx {
  kv.segment @f kind(fact) tokens(2)
  kv.segment @ans kind(answer) tokens(2) deps(@f)
}
// An erratum without its correction tokens.
func.func @erratum_without_correction(%m: !model, %c: !kv.cache<1x1x4xf32, @ctx>, %new: tensor<2xi32>) -> !kv.cache<1x1x4xf32, @ctx> {
  // expected-error @below {{cannot plan: an erratum needs its correction tokens}}
  %e = kv.edit %m, %c[@f] = %new strategy <erratum> : !model, !kv.cache<1x1x4xf32, @ctx>, tensor<2xi32>
  return %e : !kv.cache<1x1x4xf32, @ctx>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
kv.context @ctx {
  kv.segment @f kind(fact) tokens(2)
  kv.segment @ans kind(answer) tokens(2) deps(@f)
}
// An erratum of the last segment: no answer follows the correction.
func.func @erratum_of_last_segment(%m: !model, %c: !kv.cache<1x1x4xf32, @ctx>, %new: tensor<2xi32>, %fix: tensor<3xi32>) -> !kv.cache<1x1x4xf32, @ctx> {
  // expected-error @below {{cannot plan: erratum of @ans, the last segment of context @ctx, leaves no answer to recompute after the correction}}
  %e = kv.edit %m, %c[@ans] = %new strategy <erratum> correction(%fix) : !model, !kv.cache<1x1x4xf32, @ctx>, tensor<2xi32>, tensor<3xi32>
  return %e : !kv.cache<1x1x4xf32, @ctx>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
kv.context @ctx {
  kv.segment @f kind(fact) tokens(2)
  kv.segment @ans kind(answer) tokens(2) deps(@f)
}
// An edit of an erratum's result: its correction belongs to no segment, so a
// plan over the context's segments would drop it.
func.func @edit_after_erratum(%m: !model, %c: !kv.cache<1x1x4xf32, @ctx>, %new: tensor<2xi32>, %fix: tensor<3xi32>) -> !kv.cache<1x1x4xf32, @ctx> {
  %e = kv.edit %m, %c[@f] = %new strategy <erratum> correction(%fix) : !model, !kv.cache<1x1x4xf32, @ctx>, tensor<2xi32>, tensor<3xi32>
  // expected-error @below {{cannot plan an edit of the result of an erratum edit: its correction belongs to no segment of the context, and the plan would drop it}}
  %e2 = kv.edit %m, %e[@f] = %new strategy <exact> : !model, !kv.cache<1x1x4xf32, @ctx>, tensor<2xi32>
  return %e2 : !kv.cache<1x1x4xf32, @ctx>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
kv.context @ctx {
  kv.segment @f kind(fact) tokens(2)
}
// A deviation threshold that is not positive cannot be built either.
func.func @deviation_not_positive(%m: !model, %c: !kv.cache<1x1x4xf32, @ctx>, %new: tensor<2xi32>) -> !kv.cache<1x1x4xf32, @ctx> {
  // expected-error @below {{repair budget deviation must be a finite threshold > 0, got 0.0}}
  %e = kv.edit %m, %c[@f] = %new strategy <cot_slice, deviation = 0.0> : !model, !kv.cache<1x1x4xf32, @ctx>, tensor<2xi32>
  return %e : !kv.cache<1x1x4xf32, @ctx>
}
