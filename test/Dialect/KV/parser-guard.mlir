// RUN: kv-opt %s --allow-unregistered-dialect | FileCheck %s
// The parser guard (driver/compiler/ParserGuard.h) lets through what only looks
// like a crasher: comments, strings, other names, other types, result numbers
// in range.
// array<index: 1, 2> in a comment, %0#4294967296 too
// CHECK-LABEL: func.func @array
func.func @array(%array: index) {
  // CHECK: "test.op"() {a = array<i64: 1, 2>, b = "array<index: 3> %0#99999999", c = array<i1: true>}
  "test.op"() {a = array<i64: 1, 2>, b = "array<index: 3> %0#99999999", c = array<i1: true>} : () -> ()
  // CHECK: "test.op"(%{{.*}}) : (index) -> ()
  "test.op"(%array) : (index) -> ()
  // CHECK: %[[R:.*]]:2 = "test.pair"
  // CHECK: "test.use"(%[[R]]#1)
  %r:2 = "test.pair"() : () -> (i32, i32)
  "test.use"(%r#1) : (i32) -> ()
  return
}
