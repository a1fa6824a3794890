// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A generic kv.segment outside a kv.context.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'kv.segment' op expects parent op 'kv.context'

"kv.segment"() <{sym_name = "x"}> : () -> ()
