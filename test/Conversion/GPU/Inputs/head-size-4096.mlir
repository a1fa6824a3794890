// A program whose model the GPU forward refuses: head size 4096 exceeds the
// 1024 threads of an attention block (kv-aot-ptxas.test).
!model = !kv.model<dim = 4096, hidden = 64, layers = 1, heads = 1, kv_heads = 1, vocab = 16>
func.func @main(%m: !model, %t: tensor<4xi32>) -> tensor<1x16xf32> {
  %c0 = kv.empty : !kv.cache<1x1x4096xf32>
  %c1, %l = kv.prefill %m, %c0, %t last
      : !model, (!kv.cache<1x1x4096xf32>), tensor<4xi32> -> !kv.cache<1x1x4096xf32>, tensor<1x16xf32>
  return %l : tensor<1x16xf32>
}
