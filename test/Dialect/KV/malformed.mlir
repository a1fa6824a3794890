// RUN: kv-opt %s --split-input-file --verify-diagnostics

// Malformed programs, one per case: what the parser or the verifier says,
// with its location, and that nothing crashes. Inputs that cannot be split
// (binary bytes, an empty file, truncated at the end, the parser guard's
// whole-file cases, stdin and kv-run) are in malformed/.

// A kv.context whose body has an argument.
// expected-error@+1 {{'kv.context' op region should have no arguments}}
kv.context @agent {
^bb0(%x: i32):
  kv.segment @city kind(fact) tokens(4)
}

// -----

// A kv.context whose body has two blocks.
// expected-error@+1 {{'kv.context' op expects region #0 to have 0 or 1 blocks}}
kv.context @agent {
  kv.segment @city kind(fact) tokens(4)
^bb1:
  kv.segment @think kind(thought) tokens(4) deps(@city)
}

// -----

// A kv.context without a symbol name.
// expected-error@+1 {{custom op 'kv.context' expected valid '@'-identifier for symbol name}}
kv.context {
  kv.segment @city kind(fact) tokens(4)
}

// -----

// A kv.edit without its strategy.
kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
}
func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<?xi32>) {
  // expected-error@+1 {{custom op 'kv.edit' expected 'strategy'}}
  %0 = kv.edit %m, %c[@city] = %t : !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>
  return
}

// -----

// A line of stray punctuation.
// expected-error@+1 {{expected operation name in quotes}}
}{ ][ %%% @@ ^^ ## !! >< ,, :: ->

// -----

// Plain text that is not MLIR.
// expected-error@+1 {{custom op 'Please' is unknown}}
Please edit the city in my agent context, thanks!

// -----

// A generic kv.attention whose operandSegmentSizes give the query no value (crashed the verifier once).
func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32>, %p: index) {
  // expected-error@+1 {{'kv.attention' op operand group #1 is a single operand, but operandSegmentSizes gives it 0 values}}
  %0 = "kv.attention"(%m, %c, %p) <{layer = 0 : i64, operandSegmentSizes = array<i32: 1, 0, 1, 0, 1>}> : (!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, !kv.cache<5x4x8xf32>, index) -> tensor<?x8x8xf32>
  return
}

// -----

// A generic kv.compose whose operandSegmentSizes give the cache two values and the block none (crashed the verifier once).
func.func @f(%c: !kv.cache<5x4x8xf32>) {
  // expected-error@+1 {{'kv.compose' op operand group #0 is a single operand, but operandSegmentSizes gives it 2 values}}
  %0 = "kv.compose"(%c, %c) <{operandSegmentSizes = array<i32: 2, 0, 0, 0>}> : (!kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32>) -> !kv.cache<5x4x8xf32>
  return
}

// -----

// A generic kv.edit without its strategy.
kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
}
func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.edit' op requires attribute 'strategy'}}
  %0 = "kv.edit"(%m, %c, %t) <{segment = @city}> : (!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>) -> !kv.cache<5x4x8xf32, @agent>
  return
}

// -----

// A generic kv.edit with two correction operands: an erratum takes one.
kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
  kv.segment @answer kind(answer) tokens(4)
}
func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.edit' op operand group starting at #3 requires 0 or 1 element, but found 2}}
  %0 = "kv.edit"(%m, %c, %t, %t, %t) <{segment = @city, strategy = #kv.strategy<erratum>}> : (!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> !kv.cache<5x4x8xf32, @agent>
  return
}

// -----

// A generic kv.prefill whose operandSegmentSizes give the model no value (crashed the verifier once).
func.func @f(%c: !kv.cache<5x4x8xf32>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill' op operand group #0 is a single operand, but operandSegmentSizes gives it 0 values}}
  %0:2 = "kv.prefill"(%c, %t) <{operandSegmentSizes = array<i32: 0, 1, 0, 1, 0>}> : (!kv.cache<5x4x8xf32>, tensor<?xi32>) -> (!kv.cache<5x4x8xf32>, tensor<?x512xf32>)
  return
}

// -----

// A generic kv.prefill without operandSegmentSizes.
func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32>, %t: tensor<?xi32>) {
  // expected-error@+1 {{'kv.prefill' op operand count (3) does not match with the total size (0) specified in attribute 'operandSegmentSizes'}}
  %0:2 = "kv.prefill"(%m, %c, %t) : (!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, !kv.cache<5x4x8xf32>, tensor<?xi32>) -> (!kv.cache<5x4x8xf32>, tensor<?x512xf32>)
  return
}

// -----

// A generic kv.segment outside a kv.context.
// expected-error@+1 {{'kv.segment' op expects parent op 'kv.context'}}
"kv.segment"() <{sym_name = "x"}> : () -> ()

// -----

// A cache dimension that does not fit in 64 bits.
// expected-error@+1 {{invalid dimension}}
func.func private @f(!kv.cache<99999999999999999999x4x8xf32>)

// -----

// A model size that does not fit in 64 bits.
// expected-error@+2 {{integer value too large}}
// expected-error@+1 {{failed to parse KV_ModelType parameter 'dim' which is to be a `int64_t`}}
func.func private @f(!kv.model<dim = 99999999999999999999, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>)

// -----

// A segment size that does not fit in 64 bits.
kv.context @agent {
  // expected-error@+1 {{custom op 'kv.segment' integer value too large}}
  kv.segment @city kind(fact) tokens(99999999999999999999)
}

// -----

// A NaN RoPE base given by its bit pattern.
// expected-error@+1 {{invalid model type: rope_theta = nan must be positive and finite}}
func.func private @f(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, theta = 0x7FF8000000000000>)

// -----

// A kv.segment at the top level.
// expected-error@+1 {{'kv.segment' op expects parent op 'kv.context'}}
kv.segment @city kind(fact) tokens(4)

// -----

// A segment kind the dialect does not define.
kv.context @agent {
  // expected-error@+1 {{custom op 'kv.segment' expected string or keyword containing one of the following enum values for attribute 'kind'}}
  kv.segment @city kind(weather) tokens(4)
}

// -----

// A type where the edit strategy should be.
kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
}
func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<?xi32>) {
  // expected-error@+1 {{expected '<'}}
  %0 = kv.edit %m, %c[@city] = %t strategy !kv.cache<5x4x8xf32> : !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>
  return
}

// -----

// A model type with an extra '>'.
// expected-error@+1 {{expected ')'}}
func.func private @f(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>>)

// -----

// An attribute the kv dialect does not define.
// expected-error@+1 {{unknown attribute `bar` in dialect `kv`}}
func.func private @f() attributes {kv.x = #kv.bar<>}

// -----

// An op the kv dialect does not define.
func.func @f(%c: !kv.cache<5x4x8xf32>) {
  // expected-error@+1 {{custom op 'kv.frobnicate' is unknown}}
  %0 = kv.frobnicate %c : !kv.cache<5x4x8xf32>
  return
}

// -----

// A type the kv dialect does not define.
// expected-error@+1 {{unknown  type `foo` in dialect `kv`}}
func.func private @f(!kv.foo)

// -----

// A model value used as a cache.
// expected-note@+1 {{prior use here}}
func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>) {
  // expected-error@+1 {{use of value '%m' expects different type than prior uses: '!kv.cache<5x4x8xf32>' vs '!kv.model<}}
  %n = kv.length %m : !kv.cache<5x4x8xf32>
  return
}

// -----

// Logits of type f16.
func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32>) {
  // expected-error@+1 {{'kv.logits' op result #0 must be 2D tensor of 32-bit float values, but got 'tensor<?x512xf16>'}}
  %0 = kv.logits %m, %c[@answer] : !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, !kv.cache<5x4x8xf32> -> tensor<?x512xf16>
  return
}

// -----

// A generic kv.length with two operands.
func.func @f(%c: !kv.cache<5x4x8xf32>) {
  // expected-error@+1 {{'kv.length' op requires a single operand}}
  %0 = "kv.length"(%c, %c) : (!kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32>) -> index
  return
}

// -----

// An i32 where a !kv.cache is expected.
func.func @f(%x: i32) -> index {
  // expected-error@+1 {{'kv.length' op operand #0 must be paged KV cache view, but got 'i32'}}
  %n = kv.length %x : i32
  return %n : index
}

// -----

// A generic kv.tokens with two results.
func.func @f(%c: !kv.cache<5x4x8xf32>) {
  // expected-error@+1 {{'kv.tokens' op requires one result}}
  %0:2 = "kv.tokens"(%c) : (!kv.cache<5x4x8xf32>) -> (tensor<?xi32>, tensor<?xi32>)
  return
}

// -----

// Two results bound to an op that has one.
func.func @f(%c: !kv.cache<5x4x8xf32>) {
  // expected-error@+1 {{operation defines 1 results but was provided 2 to bind}}
  %a, %b = kv.length %c : !kv.cache<5x4x8xf32>
  return
}

// -----

// Token ids of type f32.
func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32>, %t: tensor<?xf32>) {
  // expected-error@+1 {{'kv.prefill' op operand #2 must be 1D tensor of 32-bit signless integer values, but got 'tensor<?xf32>'}}
  %0, %1 = kv.prefill %m, %c, %t : !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, (!kv.cache<5x4x8xf32>), tensor<?xf32> -> !kv.cache<5x4x8xf32>, tensor<?x512xf32>
  return
}

// -----

// A 2-D tensor of token ids.
func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32>, %t: tensor<2x3xi32>) {
  // expected-error@+1 {{'kv.prefill' op operand #2 must be 1D tensor of 32-bit signless integer values, but got 'tensor<2x3xi32>'}}
  %0, %1 = kv.prefill %m, %c, %t : !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, (!kv.cache<5x4x8xf32>), tensor<2x3xi32> -> !kv.cache<5x4x8xf32>, tensor<?x512xf32>
  return
}
