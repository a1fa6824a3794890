// The agent context of examples/agent-edit.mlir, edited with the strategies
// beyond exact and cot_slice (strategies.test):
//   @erratum     appends a correction before the answer instead of editing
//   @deviation   cot_slice that repairs the reused @tools tokens whose
//                relative layer-1 value deviation exceeds a threshold
//   @deviation_all  the same with a threshold no token exceeds... or all do
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

// The original context, segment by segment (setup work).
func.func private @build(%m: !model, %system: tensor<48xi32>,
                         %history: tensor<200xi32>, %city: tensor<?xi32>,
                         %tools: tensor<120xi32>, %think1: tensor<32xi32>,
                         %think2: tensor<32xi32>, %answer: tensor<8xi32>)
    -> !cache {
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
  return %c7 : !cache
}

// The old @city (12 tokens) is kept; a 10-token correction is prefilled after
// @think2 and the answer is recomputed after it. The reference is the edited
// context (@city replaced by the 16 new tokens: 456 tokens).
func.func @erratum(%m: !model, %system: tensor<48xi32> {kv.name = "system"},
                   %history: tensor<200xi32> {kv.name = "history"},
                   %city: tensor<?xi32> {kv.name = "city", kv.sample_length = 12 : i64},
                   %tools: tensor<120xi32> {kv.name = "tools"},
                   %think1: tensor<32xi32> {kv.name = "think1"},
                   %think2: tensor<32xi32> {kv.name = "think2"},
                   %answer: tensor<8xi32> {kv.name = "answer"},
                   %new_city: tensor<?xi32> {kv.name = "new_city", kv.sample_length = 16 : i64},
                   %fix: tensor<?xi32> {kv.name = "correction", kv.sample_length = 10 : i64})
    -> tensor<?x512xf32> {
  %c = func.call @build(%m, %system, %history, %city, %tools, %think1, %think2,
                        %answer)
      : (!model, tensor<48xi32>, tensor<200xi32>, tensor<?xi32>, tensor<120xi32>,
         tensor<32xi32>, tensor<32xi32>, tensor<8xi32>) -> !cache
  %e = kv.edit %m, %c[@city] = %new_city strategy <erratum> correction(%fix)
      : !model, !cache, tensor<?xi32>, tensor<?xi32>
  %logits = kv.logits %m, %e[@answer] : !model, !cache -> tensor<?x512xf32>
  return %logits : tensor<?x512xf32>
}

// cot_slice with a deviation repair of the reused @tools (120 tokens).
func.func @deviation(%m: !model, %system: tensor<48xi32> {kv.name = "system"},
                     %history: tensor<200xi32> {kv.name = "history"},
                     %city: tensor<?xi32> {kv.name = "city", kv.sample_length = 12 : i64},
                     %tools: tensor<120xi32> {kv.name = "tools"},
                     %think1: tensor<32xi32> {kv.name = "think1"},
                     %think2: tensor<32xi32> {kv.name = "think2"},
                     %answer: tensor<8xi32> {kv.name = "answer"},
                     %new_city: tensor<?xi32> {kv.name = "new_city", kv.sample_length = 16 : i64})
    -> tensor<?x512xf32> {
  %c = func.call @build(%m, %system, %history, %city, %tools, %think1, %think2,
                        %answer)
      : (!model, tensor<48xi32>, tensor<200xi32>, tensor<?xi32>, tensor<120xi32>,
         tensor<32xi32>, tensor<32xi32>, tensor<8xi32>) -> !cache
  %e = kv.edit %m, %c[@city] = %new_city strategy <cot_slice, deviation = 0.05>
      : !model, !cache, tensor<?xi32>
  %logits = kv.logits %m, %e[@answer] : !model, !cache -> tensor<?x512xf32>
  return %logits : tensor<?x512xf32>
}
