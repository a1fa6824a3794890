// Caches of two element types in one program (kv-dtype.test): one pool keeps
// one element type, so kv-run refuses it.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4,
                   vocab = 512>

func.func @main(%m: !model, %t: tensor<?xi32> {kv.name = "t"})
    -> (tensor<1x512xf32>, tensor<1x512xf32>) {
  %h = kv.empty : !kv.cache<5x4x8xf16>
  %h1, %l = kv.prefill %m, %h, %t last
      : !model, (!kv.cache<5x4x8xf16>), tensor<?xi32> -> !kv.cache<5x4x8xf16>, tensor<1x512xf32>
  %f = kv.empty : !kv.cache<5x4x8xf32>
  %f1, %l2 = kv.prefill %m, %f, %t last
      : !model, (!kv.cache<5x4x8xf32>), tensor<?xi32> -> !kv.cache<5x4x8xf32>, tensor<1x512xf32>
  return %l, %l2 : tensor<1x512xf32>, tensor<1x512xf32>
}
