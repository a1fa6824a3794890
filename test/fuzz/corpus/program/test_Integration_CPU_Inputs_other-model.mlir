// A program for a model of another shape (dim 128).
!model = !kv.model<dim = 128, hidden = 172, layers = 5, heads = 8, kv_heads = 4,
                   vocab = 512>
!cache = !kv.cache<5x4x16xf32>
func.func @main(%m: !model, %t: tensor<?xi32>) -> tensor<1x512xf32> {
  %c0 = kv.empty : !cache
  %c1, %l = kv.prefill %m, %c0, %t last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  return %l : tensor<1x512xf32>
}
