// A context edited with cot_slice and a deviation repair, for a model of
// dim 256 (rows of whole K-quant blocks): quantized.test runs it on files of
// every format made by kv-convert from one synthetic model. The repair
// prefills the first layer of the reused tokens alone (a forward of fewer
// layers than the model has).
!model = !kv.model<dim = 256, hidden = 768, layers = 4, heads = 4, kv_heads = 2,
                   vocab = 512>
!cache = !kv.cache<4x2x64xf32, @ctx>

kv.context @ctx {
  kv.segment @prefix kind(history) tokens(40)
  kv.segment @fact kind(fact) tokens(?)
  kv.segment @notes kind(history) tokens(30)
  kv.segment @answer kind(answer) tokens(6) deps(@fact, @notes)
}

func.func @main(%m: !model, %prefix: tensor<40xi32> {kv.name = "prefix"},
                %fact: tensor<?xi32> {kv.name = "fact", kv.sample_length = 8 : i64},
                %notes: tensor<30xi32> {kv.name = "notes"},
                %answer: tensor<6xi32> {kv.name = "answer"},
                %new_fact: tensor<?xi32> {kv.name = "new_fact", kv.sample_length = 11 : i64})
    -> tensor<?x512xf32> {
  %c0 = kv.empty : !cache
  %c1, %l1 = kv.prefill %m, %c0, %prefix segment @prefix last
      : !model, (!cache), tensor<40xi32> -> !cache, tensor<1x512xf32>
  %c2, %l2 = kv.prefill %m, %c1, %fact segment @fact last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  %c3, %l3 = kv.prefill %m, %c2, %notes segment @notes last
      : !model, (!cache), tensor<30xi32> -> !cache, tensor<1x512xf32>
  %c4, %l4 = kv.prefill %m, %c3, %answer segment @answer last
      : !model, (!cache), tensor<6xi32> -> !cache, tensor<1x512xf32>
  %e = kv.edit %m, %c4[@fact] = %new_fact strategy <cot_slice, deviation = 0.05>
      : !model, !cache, tensor<?xi32>
  %logits = kv.logits %m, %e[@answer] : !model, !cache -> tensor<?x512xf32>
  return %logits : tensor<?x512xf32>
}
