// RUN: kv-opt %s --kv-fuse-prefills -split-input-file | FileCheck %s
// RUN: kv-opt %s --kv-fuse-prefills="emit-statistics" -split-input-file -mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s --check-prefix=STATS

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32, @agent>

kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
  kv.segment @think1 kind(thought) tokens(?) deps(@city)
  kv.segment @think2 kind(thought) tokens(?) deps(@think1)
  kv.segment @answer kind(answer) tokens(?) deps(@think2)
}

// The recomputed chain of an edit: think1 over a view list with offsets,
// think2 and the answer each over the previous result. One op, which keeps
// the first view list and the answer's logits.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: (%[[M:.+]]: !model, %[[P:.+]]: !kv.cache<1x1x4xf32, @agent>, %[[T:.+]]: !kv.cache<1x1x4xf32, @agent>, %[[D:.+]]: index, %[[T1:.+]]: tensor<?xi32>, %[[T2:.+]]: tensor<?xi32>, %[[A:.+]]: tensor<?xi32>)
// CHECK:     %[[Z:.+]] = arith.constant 0 : index
// CHECK-NOT: kv.prefill %
// CHECK:     %[[R:.+]], %[[L:.+]] = kv.prefill_chain %[[M]], [%[[P]] + %[[Z]], %[[T]] + %[[D]]], [%[[T1]], %[[T2]], %[[A]]] segments [@think1, @think2, @answer] : !model, (!kv.cache<1x1x4xf32, @agent>, !kv.cache<1x1x4xf32, @agent>), (tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> !kv.cache<1x1x4xf32, @agent>, tensor<?x10xf32>
// CHECK-NOT: kv.prefill %
// CHECK:     return %[[R]], %[[L]]
// STATS: remark: kv-fuse-prefills: 2 prefills fused into a chain
func.func @chain(%m: !model, %p: !cache, %t: !cache, %d: index, %t1: tensor<?xi32>, %t2: tensor<?xi32>, %a: tensor<?xi32>) -> (!cache, tensor<?x10xf32>) {
  %c0 = arith.constant 0 : index
  %r1, %l1 = kv.prefill %m, [%p + %c0, %t + %d], %t1 segment @think1 last : !model, (!cache, !cache), tensor<?xi32> -> !cache, tensor<1x10xf32>
  %r2, %l2 = kv.prefill %m, %r1, %t2 segment @think2 last : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x10xf32>
  %r3, %l3 = kv.prefill %m, [%r2 + %c0], %a segment @answer : !model, (!cache), tensor<?xi32> -> !cache, tensor<?x10xf32>
  return %r3, %l3 : !cache, tensor<?x10xf32>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>

// Unlabelled prefills over an empty view; the consumer's `last` is kept.
// CHECK-LABEL: func.func @unlabelled
// CHECK:     kv.prefill_chain %{{.+}}, %{{.+}}, [%{{.+}}, %{{.+}}] last :
// CHECK-NOT: segments
// STATS: remark: kv-fuse-prefills: 1 prefills fused into a chain
func.func @unlabelled(%m: !model, %t1: tensor<3xi32>, %t2: tensor<2xi32>) -> tensor<1x10xf32> {
  %e = kv.empty : !cache
  %r1, %l1 = kv.prefill %m, %e, %t1 last : !model, (!cache), tensor<3xi32> -> !cache, tensor<1x10xf32>
  %r2, %l2 = kv.prefill %m, %r1, %t2 last : !model, (!cache), tensor<2xi32> -> !cache, tensor<1x10xf32>
  return %l2 : tensor<1x10xf32>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>

// The producer's logits are read: not fused.
// CHECK-LABEL: func.func @negative_logits_used
// CHECK-COUNT-2: kv.prefill %
// CHECK-NOT: kv.prefill_chain
// STATS: remark: kv-fuse-prefills: 0 prefills fused into a chain
func.func @negative_logits_used(%m: !model, %c: !cache, %t1: tensor<3xi32>, %t2: tensor<2xi32>) -> (tensor<1x10xf32>, tensor<1x10xf32>) {
  %r1, %l1 = kv.prefill %m, %c, %t1 last : !model, (!cache), tensor<3xi32> -> !cache, tensor<1x10xf32>
  %r2, %l2 = kv.prefill %m, %r1, %t2 last : !model, (!cache), tensor<2xi32> -> !cache, tensor<1x10xf32>
  return %l1, %l2 : tensor<1x10xf32>, tensor<1x10xf32>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>

// The producer's result is read twice: not fused.
// CHECK-LABEL: func.func @negative_result_used_twice
// CHECK-COUNT-2: kv.prefill %
// CHECK-NOT: kv.prefill_chain
// STATS: remark: kv-fuse-prefills: 0 prefills fused into a chain
func.func @negative_result_used_twice(%m: !model, %c: !cache, %t1: tensor<3xi32>, %t2: tensor<2xi32>) -> (!cache, tensor<1x10xf32>) {
  %r1, %l1 = kv.prefill %m, %c, %t1 last : !model, (!cache), tensor<3xi32> -> !cache, tensor<1x10xf32>
  %r2, %l2 = kv.prefill %m, %r1, %t2 last : !model, (!cache), tensor<2xi32> -> !cache, tensor<1x10xf32>
  return %r1, %l2 : !cache, tensor<1x10xf32>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>

// An explicit position, on the producer or on the consumer: not fused.
// CHECK-LABEL: func.func @negative_position
// CHECK-COUNT-4: kv.prefill %
// CHECK-NOT: kv.prefill_chain
// STATS: remark: kv-fuse-prefills: 0 prefills fused into a chain
func.func @negative_position(%m: !model, %c: !cache, %t1: tensor<3xi32>, %t2: tensor<2xi32>, %pos: index) -> (tensor<1x10xf32>, tensor<1x10xf32>) {
  %r1, %l1 = kv.prefill %m, %c, %t1 at %pos last : !model, (!cache), tensor<3xi32> -> !cache, tensor<1x10xf32>
  %r2, %l2 = kv.prefill %m, %r1, %t2 last : !model, (!cache), tensor<2xi32> -> !cache, tensor<1x10xf32>
  %r3, %l3 = kv.prefill %m, %c, %t1 last : !model, (!cache), tensor<3xi32> -> !cache, tensor<1x10xf32>
  %r4, %l4 = kv.prefill %m, %r3, %t2 at %pos last : !model, (!cache), tensor<2xi32> -> !cache, tensor<1x10xf32>
  return %l2, %l4 : tensor<1x10xf32>, tensor<1x10xf32>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>

// The consumer shifts the producer's result, or reads more than it: not
// fused.
// CHECK-LABEL: func.func @negative_offsets
// CHECK-COUNT-4: kv.prefill %
// CHECK-NOT: kv.prefill_chain
// STATS: remark: kv-fuse-prefills: 0 prefills fused into a chain
func.func @negative_offsets(%m: !model, %c: !cache, %t1: tensor<3xi32>, %t2: tensor<2xi32>, %d: index) -> (tensor<1x10xf32>, tensor<1x10xf32>) {
  %r1, %l1 = kv.prefill %m, %c, %t1 last : !model, (!cache), tensor<3xi32> -> !cache, tensor<1x10xf32>
  %r2, %l2 = kv.prefill %m, [%r1 + %d], %t2 last : !model, (!cache), tensor<2xi32> -> !cache, tensor<1x10xf32>
  %r3, %l3 = kv.prefill %m, %c, %t1 last : !model, (!cache), tensor<3xi32> -> !cache, tensor<1x10xf32>
  %r4, %l4 = kv.prefill %m, [%r3, %c], %t2 last : !model, (!cache, !cache), tensor<2xi32> -> !cache, tensor<1x10xf32>
  return %l2, %l4 : tensor<1x10xf32>, tensor<1x10xf32>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32, @agent>

kv.context @agent {
  kv.segment @think kind(thought) tokens(?)
  kv.segment @answer kind(answer) tokens(?)
}

// One list labelled and the other not: a chain labels all or none.
// CHECK-LABEL: func.func @negative_mixed_labels
// CHECK-COUNT-2: kv.prefill %
// CHECK-NOT: kv.prefill_chain
// STATS: remark: kv-fuse-prefills: 0 prefills fused into a chain
func.func @negative_mixed_labels(%m: !model, %c: !cache, %t1: tensor<3xi32>, %t2: tensor<2xi32>) -> tensor<1x10xf32> {
  %r1, %l1 = kv.prefill %m, %c, %t1 last : !model, (!cache), tensor<3xi32> -> !cache, tensor<1x10xf32>
  %r2, %l2 = kv.prefill %m, %r1, %t2 segment @answer last : !model, (!cache), tensor<2xi32> -> !cache, tensor<1x10xf32>
  return %l2 : tensor<1x10xf32>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>

// Plan work and setup work stay apart, so each is counted as before.
// CHECK-LABEL: func.func @negative_plan_and_setup
// CHECK-COUNT-2: kv.prefill %
// CHECK-NOT: kv.prefill_chain
// STATS: remark: kv-fuse-prefills: 0 prefills fused into a chain
func.func @negative_plan_and_setup(%m: !model, %c: !cache, %t1: tensor<3xi32>, %t2: tensor<2xi32>) -> tensor<1x10xf32> {
  %r1, %l1 = kv.prefill %m, %c, %t1 last : !model, (!cache), tensor<3xi32> -> !cache, tensor<1x10xf32>
  %r2, %l2 = kv.prefill %m, %r1, %t2 last : !model, (!cache), tensor<2xi32> -> !cache, tensor<1x10xf32> loc(fused<"kv.plan">["plan"])
  return %l2 : tensor<1x10xf32>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>

// The producer in another block (a region of an scf.if): not fused.
// CHECK-LABEL: func.func @negative_other_block
// CHECK-COUNT-2: kv.prefill %
// CHECK-NOT: kv.prefill_chain
// STATS: remark: kv-fuse-prefills: 0 prefills fused into a chain
func.func @negative_other_block(%m: !model, %c: !cache, %t1: tensor<3xi32>, %t2: tensor<2xi32>, %b: i1) -> !cache {
  %r1, %l1 = kv.prefill %m, %c, %t1 last : !model, (!cache), tensor<3xi32> -> !cache, tensor<1x10xf32>
  %r = scf.if %b -> !cache {
    %r2, %l2 = kv.prefill %m, %r1, %t2 last : !model, (!cache), tensor<2xi32> -> !cache, tensor<1x10xf32>
    scf.yield %r2 : !cache
  } else {
    scf.yield %c : !cache
  }
  return %r : !cache
}
