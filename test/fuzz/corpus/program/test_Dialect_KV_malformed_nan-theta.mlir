// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A NaN RoPE base given by its bit pattern.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: invalid model type: rope_theta = nan must be positive and finite

func.func private @f(!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512, theta = 0x7FF8000000000000>)
