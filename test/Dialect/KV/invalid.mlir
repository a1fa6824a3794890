// RUN: kv-opt %s -split-input-file -verify-diagnostics

// Only kv.segment ops may appear in a kv.context.
kv.context @agent {
  kv.segment @system kind(system) tokens(12)
  // expected-error@+1 {{'func.func' op is not allowed in a 'kv.context'; only 'kv.segment' ops are}}
  func.func private @helper()
}

// -----

// A kv.segment outside a kv.context.
// expected-error@+1 {{'kv.segment' op expects parent op 'kv.context'}}
kv.segment @loose kind(fact) tokens(4)

// -----

// A static segment size of zero.
kv.context @agent {
  // expected-error@+1 {{segment @empty must have a positive token count, got 0 (use tokens(?) for a size known at run time)}}
  kv.segment @empty kind(fact) tokens(0)
}

// -----

// A negative segment size.
kv.context @agent {
  // expected-error@+1 {{segment @city must have a positive token count, got -3}}
  kv.segment @city kind(fact) tokens(-3)
}

// -----

// A dependency on a later segment.
kv.context @agent {
  // expected-error@+1 {{segment @think depends on @city, which comes later in the context; dependencies must point to earlier segments}}
  kv.segment @think kind(thought) tokens(4) deps(@city)
  kv.segment @city kind(fact) tokens(?)
}

// -----

// A dependency on a segment the context does not declare.
kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
  // expected-error@+1 {{segment @think depends on @weather, which is not a segment of context @agent}}
  kv.segment @think kind(thought) tokens(4) deps(@city, @weather)
}

// -----

// A segment that depends on itself.
kv.context @agent {
  // expected-error@+1 {{segment @think depends on itself}}
  kv.segment @think kind(thought) tokens(4) deps(@think)
}

// -----

// A dependency listed twice.
kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
  // expected-error@+1 {{segment @think lists dependency @city twice}}
  kv.segment @think kind(thought) tokens(4) deps(@city, @city)
}

// -----

// Two segments that depend on each other.
kv.context @agent {
  // expected-error@+1 {{dependency cycle: @a -> @b -> @a}}
  kv.segment @a kind(thought) tokens(4) deps(@b)
  kv.segment @b kind(thought) tokens(4) deps(@a)
}

// -----

// A cycle through three segments is reported with its whole path.
kv.context @agent {
  // expected-error@+1 {{dependency cycle: @a -> @c -> @b -> @a}}
  kv.segment @a kind(thought) tokens(4) deps(@c)
  kv.segment @b kind(thought) tokens(4) deps(@a)
  kv.segment @c kind(thought) tokens(4) deps(@b)
}

// -----

// kv.edit of a segment the context does not declare.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
}
func.func @edit_unknown_segment(%m: !m, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.edit' op segment @town is not defined in context @agent}}
  %0 = kv.edit %m, %c[@town] = %t strategy <exact> : !m, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>
  return
}

// -----

// An edit whose new tokens have another static length than the segment's
// static size: the edited context would contradict its declaration.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
kv.context @agent {
  kv.segment @city kind(fact) tokens(12)
  kv.segment @answer kind(answer) tokens(8) deps(@city)
}
func.func @edit_static_size_mismatch(%m: !m, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<16xi32>) {
  // expected-error@+1 {{'kv.edit' op replaces segment @city by 16 tokens, but context @agent declares it with 12 (declare it tokens(?) for an edit that changes its length)}}
  %0 = kv.edit %m, %c[@city] = %t strategy <cot_slice> : !m, !kv.cache<5x4x8xf32, @agent>, tensor<16xi32>
  return
}

// -----

// An erratum needs the correction it appends.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
  kv.segment @answer kind(answer) tokens(8) deps(@city)
}
func.func @erratum_without_correction(%m: !m, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.edit' op strategy erratum needs the tokens of the correction it appends: add `correction(%tokens)`}}
  %0 = kv.edit %m, %c[@city] = %t strategy <erratum> : !m, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>
  return
}

// -----

// Only an erratum takes correction tokens.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
  kv.segment @answer kind(answer) tokens(8) deps(@city)
}
func.func @correction_without_erratum(%m: !m, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<?xi32>, %fix: tensor<?xi32>) {
  // expected-error@+1 {{'kv.edit' op takes correction tokens only with the erratum strategy, not cot_slice}}
  %0 = kv.edit %m, %c[@city] = %t strategy <cot_slice> correction(%fix) : !m, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>, tensor<?xi32>
  return
}

// -----

// An erratum of the last segment leaves no answer to recompute after the
// correction.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
  kv.segment @answer kind(answer) tokens(8) deps(@city)
}
func.func @erratum_of_last_segment(%m: !m, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<?xi32>, %fix: tensor<?xi32>) {
  // expected-error@+1 {{'kv.edit' op erratum of @answer, the last segment of context @agent, leaves no answer to recompute after the correction (use exact or cot_slice)}}
  %0 = kv.edit %m, %c[@answer] = %t strategy <erratum> correction(%fix) : !m, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>, tensor<?xi32>
  return
}

// -----

// A correction label names no segment an edit could replace.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
  kv.segment @answer kind(answer) tokens(8) deps(@city)
}
func.func @edit_of_correction(%m: !m, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.edit' op segment @city.erratum is not defined in context @agent}}
  %0 = kv.edit %m, %c[@city.erratum] = %t strategy <exact> : !m, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>
  return
}

// -----

// A correction label of a segment the context does not declare.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
}
func.func @correction_of_unknown_segment(%m: !m, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill' op segment @town.erratum is not defined in context @agent}}
  %0, %l = kv.prefill %m, %c, %t segment @town.erratum : !m, (!kv.cache<5x4x8xf32, @agent>), tensor<?xi32> -> !kv.cache<5x4x8xf32, @agent>, tensor<?x512xf32>
  return
}

// -----

// kv.logits of a segment the context does not declare.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
kv.context @agent {
  kv.segment @answer kind(answer) tokens(8)
}
func.func @logits_unknown_segment(%m: !m, %c: !kv.cache<5x4x8xf32, @agent>) {
  // expected-error@+1 {{'kv.logits' op segment @reply is not defined in context @agent}}
  %0 = kv.logits %m, %c[@reply] : !m, !kv.cache<5x4x8xf32, @agent> -> tensor<?x512xf32>
  return
}

// -----

// kv.segment_bounds of a segment the context does not declare.
kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
}
func.func @bounds_unknown_segment(%c: !kv.cache<5x4x8xf32, @agent>) {
  // expected-error@+1 {{'kv.segment_bounds' op segment @town is not defined in context @agent}}
  %b, %e = kv.segment_bounds %c[@town] : !kv.cache<5x4x8xf32, @agent>
  return
}

// -----

// kv.prefill labels its run with a segment the context does not declare.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
kv.context @agent {
  kv.segment @system kind(system) tokens(12)
}
func.func @prefill_unknown_segment(%m: !m, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill' op segment @prompt is not defined in context @agent}}
  %0, %1 = kv.prefill %m, %c, %t segment @prompt : !m, (!kv.cache<5x4x8xf32, @agent>), tensor<?xi32> -> !kv.cache<5x4x8xf32, @agent>, tensor<?x512xf32>
  return
}

// -----

// A cache type that names a context that is not defined.
func.func @undefined_context() {
  // expected-error@+1 {{'kv.empty' op cache type names context @nowhere, which is not defined}}
  %0 = kv.empty : !kv.cache<5x4x8xf32, @nowhere>
  return
}

// -----

// A cache type that names a symbol that is not a kv.context.
func.func private @agent()
func.func @not_a_context() {
  // expected-error@+1 {{'kv.empty' op cache type names @agent, which is not a 'kv.context'}}
  %0 = kv.empty : !kv.cache<5x4x8xf32, @agent>
  return
}

// -----

// kv.edit needs the context's dependency graph, so its cache type must name one.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @edit_without_context(%m: !m, %c: !kv.cache<5x4x8xf32>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.edit' op needs a cache type that names a kv.context, to know the dependencies of segment @city}}
  %0 = kv.edit %m, %c[@city] = %t strategy <cot_slice> : !m, !kv.cache<5x4x8xf32>, tensor<?xi32>
  return
}

// -----

// A model size of zero.
// expected-error@+1 {{model dim must be in [1, 2^31), got 0}}
func.func private @zero_dim(!kv.model<dim = 0, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>)

// -----

// A negative model size.
// expected-error@+1 {{model layers must be in [1, 2^31), got -5}}
func.func private @negative_layers(!kv.model<dim = 64, hidden = 172, layers = -5, heads = 8, kv_heads = 4, vocab = 512>)

// -----

// A head count that does not divide the model dimension.
// expected-error@+1 {{invalid model type: dim 64 is not divisible by n_heads 6}}
func.func private @heads_do_not_divide(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 6, kv_heads = 2, vocab = 512>)

// -----

// A KV head count that does not divide the head count.
// expected-error@+1 {{invalid model type: n_heads 8 is not divisible by n_kv_heads 3}}
func.func private @kv_heads_do_not_divide(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 3, vocab = 512>)

// -----

// RoPE needs an even head size.
// expected-error@+1 {{invalid model type: head size 3 (dim 24 / n_heads 8) is odd: RoPE rotates pairs of dimensions}}
func.func private @odd_head_size(!kv.model<dim = 24, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>)

// -----

// A RoPE base that is not positive.
// expected-error@+1 {{invalid model type: rope_theta = -1 must be positive and finite}}
func.func private @bad_theta(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, theta = -1.0>)

// -----

// An RMSNorm epsilon that is not positive.
// expected-error@+1 {{invalid model type: rms_eps = 0 must be positive and finite}}
func.func private @bad_eps(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, eps = 0.0>)

// -----

// An unknown model parameter (the message is ODS's, of struct()).
// expected-error@+1 {{duplicate or unknown struct parameter name: width}}
func.func private @unknown_parameter(!kv.model<dim = 64, width = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>)

// -----

// A missing model parameter.
// expected-error@+1 {{struct is missing required parameter: vocab}}
func.func private @missing_parameter(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4>)

// -----

// A model parameter given twice.
// expected-error@+1 {{duplicate or unknown struct parameter name: heads}}
func.func private @duplicate_parameter(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, heads = 4, kv_heads = 4, vocab = 512>)

// -----

// An unknown RoPE layout (llama.cpp's names, normal and neox, are known);
// ODS then names the parameter that failed to parse.
// expected-error@+2 {{unknown RoPE layout 'yarn' (expected interleaved (normal) or half (neox))}}
// expected-error@+1 {{failed to parse KV_ModelType parameter 'rope'}}
func.func private @unknown_rope(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope = yarn>)

// -----

// expected-error@+2 {{expected true or false, got 'yes'}}
// expected-error@+1 {{failed to parse KV_ModelType parameter 'qkv_bias'}}
func.func private @bad_qkv_bias(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, qkv_bias = yes>)

// -----

// A model without RoPE frequency factors omits rope_freqs.
// expected-error@+2 {{model rope_freqs must not be empty (omit it)}}
// expected-error@+1 {{failed to parse KV_ModelType parameter 'rope_freqs'}}
func.func private @empty_rope_freqs(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope_freqs = []>)

// -----

// A RoPE base needs a float literal.
// expected-error@+3 {{unexpected decimal integer literal for a floating point value}}
// expected-note@+2 {{add a trailing dot to make the literal a float}}
// expected-error@+1 {{failed to parse KV_ModelType parameter 'theta'}}
func.func private @integer_theta(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, theta = 10000>)

// -----

// A cache shape needs exactly three dimensions.
// expected-error@+1 {{expected a cache shape `layers x kv_heads x head_size x element type`, got 2 dimensions}}
func.func private @cache_rank(!kv.cache<4x8xf32>)

// -----

// A cache dimension that is not positive.
// expected-error@+1 {{cache KV heads must be positive, got 0}}
func.func private @cache_zero_dim(!kv.cache<5x0x8xf32>)

// -----

// RoPE needs an even cache head size.
// expected-error@+1 {{cache head size 7 is odd; RoPE rotates pairs of dimensions}}
func.func private @cache_odd_head_size(!kv.cache<5x4x7xf32>)

// -----

// K/V are floats of 32 or 16 bits.
// expected-error@+1 {{cache element type must be f32, f16 or bf16, got 'i32'}}
func.func private @cache_element_type(!kv.cache<5x4x8xi32>)

// -----

// An unknown edit strategy.
// expected-error@+1 {{unknown edit strategy 'lazy' (expected exact, cot_slice or erratum)}}
func.func private @unknown_strategy() attributes {kv.s = #kv.strategy<lazy>}

// -----

// A repair budget only makes sense with cot_slice.
// expected-error@+1 {{a repair budget needs the cot_slice strategy, not exact}}
func.func private @repair_with_exact() attributes {kv.s = #kv.strategy<exact, first_k = 8>}

// -----

// A negative first_k budget.
// expected-error@+1 {{repair budget first_k must be non-negative, got -4}}
func.func private @negative_first_k() attributes {kv.r = #kv.repair<first_k = -4>}

// -----

// A fraction budget above 1.
// expected-error@+1 {{repair budget fraction must be in [0, 1], got 1.5}}
func.func private @fraction_above_one() attributes {kv.s = #kv.strategy<cot_slice, fraction = 1.5>}

// -----

// A negative fraction budget.
// expected-error@+1 {{repair budget fraction must be in [0, 1], got -0.25}}
func.func private @negative_fraction() attributes {kv.r = #kv.repair<fraction = -0.25>}

// -----

// A deviation threshold must be positive: 0 would recompute every token
// that deviates at all.
// expected-error@+1 {{repair budget deviation must be a finite threshold > 0, got 0.0}}
func.func private @zero_deviation() attributes {kv.s = #kv.strategy<cot_slice, deviation = 0.0>}

// -----

// A negative deviation threshold.
// expected-error@+1 {{repair budget deviation must be a finite threshold > 0, got -0.1}}
func.func private @negative_deviation() attributes {kv.r = #kv.repair<deviation = -0.1>}

// -----

// An erratum recomputes nothing it reuses: a repair budget is meaningless.
// expected-error@+1 {{a repair budget needs the cot_slice strategy, not erratum}}
func.func private @repair_with_erratum() attributes {kv.s = #kv.strategy<erratum, deviation = 0.1>}

// -----

// An unknown kind of repair budget.
// expected-error@+1 {{unknown repair budget 'last_k' (expected first_k, fraction or deviation)}}
func.func private @unknown_repair() attributes {kv.s = #kv.strategy<cot_slice, last_k = 8>}

// -----

// A prefill view whose K/V shape differs from the model's.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @prefill_view(%m: !m, %c: !kv.cache<5x2x8xf32>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill' op view #0 does not match the model: the model computes 5 layers x 4 KV heads x head size 8, the cache holds 5 x 2 x 8}}
  %0, %1 = kv.prefill %m, %c, %t : !m, (!kv.cache<5x2x8xf32>), tensor<?xi32> -> !kv.cache<5x2x8xf32>, tensor<?x512xf32>
  return
}

// -----

// A prefill result type whose K/V shape differs from the model's.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @prefill_result(%m: !m, %c: !kv.cache<5x4x8xf32>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill' op result type does not match the model: the model computes 5 layers x 4 KV heads x head size 8, the cache holds 4 x 4 x 8}}
  %0, %1 = kv.prefill %m, %c, %t : !m, (!kv.cache<5x4x8xf32>), tensor<?xi32> -> !kv.cache<4x4x8xf32>, tensor<?x512xf32>
  return
}

// -----

// Logits have one column per vocabulary entry.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @prefill_logits_columns(%m: !m, %c: !kv.cache<5x4x8xf32>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill' op logits type 'tensor<?x500xf32>' does not match the model: expected 512 columns (the vocabulary)}}
  %0, %1 = kv.prefill %m, %c, %t : !m, (!kv.cache<5x4x8xf32>), tensor<?xi32> -> !kv.cache<5x4x8xf32>, tensor<?x500xf32>
  return
}

// -----

// With `last`, prefill returns one row of logits.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @prefill_last_rows(%m: !m, %c: !kv.cache<5x4x8xf32>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill' op returns the logits of the last token only, so its logits type needs 1 row, got 4}}
  %0, %1 = kv.prefill %m, %c, %t last : !m, (!kv.cache<5x4x8xf32>), tensor<?xi32> -> !kv.cache<5x4x8xf32>, tensor<4x512xf32>
  return
}

// -----

// Without `last`, prefill returns one row per token.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @prefill_rows(%m: !m, %c: !kv.cache<5x4x8xf32>, %t: tensor<4xi32>) {
  // expected-error@+1 {{'kv.prefill' op computes the logits of 4 tokens, but its logits type has 3 rows}}
  %0, %1 = kv.prefill %m, %c, %t : !m, (!kv.cache<5x4x8xf32>), tensor<4xi32> -> !kv.cache<5x4x8xf32>, tensor<3x512xf32>
  return
}

// -----

// A view list where only some views have an offset.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @mixed_offsets(%m: !m, %a: !kv.cache<5x4x8xf32>, %b: !kv.cache<5x4x8xf32>, %d: index, %t: tensor<?xi32>) {
  // expected-error@+1 {{either every view of the list has an offset or none has}}
  %0, %1 = kv.prefill %m, [%a + %d, %b], %t : !m, (!kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32>), tensor<?xi32> -> !kv.cache<5x4x8xf32>, tensor<?x512xf32>
  return
}

// -----

// In the generic form, the number of offsets must match the number of views.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @offset_count(%m: !m, %a: !kv.cache<5x4x8xf32>, %b: !kv.cache<5x4x8xf32>, %d: index, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill' op has 2 views but 1 offsets}}
  %0:2 = "kv.prefill"(%m, %a, %b, %d, %t) <{operandSegmentSizes = array<i32: 1, 2, 1, 1, 0>}> : (!m, !kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32>, index, tensor<?xi32>) -> (!kv.cache<5x4x8xf32>, tensor<?x512xf32>)
  return
}

// -----

// In the generic form, a prefill without any view.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @no_view(%m: !m, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill' op needs at least one view}}
  %0:2 = "kv.prefill"(%m, %t) <{operandSegmentSizes = array<i32: 1, 0, 0, 1, 0>}> : (!m, tensor<?xi32>) -> (!kv.cache<5x4x8xf32>, tensor<?x512xf32>)
  return
}

// -----

// In the generic form, a single operand (here the model) must get exactly one value.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @no_model(%c: !kv.cache<5x4x8xf32>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill' op operand group #0 is a single operand, but operandSegmentSizes gives it 0 values}}
  %0:2 = "kv.prefill"(%c, %t) <{operandSegmentSizes = array<i32: 0, 1, 0, 1, 0>}> : (!kv.cache<5x4x8xf32>, tensor<?xi32>) -> (!kv.cache<5x4x8xf32>, tensor<?x512xf32>)
  return
}

// -----

// kv.edit of a cache whose K/V shape differs from the model's.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
}
func.func @edit_shape(%m: !m, %c: !kv.cache<5x4x16xf32, @agent>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.edit' op cache type does not match the model: the model computes 5 layers x 4 KV heads x head size 8, the cache holds 5 x 4 x 16}}
  %0 = kv.edit %m, %c[@city] = %t strategy <exact> : !m, !kv.cache<5x4x16xf32, @agent>, tensor<?xi32>
  return
}

// -----

// kv.logits of a cache whose K/V shape differs from the model's.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @logits_shape(%m: !m, %c: !kv.cache<6x4x8xf32>) {
  // expected-error@+1 {{'kv.logits' op cache type does not match the model: the model computes 5 layers x 4 KV heads x head size 8, the cache holds 6 x 4 x 8}}
  %0 = kv.logits %m, %c[@answer] : !m, !kv.cache<6x4x8xf32> -> tensor<?x512xf32>
  return
}

// -----

// kv.logits with a logits type that is not one column per vocabulary entry.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @logits_columns(%m: !m, %c: !kv.cache<5x4x8xf32>) {
  // expected-error@+1 {{'kv.logits' op logits type 'tensor<8x?xf32>' does not match the model: expected 512 columns (the vocabulary)}}
  %0 = kv.logits %m, %c[@answer] : !m, !kv.cache<5x4x8xf32> -> tensor<8x?xf32>
  return
}

// -----

// kv.materialize of a cache whose K/V shape differs from the model's.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @materialize_shape(%m: !m, %c: !kv.cache<5x8x8xf32>) {
  // expected-error@+1 {{'kv.materialize' op cache type does not match the model: the model computes 5 layers x 4 KV heads x head size 8, the cache holds 5 x 8 x 8}}
  %0 = kv.materialize %m, %c : !m, !kv.cache<5x8x8xf32>
  return
}

// -----

// An attention query that is not [n][heads][head size].
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @attention_query(%m: !m, %q: tensor<?x4x8xf32>, %c: !kv.cache<5x4x8xf32>, %p: index) {
  // expected-error@+1 {{'kv.attention' op query type 'tensor<?x4x8xf32>' does not match the model: expected [n][8][8] (tokens x heads x head size)}}
  %0 = kv.attention %m, %q over %c layer 0 at %p : !m, (!kv.cache<5x4x8xf32>), tensor<?x4x8xf32> -> tensor<?x4x8xf32>
  return
}

// -----

// An attention layer the model does not have.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @attention_layer(%m: !m, %q: tensor<?x8x8xf32>, %c: !kv.cache<5x4x8xf32>, %p: index) {
  // expected-error@+1 {{'kv.attention' op layer 5 is out of range for a model with 5 layers}}
  %0 = kv.attention %m, %q over %c layer 5 at %p : !m, (!kv.cache<5x4x8xf32>), tensor<?x8x8xf32> -> tensor<?x8x8xf32>
  return
}

// -----

// A negative attention layer.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @attention_negative_layer(%m: !m, %q: tensor<?x8x8xf32>, %c: !kv.cache<5x4x8xf32>, %p: index) {
  // expected-error@+1 {{'kv.attention' op attribute 'layer' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  %0 = kv.attention %m, %q over %c layer -1 at %p : !m, (!kv.cache<5x4x8xf32>), tensor<?x8x8xf32> -> tensor<?x8x8xf32>
  return
}

// -----

// The attention result has the type of its query.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @attention_result(%m: !m, %q: tensor<?x8x8xf32>, %c: !kv.cache<5x4x8xf32>, %p: index) {
  // expected-error@+1 {{'kv.attention' op result type 'tensor<4x8x8xf32>' differs from the query type 'tensor<?x8x8xf32>'}}
  %0 = kv.attention %m, %q over %c layer 0 at %p : !m, (!kv.cache<5x4x8xf32>), tensor<?x8x8xf32> -> tensor<4x8x8xf32>
  return
}

// -----

// An attention view whose K/V shape differs from the model's.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @attention_view(%m: !m, %q: tensor<?x8x8xf32>, %a: !kv.cache<5x4x8xf32>, %b: !kv.cache<3x4x8xf32>, %p: index) {
  // expected-error@+1 {{'kv.attention' op view #1 does not match the model: the model computes 5 layers x 4 KV heads x head size 8, the cache holds 3 x 4 x 8}}
  %0 = kv.attention %m, %q over [%a + %p, %b + %p] layer 0 at %p : !m, (!kv.cache<5x4x8xf32>, !kv.cache<3x4x8xf32>), tensor<?x8x8xf32> -> tensor<?x8x8xf32>
  return
}

// -----

// A composed block must hold K/V of the shape of the cache.
func.func @compose_block(%c: !kv.cache<5x4x8xf32>, %b: !kv.cache<5x4x8xf16>) {
  // expected-error@+1 {{'kv.compose' op block type '!kv.cache<5x4x8xf16>' does not hold K/V of the shape of the cache '!kv.cache<5x4x8xf32>'}}
  %0 = kv.compose %c, %b : !kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf16>
  return
}

// -----

// A repair budget recomputes tokens, so compose needs the model.
func.func @compose_repair_without_model(%c: !kv.cache<5x4x8xf32>, %b: !kv.cache<5x4x8xf32>) {
  // expected-error@+1 {{'kv.compose' op needs the model (`using %model`) to spend a repair budget}}
  %0 = kv.compose %c, %b repair <first_k = 16> : !kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32>
  return
}

// -----

// A model without a repair budget is unused.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @compose_model_without_repair(%m: !m, %c: !kv.cache<5x4x8xf32>, %b: !kv.cache<5x4x8xf32>) {
  // expected-error@+1 {{'kv.compose' op takes a model only to spend a repair budget; add `repair <...>` or drop `using`}}
  %0 = kv.compose %c, %b using %m : !kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32>, !m
  return
}

// -----

// A repairing compose with a model of another K/V shape.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @compose_model_shape(%m: !m, %c: !kv.cache<5x2x8xf32>, %b: !kv.cache<5x2x8xf32>) {
  // expected-error@+1 {{'kv.compose' op cache type does not match the model: the model computes 5 layers x 4 KV heads x head size 8, the cache holds 5 x 2 x 8}}
  %0 = kv.compose %c, %b repair <fraction = 0.15> using %m : !kv.cache<5x2x8xf32>, !kv.cache<5x2x8xf32>, !m
  return
}

// -----

// Concatenated views must hold K/V of the shape of the result.
func.func @concat_shape(%a: !kv.cache<5x4x8xf32>, %b: !kv.cache<5x2x8xf32>) {
  // expected-error@+1 {{'kv.concat' op input #1 of type '!kv.cache<5x2x8xf32>' does not hold K/V of the shape of the result '!kv.cache<5x4x8xf32>'}}
  %0 = kv.concat %a, %b : !kv.cache<5x4x8xf32>, !kv.cache<5x2x8xf32> -> !kv.cache<5x4x8xf32>
  return
}

// -----

// In the generic form, a concatenation of nothing.
func.func @concat_nothing() {
  // expected-error@+1 {{'kv.concat' op needs at least one input}}
  %0 = "kv.concat"() : () -> !kv.cache<5x4x8xf32>
  return
}

// -----

// A selective recomputation of a fraction outside [0, 1].
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @selective_fraction(%m: !m, %c: !kv.cache<5x4x8xf32>, %b: index, %e: index) {
  // expected-error@+1 {{'kv.selective_recompute' op fraction must be in [0, 1], got 1.25}}
  %0 = kv.selective_recompute %m, %c[%b, %e] fraction 1.25 : !m, !kv.cache<5x4x8xf32>
  return
}

// -----

// A selective recomputation with both selections.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @selective_both(%m: !m, %c: !kv.cache<5x4x8xf32>, %b: index, %e: index) {
  // expected-error@+1 {{'kv.selective_recompute' op needs exactly one of `fraction f` and `deviation t`, got both}}
  %0 = kv.selective_recompute %m, %c[%b, %e] fraction 0.5 deviation 0.1 : !m, !kv.cache<5x4x8xf32>
  return
}

// -----

// A selective recomputation with no selection.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @selective_neither(%m: !m, %c: !kv.cache<5x4x8xf32>, %b: index, %e: index) {
  // expected-error@+1 {{'kv.selective_recompute' op needs exactly one of `fraction f` and `deviation t`, got neither}}
  %0 = kv.selective_recompute %m, %c[%b, %e] : !m, !kv.cache<5x4x8xf32>
  return
}

// -----

// A selective recomputation above a threshold that is not positive.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @selective_deviation(%m: !m, %c: !kv.cache<5x4x8xf32>, %b: index, %e: index) {
  // expected-error@+1 {{'kv.selective_recompute' op deviation threshold must be finite and > 0, got -0.5}}
  %0 = kv.selective_recompute %m, %c[%b, %e] deviation -0.5 : !m, !kv.cache<5x4x8xf32>
  return
}

// -----

// A selective recomputation of a cache whose K/V shape differs from the model's.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @selective_shape(%m: !m, %d: !kv.cache<5x1x8xf32>, %b: index, %e: index) {
  // expected-error@+1 {{'kv.selective_recompute' op cache type does not match the model: the model computes 5 layers x 4 KV heads x head size 8, the cache holds 5 x 1 x 8}}
  %0 = kv.selective_recompute %m, %d[%b, %e] fraction 0.15 : !m, !kv.cache<5x1x8xf32>
  return
}

// -----

// An odd number of rotary dimensions.
// expected-error@+1 {{invalid model type: rope_dim = 3 must be 0 (the whole head) or even and at most the head size 8}}
func.func private @odd_rope_dim(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope_dim = 3>)

// -----

// More rotary dimensions than a head has.
// expected-error@+1 {{invalid model type: rope_dim = 10 must be 0 (the whole head) or even and at most the head size 8}}
func.func private @rope_dim_beyond_head(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope_dim = 10>)

// -----

// A RoPE scale that is not positive.
// expected-error@+1 {{model rope_scale must be positive, got -2}}
func.func private @negative_rope_scale(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope_scale = -2.0>)

// -----

// One frequency factor per rotary pair: a head of 8 has 4 pairs.
// expected-error@+1 {{invalid model type: n_rope_freq_factors = 2 must be 0 or the number of rotary pairs 4}}
func.func private @rope_freqs_count(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope_freqs = [1.0, 2.0]>)

// -----

// A frequency factor of zero.
// expected-error@+1 {{invalid model type: rope_freq_factors[1] = 0 must be positive and finite}}
func.func private @zero_rope_freq(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope_dim = 4, rope_freqs = [1.0, 0.0]>)

// -----

// A static token tensor prefilled as a segment of another static size.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!c = !kv.cache<5x4x8xf32, @ctx>
kv.context @ctx {
  kv.segment @system kind(system) tokens(48)
}
func.func @wrong_size(%m: !m, %t: tensor<40xi32>) -> !c {
  %e = kv.empty : !c
  // expected-error@+1 {{'kv.prefill' op prefills 40 tokens as segment @system, which context @ctx declares with 48}}
  %c, %l = kv.prefill %m, %e, %t segment @system last
      : !m, (!c), tensor<40xi32> -> !c, tensor<1x512xf32>
  return %c : !c
}

// -----

// A loaded block whose cache type does not match the model.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @load_block_shape(%m: !model, %t: tensor<?xi32>) -> !kv.cache<4x4x8xf32> {
  // expected-error@+1 {{'kv.load_block' op result type does not match the model: the model computes 5 layers x 4 KV heads x head size 8, the cache holds 4 x 4 x 8}}
  %b = kv.load_block %m, %t : !model, tensor<?xi32> -> !kv.cache<4x4x8xf32>
  return %b : !kv.cache<4x4x8xf32>
}

// -----

// A loaded block labelled with a segment its context does not declare.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
kv.context @agent {
  kv.segment @tools kind(tool) tokens(16)
}
func.func @load_block_segment(%m: !model, %t: tensor<?xi32>) -> !kv.cache<5x4x8xf32, @agent> {
  // expected-error@+1 {{'kv.load_block' op segment @manual is not defined in context @agent}}
  %b = kv.load_block %m, %t segment @manual : !model, tensor<?xi32> -> !kv.cache<5x4x8xf32, @agent>
  return %b : !kv.cache<5x4x8xf32, @agent>
}

// -----

// A loaded block whose cache type names a context that is not defined.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @load_block_context(%m: !model, %t: tensor<?xi32>) -> !kv.cache<5x4x8xf32, @nowhere> {
  // expected-error@+1 {{'kv.load_block' op cache type names context @nowhere, which is not defined}}
  %b = kv.load_block %m, %t : !model, tensor<?xi32> -> !kv.cache<5x4x8xf32, @nowhere>
  return %b : !kv.cache<5x4x8xf32, @nowhere>
}

// -----

// A stored cache whose type does not match the model.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @store_block_shape(%m: !model, %c: !kv.cache<5x2x8xf32>) {
  // expected-error@+1 {{'kv.store_block' op cache type does not match the model: the model computes 5 layers x 4 KV heads x head size 8, the cache holds 5 x 2 x 8}}
  kv.store_block %m, %c : !model, !kv.cache<5x2x8xf32>
  return
}

// -----

// A static token tensor loaded as a segment of another static size.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
kv.context @agent {
  kv.segment @tools kind(tool) tokens(16)
}
func.func @load_block_wrong_size(%m: !model, %t: tensor<12xi32>) -> !kv.cache<5x4x8xf32, @agent> {
  // expected-error@+1 {{'kv.load_block' op loads 12 tokens as segment @tools, which context @agent declares with 16}}
  %b = kv.load_block %m, %t segment @tools : !model, tensor<12xi32> -> !kv.cache<5x4x8xf32, @agent>
  return %b : !kv.cache<5x4x8xf32, @agent>
}

// -----

// A chain needs at least two token lists (one is a kv.prefill).
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @chain_of_one(%m: !m, %c: !kv.cache<5x4x8xf32>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill_chain' op chains at least 2 token lists, got 1}}
  %0, %1 = kv.prefill_chain %m, %c, [%t] : !m, (!kv.cache<5x4x8xf32>), (tensor<?xi32>) -> !kv.cache<5x4x8xf32>, tensor<?x512xf32>
  return
}

// -----

// One segment label per token list.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
kv.context @agent {
  kv.segment @think kind(thought) tokens(?)
  kv.segment @answer kind(answer) tokens(?)
}
func.func @chain_labels(%m: !m, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill_chain' op has 2 token lists but 1 segment labels}}
  %0, %1 = kv.prefill_chain %m, %c, [%t, %t] segments [@answer] : !m, (!kv.cache<5x4x8xf32, @agent>), (tensor<?xi32>, tensor<?xi32>) -> !kv.cache<5x4x8xf32, @agent>, tensor<?x512xf32>
  return
}

// -----

// The logits are the last token list's: one row per token of it.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @chain_rows(%m: !m, %c: !kv.cache<5x4x8xf32>, %t: tensor<8xi32>, %a: tensor<4xi32>) {
  // expected-error@+1 {{'kv.prefill_chain' op computes the logits of 4 tokens (its last token list), but its logits type has 12 rows}}
  %0, %1 = kv.prefill_chain %m, %c, [%t, %a] : !m, (!kv.cache<5x4x8xf32>), (tensor<8xi32>, tensor<4xi32>) -> !kv.cache<5x4x8xf32>, tensor<12x512xf32>
  return
}

// -----

// With `last`, a chain returns one row of logits.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @chain_last_rows(%m: !m, %c: !kv.cache<5x4x8xf32>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill_chain' op returns the logits of the last token only, so its logits type needs 1 row, got 2}}
  %0, %1 = kv.prefill_chain %m, %c, [%t, %t] last : !m, (!kv.cache<5x4x8xf32>), (tensor<?xi32>, tensor<?xi32>) -> !kv.cache<5x4x8xf32>, tensor<2x512xf32>
  return
}

// -----

// A chain's view list follows kv.prefill's rules.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
func.func @chain_view(%m: !m, %c: !kv.cache<5x2x8xf32>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill_chain' op view #0 does not match the model: the model computes 5 layers x 4 KV heads x head size 8, the cache holds 5 x 2 x 8}}
  %0, %1 = kv.prefill_chain %m, %c, [%t, %t] : !m, (!kv.cache<5x2x8xf32>), (tensor<?xi32>, tensor<?xi32>) -> !kv.cache<5x2x8xf32>, tensor<?x512xf32>
  return
}

// -----

// Each label of a chain is a segment of the context, of its static size.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
kv.context @agent {
  kv.segment @think kind(thought) tokens(8)
  kv.segment @answer kind(answer) tokens(?)
}
func.func @chain_label_size(%m: !m, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<6xi32>, %a: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill_chain' op prefills 6 tokens as segment @think, which context @agent declares with 8}}
  %0, %1 = kv.prefill_chain %m, %c, [%t, %a] segments [@think, @answer] : !m, (!kv.cache<5x4x8xf32, @agent>), (tensor<6xi32>, tensor<?xi32>) -> !kv.cache<5x4x8xf32, @agent>, tensor<?x512xf32>
  return
}

// -----

// A chain's label must be a segment of the context.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
kv.context @agent {
  kv.segment @think kind(thought) tokens(?)
}
func.func @chain_unknown_segment(%m: !m, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill_chain' op segment @answer is not defined in context @agent}}
  %0, %1 = kv.prefill_chain %m, %c, [%t, %t] segments [@think, @answer] : !m, (!kv.cache<5x4x8xf32, @agent>), (tensor<?xi32>, tensor<?xi32>) -> !kv.cache<5x4x8xf32, @agent>, tensor<?x512xf32>
  return
}
