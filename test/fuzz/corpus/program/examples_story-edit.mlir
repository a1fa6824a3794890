// A short story whose continuation depends on one fact, and an edit of that
// fact: the hero of a TinyStories-style opening. Shapes are those of
// stories260K (../shared/models); every segment has a dynamic length, so the
// text arguments can be any length.
//
//   kv-run examples/story-edit.mlir --model ../shared/models/stories260K.bin \
//       --text opening="Once upon a time, there was a little" --bos opening \
//       --text hero="girl named Lily." --text new_hero="boy named Tim." \
//       --text notes="She loved to play outside in the park." \
//       --text answer="One day," --compare-full-prefill --attribute
//
// The context: the opening, the hero (the fact that is edited), notes that
// the model read after the hero (reused, shifted, by cot_slice: they do not
// declare a dependency on it), and the answer, which depends on the hero.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4,
                   vocab = 512, rope = interleaved, theta = 10000.0, eps = 1.0e-05>
!cache = !kv.cache<5x4x8xf32, @story>

kv.context @story {
  kv.segment @opening kind(history) tokens(?)
  kv.segment @hero kind(fact) tokens(?)
  kv.segment @notes kind(history) tokens(?)
  kv.segment @answer kind(answer) tokens(?) deps(@hero, @notes)
}

// Builds the cache segment by segment, replaces the hero, and returns the
// answer's logits under the edited context.
func.func @main(%m: !model, %opening: tensor<?xi32> {kv.name = "opening"},
                %hero: tensor<?xi32> {kv.name = "hero"},
                %notes: tensor<?xi32> {kv.name = "notes"},
                %answer: tensor<?xi32> {kv.name = "answer"},
                %new_hero: tensor<?xi32> {kv.name = "new_hero"})
    -> tensor<?x512xf32> {
  %c0 = kv.empty : !cache
  %c1, %l1 = kv.prefill %m, %c0, %opening segment @opening last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  %c2, %l2 = kv.prefill %m, %c1, %hero segment @hero last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  %c3, %l3 = kv.prefill %m, %c2, %notes segment @notes last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  %c4, %l4 = kv.prefill %m, %c3, %answer segment @answer last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  %edited = kv.edit %m, %c4[@hero] = %new_hero strategy <cot_slice>
      : !model, !cache, tensor<?xi32>
  %logits = kv.logits %m, %edited[@answer] : !model, !cache -> tensor<?x512xf32>
  return %logits : tensor<?x512xf32>
}
