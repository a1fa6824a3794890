// RUN: not kv-opt %s 2>&1 | FileCheck %s
// Plain text that is not MLIR.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: custom op 'Please' is unknown

Please edit the city in my agent context, thanks!
