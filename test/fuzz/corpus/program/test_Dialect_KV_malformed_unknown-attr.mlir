// RUN: not kv-opt %s 2>&1 | FileCheck %s
// An attribute the kv dialect does not define.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: unknown attribute `bar` in dialect `kv`

func.func private @f() attributes {kv.x = #kv.bar<>}
