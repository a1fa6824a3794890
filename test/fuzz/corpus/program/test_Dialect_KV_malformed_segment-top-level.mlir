// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A kv.segment at the top level.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'kv.segment' op expects parent op 'kv.context'

kv.segment @city kind(fact) tokens(4)
