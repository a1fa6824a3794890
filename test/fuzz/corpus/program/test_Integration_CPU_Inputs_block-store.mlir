// A skill block named by its tokens: kv.load_block fetches it from the block
// store (kv-run --kv-store) or prefills and stores it; it is composed after a
// system prompt and the question is prefilled over the composed view.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4,
                   vocab = 512, rope = interleaved, theta = 10000.0, eps = 1.0e-05>
!cache = !kv.cache<5x4x8xf32>

func.func @main(%m: !model, %system: tensor<?xi32> {kv.name = "system"},
                %skill: tensor<?xi32> {kv.name = "skill"},
                %question: tensor<?xi32> {kv.name = "question"})
    -> tensor<?x512xf32> {
  %empty = kv.empty : !cache
  %main, %l0 = kv.prefill %m, %empty, %system last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  %block = kv.load_block %m, %skill : !model, tensor<?xi32> -> !cache
  %with = kv.compose %main, %block : !cache, !cache
  %final, %logits = kv.prefill %m, %with, %question
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<?x512xf32>
  return %logits : tensor<?x512xf32>
}

// The same block twice in one process: with the in-process store the second
// load is a hit. The first block is also stored explicitly (a second store
// of the same key).
func.func @twice(%m: !model, %system: tensor<?xi32> {kv.name = "system"},
                 %skill: tensor<?xi32> {kv.name = "skill"}) -> !cache {
  %empty = kv.empty : !cache
  %main, %l0 = kv.prefill %m, %empty, %system last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  %a = kv.load_block %m, %skill : !model, tensor<?xi32> -> !cache
  %b = kv.load_block %m, %skill : !model, tensor<?xi32> -> !cache
  kv.store_block %m, %a : !model, !cache
  %w0 = kv.compose %main, %a : !cache, !cache
  %w1 = kv.compose %w0, %b : !cache, !cache
  return %w1 : !cache
}

// The block loaded twice, the question asked after the second load (a hit
// with the in-process store): its logits equal those of a run without a store
// (both loads prefilled) bit for bit.
func.func @hit_then_ask(%m: !model, %system: tensor<?xi32> {kv.name = "system"},
                        %skill: tensor<?xi32> {kv.name = "skill"},
                        %question: tensor<?xi32> {kv.name = "question"})
    -> tensor<?x512xf32> {
  %empty = kv.empty : !cache
  %main, %l0 = kv.prefill %m, %empty, %system last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  %a = kv.load_block %m, %skill : !model, tensor<?xi32> -> !cache
  %b = kv.load_block %m, %skill : !model, tensor<?xi32> -> !cache
  %with = kv.compose %main, %b : !cache, !cache
  %final, %logits = kv.prefill %m, %with, %question
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<?x512xf32>
  return %logits : tensor<?x512xf32>
}

// Storing a composed cache is an error: its K/V depend on more than its
// tokens.
func.func @store_composed(%m: !model, %system: tensor<?xi32> {kv.name = "system"},
                          %skill: tensor<?xi32> {kv.name = "skill"}) -> !cache {
  %empty = kv.empty : !cache
  %main, %l0 = kv.prefill %m, %empty, %system last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  %a = kv.load_block %m, %skill : !model, tensor<?xi32> -> !cache
  %w = kv.compose %main, %a : !cache, !cache
  kv.store_block %m, %w : !model, !cache
  return %w : !cache
}
