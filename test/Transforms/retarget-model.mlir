// RUN: kv-opt %s -split-input-file --kv-retarget-model='model="!kv.model<dim = 64, hidden = 128, layers = 2, heads = 4, kv_heads = 2, vocab = 1462, rope = half, theta = 1000000.0, eps = 1.0e-06, qkv_bias = true>"' | FileCheck %s
// RUN: kv-opt %s -split-input-file --kv-retarget-model='model="!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>"' | FileCheck %s --check-prefix=SAME

// A program of stories260K's shape: the model, the caches (context kept) and
// the logits (of prefill and kv.logits, and the function's result) take the
// target's shape; token tensors are untouched.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32, @story>
kv.context @story {
  kv.segment @fact kind(fact) tokens(?)
  kv.segment @answer kind(answer) tokens(?) deps(@fact)
}
// CHECK: !model = !kv.model<dim = 64, hidden = 128, layers = 2, heads = 4, kv_heads = 2, vocab = 1462, rope = half, theta = 1.0e+06, eps = 1.0e-06, qkv_bias = true>
// CHECK-LABEL: func.func @edit
// CHECK-SAME: (%{{.+}}: !model, %{{.+}}: tensor<?xi32>, %{{.+}}: tensor<?xi32>, %{{.+}}: tensor<?xi32>) -> tensor<?x1462xf32>
// SAME-LABEL: func.func @edit
// SAME-SAME: -> tensor<?x512xf32>
func.func @edit(%m: !model, %fact: tensor<?xi32>, %answer: tensor<?xi32>,
                 %new: tensor<?xi32>) -> tensor<?x512xf32> {
  // CHECK: kv.empty : !kv.cache<2x2x16xf32, @story>
  // SAME: kv.empty : !kv.cache<5x4x8xf32, @story>
  %c0 = kv.empty : !cache
  // CHECK: kv.prefill {{.+}} -> !kv.cache<2x2x16xf32, @story>, tensor<1x1462xf32>
  %c1, %l1 = kv.prefill %m, %c0, %fact segment @fact last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  %c2, %l2 = kv.prefill %m, %c1, %answer segment @answer last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  %e = kv.edit %m, %c2[@fact] = %new strategy <cot_slice>
      : !model, !cache, tensor<?xi32>
  // CHECK: kv.logits {{.+}} -> tensor<?x1462xf32>
  %l = kv.logits %m, %e[@answer] : !model, !cache -> tensor<?x512xf32>
  // CHECK: return {{.+}} : tensor<?x1462xf32>
  return %l : tensor<?x512xf32>
}

// -----

// Logits returned by a callee: the callee's result and the call's result are
// retyped together; a caller that returns them too.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32>
// CHECK-LABEL: func.func private @prefill
// CHECK-SAME: -> (!kv.cache<2x2x16xf32>, tensor<3x1462xf32>)
func.func private @prefill(%m: !model, %t: tensor<3xi32>) -> (!cache, tensor<3x512xf32>) {
  %c0 = kv.empty : !cache
  %c1, %l = kv.prefill %m, %c0, %t : !model, (!cache), tensor<3xi32> -> !cache, tensor<3x512xf32>
  return %c1, %l : !cache, tensor<3x512xf32>
}
// CHECK-LABEL: func.func @caller
// CHECK-SAME: -> tensor<3x1462xf32>
// CHECK: call @prefill({{.+}}) : (!model, tensor<3xi32>) -> (!kv.cache<2x2x16xf32>, tensor<3x1462xf32>)
func.func @caller(%m: !model, %t: tensor<3xi32>) -> tensor<3x512xf32> {
  %c, %l = func.call @prefill(%m, %t) : (!model, tensor<3xi32>) -> (!cache, tensor<3x512xf32>)
  return %l : tensor<3x512xf32>
}
