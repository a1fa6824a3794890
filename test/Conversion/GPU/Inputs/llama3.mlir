// A program on a Llama-3-shaped model: interleaved (normal) RoPE with base
// 500000 and one frequency divisor per rotary pair, as a GGUF rope_freqs
// tensor holds them (qwen2-ptxas.test).
!model = !kv.model<dim = 128, hidden = 256, layers = 2, heads = 4, kv_heads = 2, vocab = 64, rope = normal, theta = 500000.0, eps = 1.0e-05, rope_freqs = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.5, 3.0, 8.0, 8.0, 8.0, 8.0]>
func.func @main(%m: !model, %t: tensor<4xi32>) -> tensor<1x64xf32> {
  %c0 = kv.empty : !kv.cache<2x2x32xf32>
  %c1, %l = kv.prefill %m, %c0, %t last
      : !model, (!kv.cache<2x2x32xf32>), tensor<4xi32> -> !kv.cache<2x2x32xf32>, tensor<1x64xf32>
  return %l : tensor<1x64xf32>
}
