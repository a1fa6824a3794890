// RUN: kv-opt %s -canonicalize="test-convergence" -split-input-file | FileCheck %s

!cache = !kv.cache<5x4x8xf32>

// A shift by zero is the identity.
// CHECK-LABEL: func.func @shift_by_zero
// CHECK-SAME: (%[[C:.+]]: !kv.cache<5x4x8xf32>)
// CHECK-NOT: kv.rope_shift
// CHECK: return %[[C]]
func.func @shift_by_zero(%c: !cache) -> !cache {
  %zero = arith.constant 0 : index
  %s = kv.rope_shift %c by %zero : !cache
  return %s : !cache
}

// -----

!cache = !kv.cache<5x4x8xf32>

// Two constant shifts fold into one whose offset is their sum.
// CHECK-LABEL: func.func @shift_of_shift_constant
// CHECK-SAME: (%[[C:.+]]: !kv.cache<5x4x8xf32>)
// CHECK: %[[SEVEN:.+]] = arith.constant 7 : index
// CHECK: %[[S:.+]] = kv.rope_shift %[[C]] by %[[SEVEN]]
// CHECK-NOT: kv.rope_shift
// CHECK: return %[[S]]
func.func @shift_of_shift_constant(%c: !cache) -> !cache {
  %a = arith.constant 3 : index
  %b = arith.constant 4 : index
  %s0 = kv.rope_shift %c by %a : !cache
  %s1 = kv.rope_shift %s0 by %b : !cache
  return %s1 : !cache
}

// -----

!cache = !kv.cache<5x4x8xf32>

// Dynamic offsets add up at run time: one shift remains.
// CHECK-LABEL: func.func @shift_of_shift_dynamic
// CHECK-SAME: (%[[C:.+]]: !kv.cache<5x4x8xf32>, %[[A:.+]]: index, %[[B:.+]]: index)
// CHECK: %[[SUM:.+]] = arith.addi %[[A]], %[[B]] : index
// CHECK: %[[S:.+]] = kv.rope_shift %[[C]] by %[[SUM]]
// CHECK-NOT: kv.rope_shift
// CHECK: return %[[S]]
func.func @shift_of_shift_dynamic(%c: !cache, %a: index, %b: index) -> !cache {
  %s0 = kv.rope_shift %c by %a : !cache
  %s1 = kv.rope_shift %s0 by %b : !cache
  return %s1 : !cache
}

// -----

!cache = !kv.cache<5x4x8xf32>

// Shifts that cancel out disappear.
// CHECK-LABEL: func.func @shifts_cancel
// CHECK-SAME: (%[[C:.+]]: !kv.cache<5x4x8xf32>)
// CHECK-NOT: kv.rope_shift
// CHECK: return %[[C]]
func.func @shifts_cancel(%c: !cache) -> !cache {
  %a = arith.constant 5 : index
  %b = arith.constant -5 : index
  %s0 = kv.rope_shift %c by %a : !cache
  %s1 = kv.rope_shift %s0 by %b : !cache
  return %s1 : !cache
}

// -----

!cache = !kv.cache<5x4x8xf32>

// A dynamic shift stays.
// CHECK-LABEL: func.func @no_fold_dynamic_shift
// CHECK: kv.rope_shift
func.func @no_fold_dynamic_shift(%c: !cache, %d: index) -> !cache {
  %s = kv.rope_shift %c by %d : !cache
  return %s : !cache
}

// -----

!cache = !kv.cache<5x4x8xf32>

// The concatenation of one view is that view.
// CHECK-LABEL: func.func @concat_one
// CHECK-SAME: (%[[C:.+]]: !kv.cache<5x4x8xf32>)
// CHECK-NOT: kv.concat
// CHECK: return %[[C]]
func.func @concat_one(%c: !cache) -> !cache {
  %r = kv.concat %c : !cache -> !cache
  return %r : !cache
}

// -----

// A concatenation of one view that changes the context name is kept.
// CHECK-LABEL: func.func @no_fold_concat_retyped
// CHECK: kv.concat
kv.context @ctx {
  kv.segment @a kind(other) tokens(?)
}
func.func @no_fold_concat_retyped(%c: !kv.cache<5x4x8xf32>) -> !kv.cache<5x4x8xf32, @ctx> {
  %r = kv.concat %c : !kv.cache<5x4x8xf32> -> !kv.cache<5x4x8xf32, @ctx>
  return %r : !kv.cache<5x4x8xf32, @ctx>
}

// -----

!cache = !kv.cache<5x4x8xf32>

// Unused pure ops are removed.
// CHECK-LABEL: func.func @dead_views
// CHECK-NEXT: return
func.func @dead_views(%c: !cache, %d: index) {
  %s = kv.rope_shift %c by %d : !cache
  %n = kv.length %s : !cache
  %t = kv.tokens %s : !cache -> tensor<?xi32>
  return
}

// -----

!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32, @agent>
kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
  kv.segment @answer kind(answer) tokens(4) deps(@city)
}

// An edit that puts back a segment's own tokens changes nothing.
// CHECK-LABEL: func.func @edit_to_same_tokens
// CHECK-SAME:    (%{{.+}}: !model, %[[C:.+]]: !kv.cache<5x4x8xf32, @agent>)
// CHECK-NOT:   kv.edit
// CHECK:       return %[[C]]
func.func @edit_to_same_tokens(%m: !model, %c: !cache) -> !cache {
  %b, %e = kv.segment_bounds %c[@city] : !cache
  %s = kv.slice %c[%b, %e] : !cache
  %t = kv.tokens %s : !cache -> tensor<?xi32>
  %r = kv.edit %m, %c[@city] = %t strategy <cot_slice> : !model, !cache, tensor<?xi32>
  return %r : !cache
}

// -----

!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32, @agent>
kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
  kv.segment @answer kind(answer) tokens(4) deps(@city)
}

// An erratum of the same tokens still appends the correction it was given.
// CHECK-LABEL: func.func @no_fold_erratum_to_same_tokens
// CHECK:       kv.edit {{.+}} strategy <erratum> correction(
func.func @no_fold_erratum_to_same_tokens(%m: !model, %c: !cache, %fix: tensor<?xi32>) -> !cache {
  %b, %e = kv.segment_bounds %c[@city] : !cache
  %s = kv.slice %c[%b, %e] : !cache
  %t = kv.tokens %s : !cache -> tensor<?xi32>
  %r = kv.edit %m, %c[@city] = %t strategy <erratum> correction(%fix) : !model, !cache, tensor<?xi32>, tensor<?xi32>
  return %r : !cache
}

// -----

!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32>

// Block loads and stores touch the block store: two loads of the same tokens
// stay two (each may store), an unused load stays, and so does a store.
// CHECK-LABEL: func.func @no_fold_block_store_ops
// CHECK-COUNT-3: kv.load_block
// CHECK:         kv.store_block
func.func @no_fold_block_store_ops(%m: !model, %t: tensor<?xi32>) -> (!cache, !cache) {
  %a = kv.load_block %m, %t : !model, tensor<?xi32> -> !cache
  %b = kv.load_block %m, %t : !model, tensor<?xi32> -> !cache
  %unused = kv.load_block %m, %t : !model, tensor<?xi32> -> !cache
  kv.store_block %m, %a : !model, !cache
  return %a, %b : !cache, !cache
}
