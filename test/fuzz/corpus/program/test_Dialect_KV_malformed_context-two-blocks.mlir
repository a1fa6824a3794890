// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A kv.context whose body has two blocks.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'kv.context' op expects region #0 to have 0 or 1 blocks

kv.context @agent {
  kv.segment @city kind(fact) tokens(4)
^bb1:
  kv.segment @think kind(thought) tokens(4) deps(@city)
}
