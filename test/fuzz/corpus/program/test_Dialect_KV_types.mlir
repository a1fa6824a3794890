// RUN: kv-opt %s --verify-roundtrip | FileCheck %s

// Floats print in their shortest exact form, always with a '.'.
// CHECK: !model = !kv.model<dim = 128, hidden = 256, layers = 2, heads = 4, kv_heads = 1, vocab = 100, rope = half, theta = 5.0e+05, eps = 1.0e-06>
// CHECK: !model1 = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, rope = interleaved, theta = 10000.0, eps = 1.0e-05>
// CHECK: !model2 = !kv.model<dim = 16, hidden = 32, layers = 1, heads = 1, kv_heads = 1, vocab = 8, rope = interleaved, theta = 1234.5, eps = 1.0e-05>

// CHECK-LABEL: func.func @models
// CHECK-SAME: !model, %{{.+}}: !model1, %{{.+}}: !model2
func.func @models(
    %a: !kv.model<dim = 128, hidden = 256, layers = 2, heads = 4, kv_heads = 1, vocab = 100, rope = half, theta = 500000.0, eps = 1.0e-06>,
    // Parameters may come in any order.
    %b: !kv.model<vocab = 512, dim = 64, layers = 5, hidden = 172, kv_heads = 4, heads = 8, eps = 1.0e-05>,
    %c: !kv.model<dim = 16, hidden = 32, layers = 1, heads = 1, kv_heads = 1, vocab = 8, theta = 1234.5>) {
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
