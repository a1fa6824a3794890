// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A cache dimension that does not fit in 64 bits.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: invalid dimension

func.func private @f(!kv.cache<99999999999999999999x4x8xf32>)
