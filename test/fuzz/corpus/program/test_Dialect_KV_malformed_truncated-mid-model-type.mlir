// RUN: not kv-opt %s 2>&1 | FileCheck %s
// Input that ends in the middle of a model type.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: unbalanced '<' character in pretty dialect name

func.func private @f(!kv.model<dim = 64,