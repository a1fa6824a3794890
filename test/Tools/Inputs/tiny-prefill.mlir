// The smallest program with GPU kernels: one prefill on a tiny model
// (test/Tools/nvvm-chips.test lowers it for every chip).
!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>
func.func @main(%m: !model, %t: tensor<4xi32>) -> tensor<1x10xf32> {
  %e = kv.empty : !cache
  %c, %l = kv.prefill %m, %e, %t last : !model, (!cache), tensor<4xi32> -> !cache, tensor<1x10xf32>
  return %l : tensor<1x10xf32>
}
