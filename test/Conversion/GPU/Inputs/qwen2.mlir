// A program on a Qwen2-shaped model: biases on Q, K and V, half (neox) RoPE,
// its frequency base, GQA (qwen2-ptxas.test).
!model = !kv.model<dim = 128, hidden = 256, layers = 2, heads = 4, kv_heads = 2, vocab = 64, rope = neox, theta = 1000000.0, eps = 1.0e-06, qkv_bias = true>
func.func @main(%m: !model, %t: tensor<4xi32>) -> tensor<1x64xf32> {
  %c0 = kv.empty : !kv.cache<2x2x32xf32>
  %c1, %l = kv.prefill %m, %c0, %t last
      : !model, (!kv.cache<2x2x32xf32>), tensor<4xi32> -> !kv.cache<2x2x32xf32>, tensor<1x64xf32>
  return %l : tensor<1x64xf32>
}
