// A view list the verifier would reject must get a diagnostic, not a crash.
// RUN: kv-opt %s --mlir-very-unsafe-disable-verifier-on-parsing -verify-each=false --kv-fuse-rope-shift -verify-diagnostics

!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>
func.func @offsets_mismatch(%m: !model, %a: !cache, %b: !cache, %d: index, %t: tensor<3xi32>) -> !cache {
  %s = kv.rope_shift %b by %d : !cache
  // expected-error @below {{cannot fuse: 2 views but 1 offsets}}
  %r, %l = "kv.prefill"(%m, %a, %s, %d, %t) <{operandSegmentSizes = array<i32: 1, 2, 1, 1, 0>}> : (!model, !cache, !cache, index, tensor<3xi32>) -> (!cache, tensor<3x10xf32>)
  return %r : !cache
}
