// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A model type with an extra '>'.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: expected ')'

func.func private @f(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>>)
