// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A dense array whose element type is an alias (of an alias) of index.
// CHECK: dense-array-of-index-alias.mlir:[[@LINE+5]]:26: error: type alias '!i' names 'index': dense array of 'index' elements is not supported
!j = index
!i = !j
func.func @f() {
  // Comments and strings may mention array<index: 1> freely.
  "test.op"() {a = array<!i: 1>} : () -> ()
  return
}
