// What kv-retarget-model cannot retype soundly is a diagnostic at the op or
// the type, and the program is left as it was.
// RUN: kv-opt %s -split-input-file -verify-diagnostics --kv-retarget-model='model="!kv.model<dim = 64, hidden = 128, layers = 2, heads = 4, kv_heads = 2, vocab = 1462, rope = half, theta = 1000000.0, eps = 1.0e-06, qkv_bias = true>"'

// Logits used by an op whose result type the pass would have to derive.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32>
func.func @negative_logits_user(%m: !model, %t: tensor<3xi32>) -> tensor<1x512xf32> {
  %c0 = kv.empty : !cache
  // expected-note @below {{the logits}}
  %c1, %l = kv.prefill %m, %c0, %t : !model, (!cache), tensor<3xi32> -> !cache, tensor<3x512xf32>
  // expected-error @below {{'tensor.extract_slice' op uses logits over the vocabulary of 512 ('tensor<3x512xf32>'): kv-retarget-model cannot derive its types for another vocabulary}}
  %row = tensor.extract_slice %l[2, 0] [1, 512] [1, 1] : tensor<3x512xf32> to tensor<1x512xf32>
  return %row : tensor<1x512xf32>
}

// -----

// A return that puts something other than logits where another return puts
// logits.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32>
func.func @negative_mixed_returns(%m: !model, %t: tensor<3xi32>, %x: tensor<3x512xf32>, %b: i1) -> tensor<3x512xf32> {
  cf.cond_br %b, ^logits, ^other
^logits:
  %c0 = kv.empty : !cache
  %c1, %l = kv.prefill %m, %c0, %t : !model, (!cache), tensor<3xi32> -> !cache, tensor<3x512xf32>
  return %l : tensor<3x512xf32>
^other:
  // expected-error @below {{'func.return' op returns a value that is not logits as result 0 of @negative_mixed_returns}}
  return %x : tensor<3x512xf32>
}

// -----

// Two model types: which one the target replaces is anyone's guess.
// expected-note @below {{the first}}
func.func @negative_two_models(%a: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>,
// expected-error @below {{the program uses two model types}}
                               %b: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 256>) {
  return
}

// -----

// A cache that does not hold K/V of the program's model.
func.func @negative_stray_cache(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>) {
  // expected-error @below {{'!kv.cache<2x2x8xf32>' does not hold K/V of the program's model (5 layers x 4 KV heads x head size 8): kv-retarget-model cannot tell what it becomes}}
  %c = kv.empty : !kv.cache<2x2x8xf32>
  return
}

// -----

// Constant token ids are the program's own: one beyond the target vocabulary
// cannot be retargeted.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 2048>
!cache = !kv.cache<5x4x8xf32>
func.func @negative_constant_tokens(%m: !model) -> !cache {
  // expected-error @below {{token id 1500 is out of the target model's vocabulary of 1462}}
  %t = arith.constant dense<[1, 1500]> : tensor<2xi32>
  %c0 = kv.empty : !cache
  // expected-note @below {{used here}}
  %c1, %l = kv.prefill %m, %c0, %t : !model, (!cache), tensor<2xi32> -> !cache, tensor<2x2048xf32>
  return %c1 : !cache
}

// -----

// kv.attention's queries are heads x head size of the program's model.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32>
func.func @negative_attention(%m: !model, %q: tensor<?x8x8xf32>, %a: !cache, %pos: index) -> tensor<?x8x8xf32> {
  // expected-error @below {{'kv.attention' op takes queries of 8 heads x head size 8 ('tensor<?x8x8xf32>'), the target model has 4 x 16: kv-retarget-model does not retype query tensors}}
  %o = kv.attention %m, %q over %a layer 0 at %pos : !model, (!cache), tensor<?x8x8xf32> -> tensor<?x8x8xf32>
  return %o : tensor<?x8x8xf32>
}
