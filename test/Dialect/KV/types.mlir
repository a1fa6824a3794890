// RUN: kv-opt %s --verify-roundtrip | FileCheck %s

// Floats print in their shortest exact form, always with a '.'.
// CHECK: !model = !kv.model<dim = 128, hidden = 256, layers = 2, heads = 4, kv_heads = 1, vocab = 100, rope = half, theta = 5.0e+05, eps = 1.0e-06>
// CHECK: !model1 = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope = interleaved, theta = 10000.0, eps = 1.0e-05>
// CHECK: !model2 = !kv.model<dim = 16, hidden = 32, layers = 1, heads = 1, kv_heads = 1, vocab = 8, rope = interleaved, theta = 1234.5, eps = 1.0e-05>
// CHECK: !model3 = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope = half, theta = 5.0e+05, eps = 1.0e-05, rope_dim = 4, rope_scale = 2.0, rope_freqs = [1.0, 8.5]>
// CHECK: !model4 = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope = interleaved, theta = 10000.0, eps = 1.0e-05, rope_scale = 0.25>
// CHECK: !model5 = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope = half, theta = 1.0e+06, eps = 1.0e-06, qkv_bias = true>

// CHECK-LABEL: func.func @models
// CHECK-SAME: !model, %{{.+}}: !model1, %{{.+}}: !model2
func.func @models(
    %a: !kv.model<dim = 128, hidden = 256, layers = 2, heads = 4, kv_heads = 1, vocab = 100, rope = half, theta = 500000.0, eps = 1.0e-06>,
    // Parameters may come in any order.
    %b: !kv.model<vocab = 512, dim = 64, layers = 5, hidden = 172, kv_heads = 4, heads = 8, eps = 1.0e-05>,
    %c: !kv.model<dim = 16, hidden = 32, layers = 1, heads = 1, kv_heads = 1, vocab = 8, theta = 1234.5>) {
  return
}

// RoPE variants print where they are in effect; llama.cpp's layout names
// parse; rope_dim equal to the head size is the whole head (omitted).
// CHECK-LABEL: func.func @rope_variants
// CHECK-SAME: !model3, %{{.+}}: !model4, %{{.+}}: !model1)
func.func @rope_variants(
    %a: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope = neox, theta = 500000.0, rope_dim = 4, rope_scale = 2.0, rope_freqs = [1.0, 8.5]>,
    %b: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope = normal, rope_scale = 0.25>,
    %c: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope_dim = 8, rope_scale = 1.0>) {
  return
}

// qkv_bias prints where it is true (Qwen2's biases on Q, K and V).
// CHECK-LABEL: func.func @qkv_bias
// CHECK-SAME: !model5, %{{.+}}: !model1)
func.func @qkv_bias(
    %a: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope = neox, theta = 1000000.0, eps = 1.0e-06, qkv_bias = true>,
    %b: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, qkv_bias = false>) {
  return
}

// CHECK-LABEL: func.func @caches
// CHECK-SAME: !kv.cache<2x1x32xf16>, %{{.+}}: !kv.cache<2x1x32xbf16>, %{{.+}}: !kv.cache<80x8x128xf32, @ctx>
func.func @caches(%a: !kv.cache<2x1x32xf16>, %b: !kv.cache<2x1x32xbf16>, %c: !kv.cache<80x8x128xf32, @ctx>) {
  return
}

kv.context @ctx {
  kv.segment @only kind(document) tokens(?)
}

// CHECK-LABEL: func.func @attrs
// CHECK-SAME: test.repairs = [#kv.repair<first_k = 7>, #kv.repair<fraction = 0.333>, #kv.repair<deviation = 0.001>]
// CHECK-SAME: test.strategies = [#kv.strategy<exact>, #kv.strategy<cot_slice>, #kv.strategy<cot_slice, first_k = 0>, #kv.strategy<cot_slice, fraction = 0.0>, #kv.strategy<cot_slice, deviation = 2.5>, #kv.strategy<erratum>]
func.func @attrs() attributes {
    test.strategies = [#kv.strategy<exact>, #kv.strategy<cot_slice>, #kv.strategy<cot_slice, first_k = 0>, #kv.strategy<cot_slice, fraction = 0.0>, #kv.strategy<cot_slice, deviation = 2.5>, #kv.strategy<erratum>],
    test.repairs = [#kv.repair<first_k = 7>, #kv.repair<fraction = 0.333>, #kv.repair<deviation = 0.001>]} {
  return
}
