// RUN: kv-opt %s --kv-derive-cot-slices="emit-plan emit-statistics" -split-input-file -verify-diagnostics | FileCheck %s

// A kv.load_block is left for the run time to decide (a hit fetches, a miss
// prefills and stores); the plan prints both costs, and a compose of the
// block is planned like any other.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32>
// CHECK-LABEL: func.func @static_block
// CHECK:         %[[B:.+]] = kv.load_block %{{.+}}, %{{.+}} at %{{.+}} : !model, tensor<32xi32> -> !kv.cache<5x4x8xf32>
// CHECK-NOT:     kv.compose
// CHECK:         kv.rope_shift %[[B]]
// CHECK:         kv.concat
// expected-remark@+1 {{kv-derive-cot-slices: 0 edits, 1 composes, 0 segments recomputed, 0 segments reused, 0 logits reused, 0 corrections, 1 block loads}}
module {
func.func @static_block(%m: !model, %c: !cache, %t: tensor<32xi32>) -> !cache {
  %c8 = arith.constant 8 : index
  // expected-remark@+1 {{load_block: block of 32 tokens at position 8, keyed by the model's fingerprint and configuration, the K/V element type and layout version, the base position and the token ids; decided at run time: a hit fetches it (no prefill, 41216 bytes moved), a miss prefills 32 tokens (15241216 FLOPs) and stores them}}
  %b = kv.load_block %m, %t at %c8 : !model, tensor<32xi32> -> !cache
  // expected-remark@+1 {{compose}}
  %r = kv.compose %c, %b : !cache, !cache
  return %r : !cache
}
}

// -----

// A block of run-time length at position 0.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32>
// expected-remark@+1 {{1 block loads}}
module {
func.func @dynamic_block(%m: !model, %t: tensor<?xi32>) -> !cache {
  // expected-remark@+1 {{load_block: block of run-time length at position 0, keyed by}}
  %b = kv.load_block %m, %t : !model, tensor<?xi32> -> !cache
  return %b : !cache
}
}
