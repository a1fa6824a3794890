// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A type the kv dialect does not define.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: unknown {{ *}}type `foo` in dialect `kv`

func.func private @f(!kv.foo)
