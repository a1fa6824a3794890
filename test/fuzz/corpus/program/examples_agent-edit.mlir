// An agent context whose chain of thought depends on one fact, and an edit of
// that fact. Shapes are those of stories260K (../shared/models), which is also
// the shape of kv-run's embedded default model.
//
//   kv-opt --kv-optimize examples/agent-edit.mlir
//
// The context: a system prompt, a conversation history, the fact (@city, whose
// length is only known at run time), a tool manual, two thoughts that reason
// from the fact, and an answer that reads the last thought and the tools.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4,
                   vocab = 512, rope = interleaved, theta = 10000.0, eps = 1.0e-05>
!cache = !kv.cache<5x4x8xf32, @agent>

kv.context @agent {
  kv.segment @system kind(system) tokens(48)
  kv.segment @history kind(history) tokens(200)
  kv.segment @city kind(fact) tokens(?)
  kv.segment @tools kind(tool) tokens(120)
  kv.segment @think1 kind(thought) tokens(32) deps(@city)
  kv.segment @think2 kind(thought) tokens(32) deps(@think1)
  kv.segment @answer kind(answer) tokens(8) deps(@think2, @tools)
}

// Builds the cache segment by segment, replaces the fact, and returns the
// answer's logits under the edited context.
//
// kv-run binds the token arguments by position (`--input arg3=FILE`) or by
// their `kv.name` (`--input city=FILE`); with --synthesize-inputs it makes
// seeded random tokens, `kv.sample_length` of them for a dynamic argument (the
// new @city has 16 tokens, the old one 12, so the edit shifts @tools by 4
// positions):
//
//   kv-run examples/agent-edit.mlir --synthesize-inputs --compare-full-prefill
func.func @main(%m: !model, %system: tensor<48xi32> {kv.name = "system"},
                %history: tensor<200xi32> {kv.name = "history"},
                %city: tensor<?xi32> {kv.name = "city", kv.sample_length = 12 : i64},
                %tools: tensor<120xi32> {kv.name = "tools"},
                %think1: tensor<32xi32> {kv.name = "think1"},
                %think2: tensor<32xi32> {kv.name = "think2"},
                %answer: tensor<8xi32> {kv.name = "answer"},
                %new_city: tensor<?xi32> {kv.name = "new_city", kv.sample_length = 16 : i64})
    -> tensor<?x512xf32> {
  %c0 = kv.empty : !cache
  %c1, %l1 = kv.prefill %m, %c0, %system segment @system last
      : !model, (!cache), tensor<48xi32> -> !cache, tensor<1x512xf32>
  %c2, %l2 = kv.prefill %m, %c1, %history segment @history last
      : !model, (!cache), tensor<200xi32> -> !cache, tensor<1x512xf32>
  %c3, %l3 = kv.prefill %m, %c2, %city segment @city last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  %c4, %l4 = kv.prefill %m, %c3, %tools segment @tools last
      : !model, (!cache), tensor<120xi32> -> !cache, tensor<1x512xf32>
  %c5, %l5 = kv.prefill %m, %c4, %think1 segment @think1 last
      : !model, (!cache), tensor<32xi32> -> !cache, tensor<1x512xf32>
  %c6, %l6 = kv.prefill %m, %c5, %think2 segment @think2 last
      : !model, (!cache), tensor<32xi32> -> !cache, tensor<1x512xf32>
  %c7, %l7 = kv.prefill %m, %c6, %answer segment @answer last
      : !model, (!cache), tensor<8xi32> -> !cache, tensor<1x512xf32>

  %edited = kv.edit %m, %c7[@city] = %new_city strategy <cot_slice>
      : !model, !cache, tensor<?xi32>
  %logits = kv.logits %m, %edited[@answer] : !model, !cache -> tensor<?x512xf32>
  return %logits : tensor<?x512xf32>
}
