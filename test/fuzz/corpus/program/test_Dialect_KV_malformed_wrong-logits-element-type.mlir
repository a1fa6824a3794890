// RUN: not kv-opt %s 2>&1 | FileCheck %s
// Logits of type f16.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'kv.logits' op result #0 must be 2D tensor of 32-bit float values, but got 'tensor<?x512xf16>'

func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32>) {
  %0 = kv.logits %m, %c[@answer] : !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, !kv.cache<5x4x8xf32> -> tensor<?x512xf16>
  return
}
