// Small programs for kv-run's error and edge-case tests (errors.test).
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4,
                   vocab = 512>
!cache = !kv.cache<5x4x8xf32, @ctx>

kv.context @ctx {
  kv.segment @a kind(system) tokens(?)
}

func.func @prefill(%m: !model, %t: tensor<?xi32> {kv.name = "t"})
    -> tensor<1x512xf32> {
  %c0 = kv.empty : !cache
  %c1, %l = kv.prefill %m, %c0, %t segment @a last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  return %l : tensor<1x512xf32>
}

func.func @fixed(%m: !model, %t: tensor<4xi32>) -> tensor<1x512xf32> {
  %c0 = kv.empty : !cache
  %c1, %l = kv.prefill %m, %c0, %t last
      : !model, (!cache), tensor<4xi32> -> !cache, tensor<1x512xf32>
  return %l : tensor<1x512xf32>
}

// Token ids as a dense constant, and a prefill of no tokens (the view
// unchanged, no rows).
func.func @constants(%m: !model) -> (!cache, tensor<?x512xf32>, index) {
  %t = arith.constant dense<[1, 2, 3]> : tensor<3xi32>
  %none = arith.constant dense<> : tensor<0xi32>
  %c0 = kv.empty : !cache
  %c1, %l1 = kv.prefill %m, %c0, %t
      : !model, (!cache), tensor<3xi32> -> !cache, tensor<?x512xf32>
  %c2, %l2 = kv.prefill %m, %c1, %none
      : !model, (!cache), tensor<0xi32> -> !cache, tensor<?x512xf32>
  %n = kv.length %c2 : !cache
  return %c2, %l1, %n : !cache, tensor<?x512xf32>, index
}

func.func @bad_slice(%m: !model, %t: tensor<?xi32>) -> !cache {
  %c0 = kv.empty : !cache
  %c1, %l = kv.prefill %m, %c0, %t last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  %b = arith.constant 0 : index
  %e = arith.constant 100 : index
  %s = kv.slice %c1[%b, %e] : !cache
  return %s : !cache
}

func.func @no_segment(%m: !model, %t: tensor<?xi32>) -> (index, index) {
  %c0 = kv.empty : !cache
  %c1, %l = kv.prefill %m, %c0, %t last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  %b, %e = kv.segment_bounds %c1[@a] : !cache
  return %b, %e : index, index
}

func.func @float_constant() -> f32 {
  %x = arith.constant 1.0 : f32
  return %x : f32
}

func.func @bad_token(%m: !model) -> tensor<1x512xf32> {
  %t = arith.constant dense<[1, 600]> : tensor<2xi32>
  %c0 = kv.empty : !cache
  %c1, %l = kv.prefill %m, %c0, %t last
      : !model, (!cache), tensor<2xi32> -> !cache, tensor<1x512xf32>
  return %l : tensor<1x512xf32>
}

func.func @recursive(%m: !model) -> index {
  %r = func.call @recursive(%m) : (!model) -> index
  return %r : index
}

// Attention of given queries over two runs, the second shifted, then over
// the same runs materialized (keys rewritten): both return [3][8][8].
func.func @attend(%m: !model, %prefix: tensor<20xi32>, %block: tensor<27xi32>,
                  %q: tensor<3x8x8xf32> {kv.name = "q"})
    -> (tensor<3x8x8xf32>, tensor<3x8x8xf32>) {
  %empty = kv.empty : !cache
  %a, %la = kv.prefill %m, %empty, %prefix last
      : !model, (!cache), tensor<20xi32> -> !cache, tensor<1x512xf32>
  %b, %lb = kv.prefill %m, %empty, %block last
      : !model, (!cache), tensor<27xi32> -> !cache, tensor<1x512xf32>
  %c0 = arith.constant 0 : index
  %c20 = arith.constant 20 : index
  %pos = arith.constant 50 : index
  %o1 = kv.attention %m, %q over [%a + %c0, %b + %c20] layer 2 at %pos
      : !model, (!cache, !cache), tensor<3x8x8xf32> -> tensor<3x8x8xf32>
  %shifted = kv.rope_shift %b by %c20 : !cache
  %both = kv.concat %a, %shifted : !cache, !cache -> !cache
  %physical = kv.materialize %m, %both : !model, !cache
  %o2 = kv.attention %m, %q over [%physical + %c0] layer 2 at %pos
      : !model, (!cache), tensor<3x8x8xf32> -> tensor<3x8x8xf32>
  return %o1, %o2 : tensor<3x8x8xf32>, tensor<3x8x8xf32>
}

func.func private @external(%m: !model) -> index
