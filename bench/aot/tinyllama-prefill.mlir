// A prefill of 16 tokens returning the last logits, for TinyLlama's shape
// (the random-weight files of bench/peer/side-by-side.sh): what
// decode-by-cpu.sh builds for other CPUs with kv-aot and times greedy steps of.
!model = !kv.model<dim = 2048, hidden = 5632, layers = 22, heads = 32, kv_heads = 4,
                   vocab = 32000, rope = interleaved, theta = 10000.0, eps = 1.0e-05>
!cache = !kv.cache<22x4x64xf32>
func.func @main(%m: !model, %prompt: tensor<16xi32> {kv.name = "prompt"})
    -> tensor<1x32000xf32> {
  %empty = kv.empty : !cache
  %c, %l = kv.prefill %m, %empty, %prompt last
      : !model, (!cache), tensor<16xi32> -> !cache, tensor<1x32000xf32>
  return %l : tensor<1x32000xf32>
}
