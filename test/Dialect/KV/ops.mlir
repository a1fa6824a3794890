// RUN: kv-opt %s --verify-roundtrip | FileCheck %s
// RUN: kv-opt %s -mlir-print-op-generic | kv-opt | FileCheck %s

!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32, @agent>

// Omitted model parameters print with their defaults.
// CHECK: !model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope = interleaved, theta = 10000.0, eps = 1.0e-05>

// CHECK-LABEL: kv.context @agent {
// CHECK-NEXT:    kv.segment @system kind(system) tokens(48){{$}}
// CHECK-NEXT:    kv.segment @city kind(fact) tokens(?){{$}}
// CHECK-NEXT:    kv.segment @tools kind(tool) tokens(16){{$}}
// CHECK-NEXT:    kv.segment @think kind(thought) tokens(8) deps(@city)
// CHECK-NEXT:    kv.segment @answer kind(answer) tokens(4) deps(@think, @tools)
// CHECK-NEXT:  }
kv.context @agent {
  kv.segment @system kind(system) tokens(48)
  kv.segment @city kind(fact) tokens(?)
  kv.segment @tools kind(tool) tokens(16)
  kv.segment @think kind(thought) tokens(8) deps(@city)
  kv.segment @answer kind(answer) tokens(4) deps(@think, @tools)
}

// Every kind and both RoPE layouts parse.
// CHECK-LABEL: kv.context @kinds
// CHECK-COUNT-11: kv.segment
kv.context @kinds {
  kv.segment @a kind(system) tokens(1)
  kv.segment @b kind(user) tokens(1)
  kv.segment @c kind(history) tokens(1)
  kv.segment @d kind(tool) tokens(1)
  kv.segment @e kind(skill) tokens(1)
  kv.segment @f kind(document) tokens(1)
  kv.segment @g kind(fact) tokens(1)
  kv.segment @h kind(thought) tokens(1) deps(@g)
  kv.segment @i kind(answer) tokens(1) deps(@h)
  kv.segment @j kind(correction) tokens(1) deps(@g)
  kv.segment @k kind(other) tokens(1) deps(@a, @b, @c, @d, @e, @f, @g, @h, @i, @j)
}

// CHECK-LABEL: func.func @build
func.func @build(%m: !model, %t: tensor<?xi32>, %s: tensor<48xi32>) -> (!cache, tensor<?x512xf32>) {
  // CHECK: %[[E:.+]] = kv.empty : !kv.cache<5x4x8xf32, @agent>
  %e = kv.empty : !cache
  // CHECK: %[[C1:.+]], %{{.+}} = kv.prefill %{{.+}}, %[[E]], %{{.+}} segment @system last : !model, (!kv.cache<5x4x8xf32, @agent>), tensor<48xi32> -> !kv.cache<5x4x8xf32, @agent>, tensor<1x512xf32>
  %c1, %l1 = kv.prefill %m, %e, %s segment @system last : !model, (!cache), tensor<48xi32> -> !cache, tensor<1x512xf32>
  // CHECK: kv.prefill %{{.+}}, %[[C1]], %{{.+}} segment @city :
  %c2, %l2 = kv.prefill %m, %c1, %t segment @city : !model, (!cache), tensor<?xi32> -> !cache, tensor<?x512xf32>
  return %c2, %l2 : !cache, tensor<?x512xf32>
}

// A chain of prefills in one forward call: labelled, over a view list, and
// unlabelled with the last row's logits.
// CHECK-LABEL: func.func @prefill_chain
// CHECK: kv.prefill_chain %{{.+}}, [%[[A:.+]] + %[[D0:.+]], %[[B:.+]] + %[[D1:.+]]], [%{{.+}}, %{{.+}}, %{{.+}}] segments [@city, @think, @answer] : !model, (!kv.cache<5x4x8xf32, @agent>, !kv.cache<5x4x8xf32, @agent>), (tensor<?xi32>, tensor<8xi32>, tensor<4xi32>) -> !kv.cache<5x4x8xf32, @agent>, tensor<4x512xf32>
// CHECK: kv.prefill_chain %{{.+}}, %[[A]], [%{{.+}}, %{{.+}}] last : !model, (!kv.cache<5x4x8xf32, @agent>), (tensor<?xi32>, tensor<?xi32>) -> !kv.cache<5x4x8xf32, @agent>, tensor<1x512xf32>
func.func @prefill_chain(%m: !model, %a: !cache, %b: !cache, %d0: index, %d1: index, %city: tensor<?xi32>, %think: tensor<8xi32>, %answer: tensor<4xi32>) -> (!cache, !cache) {
  %c, %l = kv.prefill_chain %m, [%a + %d0, %b + %d1], [%city, %think, %answer] segments [@city, @think, @answer] : !model, (!cache, !cache), (tensor<?xi32>, tensor<8xi32>, tensor<4xi32>) -> !cache, tensor<4x512xf32>
  %c2, %l2 = kv.prefill_chain %m, %a, [%city, %city] last : !model, (!cache), (tensor<?xi32>, tensor<?xi32>) -> !cache, tensor<1x512xf32>
  return %c, %c2 : !cache, !cache
}

// The fused form: a list of views, each with a position offset.
// CHECK-LABEL: func.func @prefill_views
// CHECK: kv.prefill %{{.+}}, [%[[A:.+]] + %[[D0:.+]], %[[B:.+]] + %[[D1:.+]]], %{{.+}} at %{{.+}} :
// CHECK: kv.prefill %{{.+}}, [%[[A]], %[[B]]], %{{.+}} :
func.func @prefill_views(%m: !model, %a: !cache, %b: !cache, %d0: index, %d1: index, %pos: index, %t: tensor<3xi32>) -> (!cache, !cache) {
  %c, %l = kv.prefill %m, [%a + %d0, %b + %d1], %t at %pos : !model, (!cache, !cache), tensor<3xi32> -> !cache, tensor<3x512xf32>
  %c2, %l2 = kv.prefill %m, [%a, %b], %t : !model, (!cache, !cache), tensor<3xi32> -> !cache, tensor<?x512xf32>
  return %c, %c2 : !cache, !cache
}

// CHECK-LABEL: func.func @edits
func.func @edits(%m: !model, %c: !cache, %t: tensor<?xi32>) -> !cache {
  // CHECK: kv.edit %{{.+}}, %{{.+}}[@city] = %{{.+}} strategy <exact> : !model, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>
  %e0 = kv.edit %m, %c[@city] = %t strategy <exact> : !model, !cache, tensor<?xi32>
  // CHECK: strategy <cot_slice> :
  %e1 = kv.edit %m, %e0[@city] = %t strategy <cot_slice> : !model, !cache, tensor<?xi32>
  // CHECK: strategy <cot_slice, first_k = 32> :
  %e2 = kv.edit %m, %e1[@city] = %t strategy <cot_slice, first_k = 32> : !model, !cache, tensor<?xi32>
  // CHECK: strategy <cot_slice, fraction = 0.15> :
  %e3 = kv.edit %m, %e2[@think] = %t strategy <cot_slice, fraction = 0.15> : !model, !cache, tensor<?xi32>
  // The generic form spells the attribute out.
  // CHECK: strategy <cot_slice, first_k = 0> :
  %e4 = "kv.edit"(%m, %e3, %t) <{segment = @city, strategy = #kv.strategy<cot_slice, first_k = 0>}> : (!model, !cache, tensor<?xi32>) -> !cache
  return %e4 : !cache
}

// A deviation threshold, and an erratum with its correction tokens.
// CHECK-LABEL: func.func @more_edits
// CHECK-SAME:    %[[FIX:[^:]+]]: tensor<3xi32>
func.func @more_edits(%m: !model, %c: !cache, %t: tensor<?xi32>, %fix: tensor<3xi32>) -> !cache {
  // CHECK: strategy <cot_slice, deviation = 0.05> : !model, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>{{$}}
  %e0 = kv.edit %m, %c[@tools] = %t strategy <cot_slice, deviation = 0.05> : !model, !cache, tensor<?xi32>
  // CHECK: kv.edit %{{.+}}, %{{.+}}[@city] = %{{.+}} strategy <erratum> correction(%[[FIX]]) : !model, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>, tensor<3xi32>
  %e1 = kv.edit %m, %e0[@city] = %t strategy <erratum> correction(%fix) : !model, !cache, tensor<?xi32>, tensor<3xi32>
  // The generic form: the correction is a fourth operand.
  // CHECK: kv.edit %{{.+}}, %{{.+}}[@think] = %{{.+}} strategy <erratum> correction(%[[FIX]]) :
  %e2 = "kv.edit"(%m, %e1, %t, %fix) <{segment = @think, strategy = #kv.strategy<erratum>}> : (!model, !cache, tensor<?xi32>, tensor<3xi32>) -> !cache
  return %e2 : !cache
}

// The run-time step of both selective budgets, and the label of an erratum's
// correction, which names a segment without being declared.
// CHECK-LABEL: func.func @repairs
func.func @repairs(%m: !model, %c: !cache, %b: index, %e: index, %fix: tensor<3xi32>) -> (!cache, !cache, !cache) {
  // CHECK: kv.selective_recompute %{{.+}}, %{{.+}}[%{{.+}}, %{{.+}}] fraction 1.500000e-01 : !model, !kv.cache<5x4x8xf32, @agent>
  %f = kv.selective_recompute %m, %c[%b, %e] fraction 0.15 : !model, !cache
  // CHECK: kv.selective_recompute %{{.+}}, %{{.+}}[%{{.+}}, %{{.+}}] deviation 5.000000e-02 : !model, !kv.cache<5x4x8xf32, @agent>
  %d = kv.selective_recompute %m, %c[%b, %e] deviation 0.05 : !model, !cache
  // CHECK: kv.prefill %{{.+}}, %{{.+}}, %{{.+}} segment @city.erratum last :
  %p, %l = kv.prefill %m, %c, %fix segment @city.erratum last : !model, (!cache), tensor<3xi32> -> !cache, tensor<1x512xf32>
  // CHECK: kv.segment_bounds %{{.+}}[@city.erratum] : !kv.cache<5x4x8xf32, @agent>
  %cb, %ce = kv.segment_bounds %p[@city.erratum] : !cache
  return %f, %d, %p : !cache, !cache, !cache
}

// CHECK-LABEL: func.func @compose
func.func @compose(%m: !model, %c: !kv.cache<5x4x8xf32>, %b: !kv.cache<5x4x8xf32, @agent>, %pos: index) -> !kv.cache<5x4x8xf32> {
  // CHECK: %[[R0:.+]] = kv.compose %{{.+}}, %{{.+}} : !kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32, @agent>
  %r0 = kv.compose %c, %b : !kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32, @agent>
  // CHECK: kv.compose %[[R0]], %{{.+}} at %{{.+}} repair <fraction = 1.0> using %{{.+}} : !kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32, @agent>, !model
  %r1 = kv.compose %r0, %b at %pos repair <fraction = 1.0> using %m : !kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32, @agent>, !model
  // CHECK: kv.compose %{{.+}}, %{{.+}} repair <deviation = 0.2> using %{{.+}} :
  %r2 = kv.compose %r1, %b repair <deviation = 0.2> using %m : !kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32, @agent>, !model
  return %r2 : !kv.cache<5x4x8xf32>
}

// CHECK-LABEL: func.func @blocks
func.func @blocks(%m: !model, %t: tensor<?xi32>, %pos: index) -> (!cache, !kv.cache<5x4x8xf32>) {
  // CHECK: %[[A:.+]] = kv.load_block %{{.+}}, %{{.+}} segment @tools : !model, tensor<?xi32> -> !kv.cache<5x4x8xf32, @agent>
  %a = kv.load_block %m, %t segment @tools : !model, tensor<?xi32> -> !cache
  // CHECK: %[[B:.+]] = kv.load_block %{{.+}}, %{{.+}} at %{{.+}} : !model, tensor<?xi32> -> !kv.cache<5x4x8xf32>
  %b = kv.load_block %m, %t at %pos : !model, tensor<?xi32> -> !kv.cache<5x4x8xf32>
  // CHECK: kv.store_block %{{.+}}, %[[B]] : !model, !kv.cache<5x4x8xf32>
  kv.store_block %m, %b : !model, !kv.cache<5x4x8xf32>
  return %a, %b : !cache, !kv.cache<5x4x8xf32>
}

// CHECK-LABEL: func.func @views
func.func @views(%m: !model, %c: !cache, %d: index) -> (!cache, tensor<?xi32>, index, tensor<?x512xf32>) {
  // CHECK: %[[S:.+]] = kv.rope_shift %{{.+}} by %{{.+}} : !kv.cache<5x4x8xf32, @agent>
  %s = kv.rope_shift %c by %d : !cache
  // CHECK: %[[B:.+]], %[[E:.+]] = kv.segment_bounds %[[S]][@tools] : !kv.cache<5x4x8xf32, @agent>
  %b, %e = kv.segment_bounds %s[@tools] : !cache
  // CHECK: %[[SL:.+]] = kv.slice %[[S]][%[[B]], %[[E]]] : !kv.cache<5x4x8xf32, @agent>
  %sl = kv.slice %s[%b, %e] : !cache
  // CHECK: %[[CC:.+]] = kv.concat %[[SL]], %[[S]] : !kv.cache<5x4x8xf32, @agent>, !kv.cache<5x4x8xf32, @agent> -> !kv.cache<5x4x8xf32, @agent>
  %cc = kv.concat %sl, %s : !cache, !cache -> !cache
  // CHECK: kv.tokens %[[CC]] : !kv.cache<5x4x8xf32, @agent> -> tensor<?xi32>
  %t = kv.tokens %cc : !cache -> tensor<?xi32>
  // CHECK: kv.length %[[CC]] : !kv.cache<5x4x8xf32, @agent>
  %n = kv.length %cc : !cache
  // CHECK: kv.materialize %{{.+}}, %[[CC]] : !model, !kv.cache<5x4x8xf32, @agent>
  %p = kv.materialize %m, %cc : !model, !cache
  // CHECK: kv.logits %{{.+}}, %{{.+}}[@answer] : !model, !kv.cache<5x4x8xf32, @agent> -> tensor<?x512xf32>
  %l = kv.logits %m, %p[@answer] : !model, !cache -> tensor<?x512xf32>
  return %p, %t, %n, %l : !cache, tensor<?xi32>, index, tensor<?x512xf32>
}

// CHECK-LABEL: func.func @attention
func.func @attention(%m: !model, %q: tensor<?x8x8xf32>, %a: !cache, %b: !kv.cache<5x4x8xf32>, %d: index, %pos: index) -> (tensor<?x8x8xf32>, tensor<?x8x8xf32>) {
  // CHECK: kv.attention %{{.+}}, %{{.+}} over %{{.+}} layer 0 at %{{.+}} : !model, (!kv.cache<5x4x8xf32, @agent>), tensor<?x8x8xf32> -> tensor<?x8x8xf32>
  %o0 = kv.attention %m, %q over %a layer 0 at %pos : !model, (!cache), tensor<?x8x8xf32> -> tensor<?x8x8xf32>
  // CHECK: kv.attention %{{.+}}, %{{.+}} over [%{{.+}} + %{{.+}}, %{{.+}} + %{{.+}}] layer 4 at
  %o1 = kv.attention %m, %q over [%a + %d, %b + %d] layer 4 at %pos : !model, (!cache, !kv.cache<5x4x8xf32>), tensor<?x8x8xf32> -> tensor<?x8x8xf32>
  return %o0, %o1 : tensor<?x8x8xf32>, tensor<?x8x8xf32>
}
