// A program whose model has rows of 256 elements, whole blocks of every
// weight format (K-quants included): quantized-matmul-ptxas.test compiles it
// for weights of each format.
!model = !kv.model<dim = 256, hidden = 512, layers = 3, heads = 2, kv_heads = 1, vocab = 32>
func.func @main(%m: !model, %t: tensor<4xi32>) -> tensor<1x32xf32> {
  %c0 = kv.empty : !kv.cache<3x1x128xf32>
  %c1, %l = kv.prefill %m, %c0, %t last
      : !model, (!kv.cache<3x1x128xf32>), tensor<4xi32> -> !kv.cache<3x1x128xf32>, tensor<1x32xf32>
  return %l : tensor<1x32xf32>
}
