// A whole planned program lowers to the LLVM dialect: kv-optimize, then
// kv-lower-to-cpu (convert-kv-to-runtime and the upstream lowerings). No kv
// op, func, arith or scf op is left; the kv primitives are calls of the
// execution runtime.
// RUN: kv-opt --kv-optimize --kv-lower-to-cpu %kvir_src_root/examples/agent-edit.mlir | FileCheck %s --check-prefixes=CHECK,EDIT
// RUN: kv-opt --kv-optimize --kv-lower-to-cpu %kvir_src_root/examples/compose-skills.mlir | FileCheck %s --check-prefixes=CHECK,COMPOSE
// RUN: kv-opt --kv-optimize --kv-lower-to-cpu %kvir_src_root/examples/agent-edit.mlir | FileCheck %s --check-prefix=NONE
// RUN: kv-opt --kv-optimize --kv-lower-to-cpu %kvir_src_root/examples/compose-skills.mlir | FileCheck %s --check-prefix=NONE

// CHECK:       module attributes {kv.exec_sites = [
// CHECK-DAG:   llvm.func @main(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr,
// CHECK-DAG:   llvm.func @_kvrt_entry_main(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
// CHECK-DAG:   llvm.func @kvrt_exec_prefill(!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, !llvm.ptr, i32, i64, !llvm.ptr, i32, i64, !llvm.ptr) -> !llvm.ptr
// CHECK-DAG:   llvm.call @kvrt_exec_empty(
// CHECK-DAG:   llvm.call @kvrt_exec_prefill(
// COMPOSE-DAG: llvm.call @kvrt_exec_prefill(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})
// EDIT-DAG:    llvm.call @kvrt_exec_segment_bounds(
// EDIT-DAG:    llvm.call @kvrt_exec_slice(
// EDIT-DAG:    llvm.call @kvrt_exec_view_tokens(
// EDIT-DAG:    llvm.call @kvrt_exec_tokens_size(

// NONE-NOT:    {{^ *(%.* = )?}}kv.
// NONE-NOT:    kv.context
// NONE-NOT:    {{^ *(%.* = )?}}func.
// NONE-NOT:    {{^ *(%.* = )?}}arith.
// NONE-NOT:    {{^ *(%.* = )?}}scf.
// NONE-NOT:    {{^ *(%.* = )?}}tensor.
// NONE-NOT:    unrealized_conversion_cast
