// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A model size that does not fit in 64 bits.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: integer value too large

func.func private @f(!kv.model<dim = 99999999999999999999, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>)
