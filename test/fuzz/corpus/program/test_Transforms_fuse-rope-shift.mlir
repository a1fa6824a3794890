// RUN: kv-opt %s --kv-fuse-rope-shift -split-input-file | FileCheck %s
// RUN: kv-opt %s --kv-fuse-rope-shift="emit-statistics" -split-input-file -mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s --check-prefix=STATS

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>

// A shifted view feeding a prefill becomes an offset of that view.
// CHECK-LABEL: func.func @shift_into_prefill
// CHECK-SAME: (%[[M:.+]]: !model, %[[C:.+]]: !kv.cache<1x1x4xf32>, %[[D:.+]]: index, %[[T:.+]]: tensor<3xi32>)
// CHECK-NOT: kv.rope_shift
// CHECK:     kv.prefill %[[M]], [%[[C]] + %[[D]]], %[[T]] :
// STATS: remark: kv-fuse-rope-shift: 1 shifts fused, 0 concats flattened, 0 materialize bypassed, 0 materialize kept
func.func @shift_into_prefill(%m: !model, %c: !cache, %d: index, %t: tensor<3xi32>) -> !cache {
  %s = kv.rope_shift %c by %d : !cache
  %r, %l = kv.prefill %m, %s, %t : !model, (!cache), tensor<3xi32> -> !cache, tensor<3x10xf32>
  return %r : !cache
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>

// A concatenation of a plain view and a shifted one flattens into the view
// list; the plain view gets offset 0. Chains of shifts add up.
// CHECK-LABEL: func.func @concat_and_chain
// CHECK-SAME: (%[[M:.+]]: !model, %[[A:.+]]: !kv.cache<1x1x4xf32>, %[[B:.+]]: !kv.cache<1x1x4xf32>, %[[D1:.+]]: index, %[[D2:.+]]: index, %[[T:.+]]: tensor<3xi32>)
// CHECK:     %[[SUM:.+]] = arith.addi %[[D2]], %[[D1]] : index
// CHECK:     %[[ZERO:.+]] = arith.constant 0 : index
// CHECK:     kv.prefill %[[M]], [%[[A]] + %[[ZERO]], %[[B]] + %[[SUM]]], %[[T]] :
// CHECK-NOT: kv.rope_shift
// CHECK-NOT: kv.concat
// STATS: remark: kv-fuse-rope-shift: 2 shifts fused, 1 concats flattened, 0 materialize bypassed, 0 materialize kept
func.func @concat_and_chain(%m: !model, %a: !cache, %b: !cache, %d1: index, %d2: index, %t: tensor<3xi32>) -> tensor<3x10xf32> {
  %s1 = kv.rope_shift %b by %d1 : !cache
  %s2 = kv.rope_shift %s1 by %d2 : !cache
  %v = kv.concat %a, %s2 : !cache, !cache -> !cache
  %r, %l = kv.prefill %m, %v, %t : !model, (!cache), tensor<3xi32> -> !cache, tensor<3x10xf32>
  return %l : tensor<3x10xf32>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>

// An offset the view list already has adds to the shift.
// CHECK-LABEL: func.func @existing_offset
// CHECK-SAME: (%[[M:.+]]: !model, %[[A:.+]]: !kv.cache<1x1x4xf32>, %[[D:.+]]: index, %[[E:.+]]: index, %[[Q:.+]]: tensor<?x2x4xf32>, %[[P:.+]]: index)
// CHECK:     %[[SUM:.+]] = arith.addi %[[E]], %[[D]] : index
// CHECK:     kv.attention %[[M]], %[[Q]] over [%[[A]] + %[[SUM]]] layer 0 at %[[P]]
func.func @existing_offset(%m: !model, %a: !cache, %d: index, %e: index, %q: tensor<?x2x4xf32>, %pos: index) -> tensor<?x2x4xf32> {
  %s = kv.rope_shift %a by %d : !cache
  %o = kv.attention %m, %q over [%s + %e] layer 0 at %pos : !model, (!cache), tensor<?x2x4xf32> -> tensor<?x2x4xf32>
  return %o : tensor<?x2x4xf32>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>

// Attention needs no physical keys: it reads through a materialize. The
// materialize stays where its result is returned (an export).
// CHECK-LABEL: func.func @materialize
// CHECK-SAME: (%[[M:.+]]: !model, %[[A:.+]]: !kv.cache<1x1x4xf32>, %[[D:.+]]: index, %[[Q:.+]]: tensor<?x2x4xf32>, %[[P:.+]]: index)
// CHECK:     %[[S:.+]] = kv.rope_shift %[[A]] by %[[D]]
// CHECK:     %[[X:.+]] = kv.materialize %[[M]], %[[S]]
// CHECK:     kv.attention %[[M]], %[[Q]] over [%[[A]] + %[[D]]] layer 0 at %[[P]]
// CHECK:     return %{{.+}}, %[[X]]
// STATS: remark: kv-fuse-rope-shift: 1 shifts fused, 0 concats flattened, 1 materialize bypassed, 1 materialize kept
func.func @materialize(%m: !model, %a: !cache, %d: index, %q: tensor<?x2x4xf32>, %pos: index) -> (tensor<?x2x4xf32>, !cache) {
  %s = kv.rope_shift %a by %d : !cache
  %x = kv.materialize %m, %s : !model, !cache
  %o = kv.attention %m, %q over %x layer 0 at %pos : !model, (!cache), tensor<?x2x4xf32> -> tensor<?x2x4xf32>
  return %o, %x : tensor<?x2x4xf32>, !cache
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>

// A materialize nothing reads through is dropped with its shift.
// CHECK-LABEL: func.func @materialize_dropped
// CHECK-NOT: kv.materialize
// CHECK-NOT: kv.rope_shift
// CHECK:     kv.attention
// STATS: remark: kv-fuse-rope-shift: 1 shifts fused, 0 concats flattened, 1 materialize bypassed, 0 materialize kept
func.func @materialize_dropped(%m: !model, %a: !cache, %d: index, %q: tensor<?x2x4xf32>, %pos: index) -> tensor<?x2x4xf32> {
  %s = kv.rope_shift %a by %d : !cache
  %x = kv.materialize %m, %s : !model, !cache
  %o = kv.attention %m, %q over %x layer 0 at %pos : !model, (!cache), tensor<?x2x4xf32> -> tensor<?x2x4xf32>
  return %o : tensor<?x2x4xf32>
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>

// A shift that reaches no attention or prefill (it is returned) stays.
// CHECK-LABEL: func.func @negative_escaping_shift
// CHECK:     %[[S:.+]] = kv.rope_shift
// CHECK:     return %[[S]]
// STATS: remark: kv-fuse-rope-shift: 0 shifts fused, 0 concats flattened, 0 materialize bypassed, 0 materialize kept
func.func @negative_escaping_shift(%c: !cache, %d: index) -> !cache {
  %s = kv.rope_shift %c by %d : !cache
  return %s : !cache
}

// -----

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>

// A plain view list is left as it is.
// CHECK-LABEL: func.func @negative_plain_view
// CHECK:     kv.prefill %{{.+}}, %{{.+}}, %{{.+}} :
func.func @negative_plain_view(%m: !model, %c: !cache, %t: tensor<3xi32>) -> !cache {
  %r, %l = kv.prefill %m, %c, %t : !model, (!cache), tensor<3xi32> -> !cache, tensor<3x10xf32>
  return %r : !cache
}
