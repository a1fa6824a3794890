// RUN: kv-opt %s --convert-kv-to-runtime --split-input-file --verify-diagnostics

// Ops that kv-optimize plans away have no runtime lowering.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32, @ctx>
kv.context @ctx {
  kv.segment @a kind(system) tokens(?)
  kv.segment @b kind(answer) tokens(?) deps(@a)
}
func.func @unplanned(%m: !model, %c: !cache) -> tensor<?x512xf32> {
  // expected-error @below {{'kv.logits' op has no runtime lowering: run kv-optimize first, which plans it into primitives}}
  %l = kv.logits %m, %c[@b] : !model, !cache -> tensor<?x512xf32>
  return %l : tensor<?x512xf32>
}

// -----

// A declaration with kv types cannot be called: it would lack the context.
!cache = !kv.cache<5x4x8xf32>
// expected-error @below {{'func.func' op is called but has no body: convert-kv-to-runtime can only call host functions defined in the module}}
func.func private @external(%c: !cache) -> index
func.func @calls_external(%c: !cache) -> index {
  %n = func.call @external(%c) : (!cache) -> index
  return %n : index
}

// -----

// Token tensors support dim, cast and empty only.
func.func @extract(%t: tensor<?xi32>) -> i32 {
  %c0 = arith.constant 0 : index
  // expected-error @below {{'tensor.extract' op on token or logits tensors has no runtime lowering (tensor.dim, tensor.cast and tensor.empty have)}}
  %x = tensor.extract %t[%c0] : tensor<?xi32>
  return %x : i32
}

// -----

// An op that needs math needs the forward of its model in the module.
!model = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
!cache = !kv.cache<5x4x8xf32>
func.func @no_forward(%m: !model, %t: tensor<?xi32>) -> !cache {
  %c0 = kv.empty : !cache
  // expected-error @below {{'kv.prefill' op needs the forward of its model, @kv_fwd_fcf7c6399ef6fcd9_prefill [dim=64 hidden=172 layers=5 heads=8 kv_heads=4 vocab=512 rope=interleaved theta=0x40c3880000000000 eps=0x3ee4f8b588e368f1 kv=f32], which the module lacks: run convert-kv-to-cpu or convert-kv-to-gpu first (kv-lower-to-cpu and kv-lower-to-nvvm do)}}
  %c1, %l = kv.prefill %m, %c0, %t : !model, (!cache), tensor<?xi32> -> !cache, tensor<?x512xf32>
  return %c1 : !cache
}
