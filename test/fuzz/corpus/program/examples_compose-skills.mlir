// Skill blocks (tool manuals, documents) prefilled once on their own, at
// position 0, then composed into a main context at new positions: a RoPE shift
// relocates each block, nothing is prefilled again.
//
//   kv-opt --kv-optimize examples/compose-skills.mlir
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4,
                   vocab = 512, rope = interleaved, theta = 10000.0, eps = 1.0e-05>
!cache = !kv.cache<5x4x8xf32>

// Each skill is prefilled alone; in a serving stack these caches are computed
// once and stored.
func.func @prefill_skill(%m: !model, %tokens: tensor<?xi32>) -> !cache {
  %empty = kv.empty : !cache
  %block, %l = kv.prefill %m, %empty, %tokens last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  return %block : !cache
}

// The main context (a system prompt), then three skills appended after it, then
// the user's question prefilled over the composed view. Returns the logits of
// the question's tokens.
//
//   kv-run examples/compose-skills.mlir --synthesize-inputs --compare-full-prefill
func.func @main(%m: !model, %system: tensor<64xi32> {kv.name = "system"},
                %search: tensor<?xi32> {kv.name = "search", kv.sample_length = 96 : i64},
                %calendar: tensor<?xi32> {kv.name = "calendar", kv.sample_length = 80 : i64},
                %email: tensor<?xi32> {kv.name = "email", kv.sample_length = 64 : i64},
                %question: tensor<24xi32> {kv.name = "question"})
    -> tensor<?x512xf32> {
  %empty = kv.empty : !cache
  %main, %l0 = kv.prefill %m, %empty, %system last
      : !model, (!cache), tensor<64xi32> -> !cache, tensor<1x512xf32>
  %b0 = func.call @prefill_skill(%m, %search) : (!model, tensor<?xi32>) -> !cache
  %b1 = func.call @prefill_skill(%m, %calendar) : (!model, tensor<?xi32>) -> !cache
  %b2 = func.call @prefill_skill(%m, %email) : (!model, tensor<?xi32>) -> !cache
  %with0 = kv.compose %main, %b0 : !cache, !cache
  %with1 = kv.compose %with0, %b1 : !cache, !cache
  %with2 = kv.compose %with1, %b2 : !cache, !cache
  %final, %logits = kv.prefill %m, %with2, %question
      : !model, (!cache), tensor<24xi32> -> !cache, tensor<?x512xf32>
  return %logits : tensor<?x512xf32>
}
