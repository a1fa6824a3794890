// RUN: kv-opt %s --convert-kv-to-runtime --split-input-file | FileCheck %s

!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32, @ctx>

kv.context @ctx {
  kv.segment @a kind(system) tokens(?)
}
// The model's forward, as convert-kv-to-cpu or convert-kv-to-gpu would emit
// it (its name is derived from the config key, runtime/core/ModelConfig.h).
func.func private @kv_fwd_fcf7c6399ef6fcd9_prefill(!llvm.ptr)

// A prefill: views, the model and tokens become pointers, the context is a
// new first argument, the forward's entry point and config key are passed,
// the new view comes back through a stack slot, and a wrapper over 64-bit
// slots is generated for the public function, which becomes internal.
func.func @prefill(%m: !model, %t: tensor<?xi32> {kv.name = "t"}) -> (!cache, tensor<1x512xf32>) {
  %c0 = kv.empty : !cache
  %c1, %l = kv.prefill %m, %c0, %t segment @a last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  return %c1, %l : !cache, tensor<1x512xf32>
}

// CHECK:       module attributes {kv.exec_sites = [
// CHECK-NOT:   kv.context
// CHECK-DAG:   llvm.mlir.global internal constant @[[LABEL:__kvrt_str_[0-9]+]]("a\00")
// CHECK-DAG:   llvm.mlir.global internal constant @[[KEY:__kvrt_str_[0-9]+]]("dim=64 hidden=172 layers=5 heads=8 kv_heads=4 vocab=512 rope=interleaved theta=0x40c3880000000000 eps=0x3ee4f8b588e368f1 kv=f32\00")
// CHECK-LABEL: func.func private @prefill(
// CHECK-SAME:    %[[CTX:.+]]: !llvm.ptr, %[[M:.+]]: !llvm.ptr, %[[T:.+]]: !llvm.ptr)
// CHECK-SAME:    -> (!llvm.ptr, !llvm.ptr) attributes {llvm.linkage = #llvm.linkage<internal>}
// CHECK:         %[[EMPTY:.+]] = call @kvrt_exec_empty(%[[CTX]], %{{.*}}) : (!llvm.ptr, i32) -> !llvm.ptr
// CHECK:         %[[VIEWS:.+]] = llvm.alloca %{{.*}} x !llvm.array<1 x ptr>
// CHECK:         llvm.store %[[EMPTY]], %{{.*}} : !llvm.ptr, !llvm.ptr
// CHECK:         %[[NAME:.+]] = llvm.mlir.addressof @[[LABEL]]
// CHECK:         %[[SLOT:.+]] = llvm.alloca %{{.*}} x !llvm.array<1 x ptr>
// CHECK:         %[[KEYPTR:.+]] = llvm.mlir.addressof @[[KEY]]
// CHECK:         %[[FWD:.+]] = constant @kv_fwd_fcf7c6399ef6fcd9_prefill : (!llvm.ptr) -> ()
// CHECK:         %[[LOGITS:.+]] = call @kvrt_exec_prefill(%[[CTX]], %{{.*}}, %[[KEYPTR]], %[[FWD]], %[[M]], %[[VIEWS]], %{{.*}}, %{{.*}}, %[[T]], %{{.*}}, %{{.*}}, %[[NAME]], %{{.*}}, %{{.*}}, %[[SLOT]])
// CHECK:         %[[RESULT:.+]] = llvm.load %[[SLOT]] : !llvm.ptr -> !llvm.ptr
// CHECK:         return %[[RESULT]], %[[LOGITS]] : !llvm.ptr, !llvm.ptr
// CHECK-LABEL: func.func @_kvrt_entry_prefill(
// CHECK-SAME:    %[[WCTX:.+]]: !llvm.ptr, %[[ARGS:.+]]: !llvm.ptr, %[[RES:.+]]: !llvm.ptr)
// CHECK:         llvm.getelementptr %[[ARGS]][1] : (!llvm.ptr) -> !llvm.ptr, i64
// CHECK:         %[[R:.+]]:2 = call @prefill(%[[WCTX]],
// CHECK:         llvm.getelementptr %[[RES]][1] : (!llvm.ptr) -> !llvm.ptr, i64
// CHECK:         llvm.store %[[R]]#1
// CHECK:       func.func private @kvrt_exec_empty(!llvm.ptr, i32) -> !llvm.ptr
// CHECK:       func.func private @kvrt_exec_prefill(!llvm.ptr, i32, !llvm.ptr, (!llvm.ptr) -> (), !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, !llvm.ptr, i32, i64, !llvm.ptr, i32, i64, !llvm.ptr) -> !llvm.ptr

// -----

// A prefill whose logits nothing reads (as each segment an edit's plan
// recomputes) asks for none (KVRT_EXEC_LOGITS_NONE, 2) and no row count; a
// prefill whose logits are returned asks for the last row (1) and says it
// expects 1.

!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32, @ctx>

kv.context @ctx {
  kv.segment @a kind(system) tokens(?)
}
func.func private @kv_fwd_fcf7c6399ef6fcd9_prefill(!llvm.ptr)

func.func @unread(%m: !model, %t: tensor<?xi32> {kv.name = "t"}) -> (!cache, tensor<1x512xf32>) {
  %c0 = kv.empty : !cache
  %c1, %l1 = kv.prefill %m, %c0, %t segment @a last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  %c2, %l2 = kv.prefill %m, %c1, %t last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x512xf32>
  return %c2, %l2 : !cache, tensor<1x512xf32>
}

// CHECK-LABEL: func.func private @unread(
// CHECK:         %[[NONE:.+]] = arith.constant 2 : i32
// CHECK-NEXT:    %[[ANY:.+]] = arith.constant -1 : i64
// CHECK-NEXT:    call @kvrt_exec_prefill({{.*}}, %[[NONE]], %[[ANY]], %{{[^,]+}})
// CHECK:         %[[LAST:.+]] = arith.constant 1 : i32
// CHECK-NEXT:    %[[ONE:.+]] = arith.constant 1 : i64
// CHECK-NEXT:    call @kvrt_exec_prefill({{.*}}, %[[LAST]], %[[ONE]], %{{[^,]+}})

// -----

// A chain of prefills: one call, with the token handles and their labels as
// stack arrays, and the number of lists; the logits (all rows of the last
// list) are read, so it asks for every row (0) and expects 4.

!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32, @ctx>

kv.context @ctx {
  kv.segment @a kind(thought) tokens(?)
  kv.segment @b kind(answer) tokens(4)
}
func.func private @kv_fwd_fcf7c6399ef6fcd9_prefill(!llvm.ptr)

func.func @chain(%m: !model, %v: !cache, %t: tensor<?xi32> {kv.name = "t"}, %u: tensor<4xi32> {kv.name = "u"}) -> tensor<4x512xf32> {
  %c, %l = kv.prefill_chain %m, %v, [%t, %u] segments [@a, @b]
      : !model, (!cache), (tensor<?xi32>, tensor<4xi32>) -> !cache, tensor<4x512xf32>
  return %l : tensor<4x512xf32>
}

// CHECK-LABEL: func.func private @chain(
// CHECK-SAME:    %[[CTX:.+]]: !llvm.ptr, %[[M:.+]]: !llvm.ptr, %[[V:.+]]: !llvm.ptr, %[[T:.+]]: !llvm.ptr, %[[U:.+]]: !llvm.ptr)
// CHECK:         %[[TOKENS:.+]] = llvm.alloca %{{.*}} x !llvm.array<2 x ptr>
// CHECK:         llvm.store %[[T]], %{{.*}} : !llvm.ptr, !llvm.ptr
// CHECK:         llvm.store %[[U]], %{{.*}} : !llvm.ptr, !llvm.ptr
// CHECK:         %[[LA:.+]] = llvm.mlir.addressof @{{.+}}
// CHECK:         %[[LB:.+]] = llvm.mlir.addressof @{{.+}}
// CHECK:         %[[LABELS:.+]] = llvm.alloca %{{.*}} x !llvm.array<2 x ptr>
// CHECK:         llvm.store %[[LA]], %{{.*}} : !llvm.ptr, !llvm.ptr
// CHECK:         llvm.store %[[LB]], %{{.*}} : !llvm.ptr, !llvm.ptr
// CHECK:         %[[TWO:.+]] = arith.constant 2 : i64
// CHECK:         %[[FOUR:.+]] = arith.constant 4 : i64
// CHECK-NEXT:    call @kvrt_exec_prefill_chain(%[[CTX]], %{{.*}}, %{{.*}}, %{{.*}}, %[[M]], %{{.*}}, %{{.*}}, %{{.*}}, %[[TOKENS]], %[[LABELS]], %[[TWO]], %c0_i32{{[_0-9]*}}, %[[FOUR]], %{{[^,]+}})
// CHECK:       func.func private @kvrt_exec_prefill_chain(!llvm.ptr, i32, !llvm.ptr, (!llvm.ptr) -> (), !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, !llvm.ptr, !llvm.ptr, i64, i32, i64, !llvm.ptr) -> !llvm.ptr

// -----

// View metadata ops: each a runtime call; indices cross as i64.
!cache = !kv.cache<5x4x8xf32, @ctx>
kv.context @ctx {
  kv.segment @a kind(system) tokens(?)
}
func.func @views(%c: !cache, %d: index) -> (!cache, index, index, tensor<?xi32>) {
  %b, %e = kv.segment_bounds %c[@a] : !cache
  %s = kv.slice %c[%b, %e] : !cache
  %r = kv.rope_shift %s by %d : !cache
  %j = kv.concat %r, %c : !cache, !cache -> !cache
  %n = kv.length %j : !cache
  %p = kv.end_position %j : !cache
  %t = kv.tokens %j : !cache -> tensor<?xi32>
  return %j, %n, %p, %t : !cache, index, index, tensor<?xi32>
}

// CHECK-LABEL: func.func private @views(
// CHECK-SAME:    %[[CTX:.+]]: !llvm.ptr, %[[C:.+]]: !llvm.ptr, %[[D:.+]]: index)
// CHECK:         %[[BOUNDS:.+]] = llvm.alloca %{{.*}} x !llvm.array<2 x i64>
// CHECK:         call @kvrt_exec_segment_bounds(%[[CTX]], %{{.*}}, %[[C]], %{{.*}}, %[[BOUNDS]])
// CHECK:         %[[B:.+]] = llvm.load %{{.*}} : !llvm.ptr -> i64
// CHECK:         %[[E:.+]] = llvm.load %{{.*}} : !llvm.ptr -> i64
// CHECK:         %[[S:.+]] = call @kvrt_exec_slice(%[[CTX]], %{{.*}}, %[[C]], %{{.*}}, %{{.*}}) : (!llvm.ptr, i32, !llvm.ptr, i64, i64) -> !llvm.ptr
// CHECK:         %[[D64:.+]] = arith.index_cast %[[D]] : index to i64
// CHECK:         %[[R:.+]] = call @kvrt_exec_rope_shift(%[[CTX]], %{{.*}}, %[[S]], %[[D64]])
// CHECK:         %[[J:.+]] = call @kvrt_exec_concat(%[[CTX]], %{{.*}}, %{{.*}}, %{{.*}})
// CHECK:         call @kvrt_exec_length(%[[CTX]], %[[J]]) : (!llvm.ptr, !llvm.ptr) -> i64
// CHECK:         call @kvrt_exec_end_position(%[[CTX]], %[[J]])
// CHECK:         call @kvrt_exec_view_tokens(%[[CTX]], %{{.*}}, %[[J]], %{{.*}})

// -----

// Token constants become internal globals; tensor.dim and an empty token
// tensor go through the runtime.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32>
func.func @constants(%m: !model, %u: tensor<?xi32>) -> (tensor<3xi32>, index) {
  %t = arith.constant dense<[1, 2, 3]> : tensor<3xi32>
  %c0 = arith.constant 0 : index
  %e = tensor.empty(%c0) : tensor<?xi32>
  %n = tensor.dim %u, %c0 : tensor<?xi32>
  return %t, %n : tensor<3xi32>, index
}

// CHECK:       llvm.mlir.global internal constant @[[TOKENS:__kvrt_tokens_[0-9]+]](dense<[1, 2, 3]> : tensor<3xi32>) {{.*}} : !llvm.array<3 x i32>
// CHECK-LABEL: func.func private @constants(
// CHECK-SAME:    %[[CTX:.+]]: !llvm.ptr, %{{.*}}: !llvm.ptr, %[[U:.+]]: !llvm.ptr)
// CHECK:         %[[ADDR:.+]] = llvm.mlir.addressof @[[TOKENS]]
// CHECK:         %[[T:.+]] = call @kvrt_exec_tokens_constant(%[[CTX]], %{{.*}}, %[[ADDR]], %{{.*}})
// CHECK:         call @kvrt_exec_tokens_empty(
// CHECK:         call @kvrt_exec_tokens_size(%[[CTX]], %[[U]])
// CHECK:         return %[[T]], %{{.*}} : !llvm.ptr, index

// -----

// Repair and materialization; a plan-tagged op is bracketed by plan
// accounting and so is everything that uses its result.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32>
func.func private @kv_fwd_fcf7c6399ef6fcd9_prefill(!llvm.ptr)
func.func private @kv_fwd_fcf7c6399ef6fcd9_materialize(!llvm.ptr)
func.func @repair(%m: !model, %c: !cache, %b: index, %e: index) -> !cache {
  %r = kv.selective_recompute %m, %c[%b, %e] fraction 2.500000e-01 : !model, !cache loc(fused<"kv.plan">["repair"])
  %x = kv.materialize %m, %r : !model, !cache
  return %x : !cache
}

// The fraction repair passes mode 0 (KVRT_EXEC_REPAIR_FRACTION) and f.
// CHECK-LABEL: func.func private @repair(
// CHECK:         %[[F:.+]] = arith.constant 2.500000e-01 : f64
// CHECK:         arith.index_cast
// CHECK:         arith.index_cast
// CHECK-NEXT:    %[[FRACTION:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    call @kvrt_exec_plan_begin(
// CHECK-NEXT:    %[[R:.+]] = call @kvrt_exec_selective_recompute(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[FRACTION]], %[[F]])
// CHECK-NEXT:    call @kvrt_exec_plan_end(
// CHECK:         constant @kv_fwd_fcf7c6399ef6fcd9_materialize
// CHECK:         call @kvrt_exec_plan_begin(
// CHECK-NEXT:    call @kvrt_exec_materialize(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[R]])
// CHECK-NEXT:    call @kvrt_exec_plan_end(

// -----

// A deviation repair passes mode 1 (KVRT_EXEC_REPAIR_DEVIATION) and the
// threshold t, to the same entry point.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32>
func.func private @kv_fwd_fcf7c6399ef6fcd9_prefill(!llvm.ptr)
func.func @deviation_repair(%m: !model, %c: !cache, %b: index, %e: index) -> !cache {
  %r = kv.selective_recompute %m, %c[%b, %e] deviation 5.000000e-02 : !model, !cache
  return %r : !cache
}

// CHECK-LABEL: func.func private @deviation_repair(
// CHECK-SAME:    %[[CTX:[^:]+]]: !llvm.ptr, %[[M:[^:]+]]: !llvm.ptr, %[[C:[^:]+]]: !llvm.ptr, %[[B:[^:]+]]: index, %[[E:[^:]+]]: index)
// CHECK:         %[[T:.+]] = arith.constant 5.000000e-02 : f64
// CHECK:         %[[KEY:.+]] = llvm.mlir.addressof
// CHECK:         %[[FWD:.+]] = constant @kv_fwd_fcf7c6399ef6fcd9_prefill
// CHECK:         %[[B64:.+]] = arith.index_cast %[[B]] : index to i64
// CHECK:         %[[E64:.+]] = arith.index_cast %[[E]] : index to i64
// CHECK-NEXT:    %[[DEVIATION:.+]] = arith.constant 1 : i32
// CHECK-NEXT:    %[[R:.+]] = call @kvrt_exec_selective_recompute(%[[CTX]], %{{.*}}, %[[KEY]], %[[FWD]], %[[M]], %[[C]], %[[B64]], %[[E64]], %[[DEVIATION]], %[[T]]) : (!llvm.ptr, i32, !llvm.ptr, (!llvm.ptr) -> (), !llvm.ptr, !llvm.ptr, i64, i64, i32, f64) -> !llvm.ptr
// CHECK:         return %[[R]]

// -----

// Attention over a view list: queries are an f32 tensor handle, the result
// another; the forward's attention entry point is passed.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32>
func.func private @kv_fwd_fcf7c6399ef6fcd9_attention(!llvm.ptr)
func.func @attend(%m: !model, %q: tensor<?x8x8xf32>, %a: !cache, %b: !cache, %d: index, %p: index) -> tensor<?x8x8xf32> {
  %c0 = arith.constant 0 : index
  %o = kv.attention %m, %q over [%a + %c0, %b + %d] layer 2 at %p
      : !model, (!cache, !cache), tensor<?x8x8xf32> -> tensor<?x8x8xf32>
  %n = tensor.dim %o, %c0 : tensor<?x8x8xf32>
  return %o : tensor<?x8x8xf32>
}

// CHECK-LABEL: func.func private @attend(
// CHECK-SAME:    %[[CTX:.+]]: !llvm.ptr, %[[M:.+]]: !llvm.ptr, %[[Q:.+]]: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: index, %{{.*}}: index) -> !llvm.ptr
// CHECK:         %[[VIEWS:.+]] = llvm.alloca %{{.*}} x !llvm.array<2 x ptr>
// CHECK:         %[[OFFSETS:.+]] = llvm.alloca %{{.*}} x !llvm.array<2 x i64>
// CHECK:         %[[FWD:.+]] = constant @kv_fwd_fcf7c6399ef6fcd9_attention
// CHECK:         %[[O:.+]] = call @kvrt_exec_attention(%[[CTX]], %{{.*}}, %{{.*}}, %[[FWD]], %[[M]], %[[Q]], %[[VIEWS]], %[[OFFSETS]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})
// CHECK:         call @kvrt_exec_tensor_dim(%[[CTX]], %{{.*}}, %[[O]], %{{.*}})
// CHECK:         return %[[O]] : !llvm.ptr

// -----

// A call of a host function passes the context and is guarded by the call
// depth (a recursion ends in an error, not a stack overflow).
!cache = !kv.cache<5x4x8xf32>
func.func private @helper(%c: !cache) -> index {
  %n = kv.length %c : !cache
  return %n : index
}
func.func @caller(%c: !cache) -> index {
  %n = func.call @helper(%c) : (!cache) -> index
  return %n : index
}

// CHECK-LABEL: func.func private @helper(
// CHECK-SAME:    %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr) -> index
// CHECK-LABEL: func.func private @caller(
// CHECK-SAME:    %[[CTX:.+]]: !llvm.ptr, %[[C:.+]]: !llvm.ptr)
// CHECK:         %[[OK:.+]] = call @kvrt_exec_call_enter(%[[CTX]], %{{.*}})
// CHECK:         %[[GO:.+]] = arith.cmpi ne, %[[OK]], %{{.*}} : i32
// CHECK:         %[[N:.+]] = scf.if %[[GO]] -> (index) {
// CHECK:           %[[V:.+]] = func.call @helper(%[[CTX]], %[[C]])
// CHECK:           func.call @kvrt_exec_call_leave(%[[CTX]])
// CHECK:           scf.yield %[[V]] : index
// CHECK:         } else {
// CHECK:           scf.yield %{{.*}} : index
// CHECK:         return %[[N]] : index
// CHECK-NOT:   func.func @_kvrt_entry_helper

// -----

// A function without kv values or token tensors is not a host function: it
// keeps its signature and gets no wrapper.
func.func @negative_plain(%a: index, %b: index) -> index {
  %s = arith.addi %a, %b : index
  return %s : index
}

// CHECK-LABEL: func.func @negative_plain(
// CHECK-SAME:    %{{.*}}: index, %{{.*}}: index) -> index
// CHECK-NOT:   @_kvrt_entry_negative_plain
// CHECK-NOT:   kvrt_exec

// -----

// A function that returns a float cannot be wrapped in 64-bit integer
// slots: it is lowered but gets no wrapper.
!cache = !kv.cache<5x4x8xf32>
func.func @negative_float(%c: !cache) -> f32 {
  %n = kv.length %c : !cache
  %x = arith.constant 1.0 : f32
  return %x : f32
}

// CHECK-LABEL: func.func @negative_float(
// CHECK-SAME:    %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr) -> f32
// CHECK-NOT:   @_kvrt_entry_negative_float

// -----

// kv.load_block becomes one runtime call with the forward's entry point and
// config key (for a miss), the position flag and the label; kv.store_block
// one call with the view.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32, @ctx>
kv.context @ctx {
  kv.segment @a kind(tool) tokens(?)
}
func.func private @kv_fwd_fcf7c6399ef6fcd9_prefill(!llvm.ptr)
func.func @blocks(%m: !model, %t: tensor<?xi32> {kv.name = "t"}, %p: index) -> (!cache, !cache) {
  %a = kv.load_block %m, %t segment @a : !model, tensor<?xi32> -> !cache
  %b = kv.load_block %m, %t at %p : !model, tensor<?xi32> -> !cache
  kv.store_block %m, %a : !model, !cache
  return %a, %b : !cache, !cache
}
// CHECK-LABEL: func.func private @blocks(
// CHECK-SAME:    %[[CTX:.+]]: !llvm.ptr, %[[M:.+]]: !llvm.ptr, %[[T:.+]]: !llvm.ptr, %[[P:.+]]: index)
// CHECK:         %[[NOPOS:.+]] = arith.constant 0 : i32
// CHECK:         %[[ZERO:.+]] = arith.constant 0 : i64
// CHECK:         %[[LABEL:.+]] = llvm.mlir.addressof @__kvrt_str_
// CHECK:         %[[FWD:.+]] = constant @kv_fwd_fcf7c6399ef6fcd9_prefill
// CHECK:         %[[A:.+]] = call @kvrt_exec_load_block(%[[CTX]], %{{.+}}, %{{.+}}, %[[FWD]], %[[M]], %[[T]], %[[NOPOS]], %[[ZERO]], %[[LABEL]])
// CHECK:         %[[HASPOS:.+]] = arith.constant 1 : i32
// CHECK:         %[[POS:.+]] = arith.index_cast %[[P]] : index to i64
// CHECK:         %[[NOLABEL:.+]] = llvm.mlir.zero : !llvm.ptr
// CHECK:         %[[B:.+]] = call @kvrt_exec_load_block(%[[CTX]], %{{.+}}, %{{.+}}, %{{.+}}, %[[M]], %[[T]], %[[HASPOS]], %[[POS]], %[[NOLABEL]])
// CHECK:         call @kvrt_exec_store_block(%[[CTX]], %{{.+}}, %[[M]], %[[A]]) : (!llvm.ptr, i32, !llvm.ptr, !llvm.ptr) -> ()
// CHECK:         return %[[A]], %[[B]]
// CHECK:       func.func private @kvrt_exec_load_block(!llvm.ptr, i32, !llvm.ptr, (!llvm.ptr) -> (), !llvm.ptr, !llvm.ptr, i32, i64, !llvm.ptr) -> !llvm.ptr
// CHECK:       func.func private @kvrt_exec_store_block(!llvm.ptr, i32, !llvm.ptr, !llvm.ptr)
