// Programs whose synthesized inputs would be unbounded (limits.test).
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32>
func.func @negative(%m: !model, %t: tensor<?xi32> {kv.sample_length = -1 : i64})
    -> tensor<1x512xf32> {
  %e = kv.empty : !cache
  %c, %l = kv.prefill %m, %e, %t last : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  return %l : tensor<1x512xf32>
}
func.func @huge(%m: !model, %t: tensor<?xi32> {kv.sample_length = 4611686018427387904 : i64})
    -> tensor<1x512xf32> {
  %e = kv.empty : !cache
  %c, %l = kv.prefill %m, %e, %t last : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  return %l : tensor<1x512xf32>
}
func.func @static_huge(%m: !model, %t: tensor<100000000xi32>) -> tensor<1x512xf32> {
  %e = kv.empty : !cache
  %c, %l = kv.prefill %m, %e, %t last : !model, (!cache), tensor<100000000xi32> -> !cache, tensor<1x512xf32>
  return %l : tensor<1x512xf32>
}
