// A whole planned program lowers to one LLVM-dialect module: kv-optimize,
// then kv-lower-to-cpu (the CPU forward of its model, convert-kv-to-runtime
// and the upstream lowerings). No kv op, func, arith or scf op is left; the
// kv primitives are calls of the execution runtime that hand over the
// program's own specialised forward.
// RUN: kv-opt --kv-optimize --kv-lower-to-cpu %kvir_src_root/examples/agent-edit.mlir | FileCheck %s --check-prefixes=CHECK,EDIT
// RUN: kv-opt --kv-optimize --kv-lower-to-cpu %kvir_src_root/examples/compose-skills.mlir | FileCheck %s --check-prefixes=CHECK,COMPOSE
// RUN: kv-opt --kv-optimize --kv-lower-to-cpu %kvir_src_root/examples/agent-edit.mlir | FileCheck %s --check-prefix=NONE
// RUN: kv-opt --kv-optimize --kv-lower-to-cpu %kvir_src_root/examples/compose-skills.mlir | FileCheck %s --check-prefix=NONE

// The object of that module has no external symbol but the execution
// runtime's (its thread pool included) and libm's: it links against the
// runtime alone.
// RUN: kv-opt --kv-optimize --kv-lower-to-cpu %kvir_src_root/examples/agent-edit.mlir | mlir-translate --mlir-to-llvmir | llc -O2 -filetype=obj -relocation-model=pic -o %t.o
// RUN: llvm-nm --undefined-only %t.o | FileCheck %s --check-prefix=SYMBOLS
// RUN: llvm-nm --undefined-only %t.o | not grep -v -E ' (kvrt_exec_[a-z_]+|kvrt_parallel_for|kvrt_get_num_threads|expf|floorf|pow|sin|cos|sincos|malloc|free)$'

// CHECK:       module attributes {kv.exec_sites = [
// The host function is internal: its interface is the entry wrapper.
// CHECK-DAG:   llvm.func internal @main(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr,
// CHECK-DAG:   llvm.func @_kvrt_entry_main(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
// The specialised forward of the program's model, in the same module.
// CHECK-DAG:   llvm.func @[[P:kv_fwd_[0-9a-f]+]]_prefill(%{{.*}}: !llvm.ptr)
// CHECK-DAG:   llvm.func internal @[[P]]_attention_kernel(
// CHECK-DAG:   llvm.func @kvrt_exec_prefill(!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, !llvm.ptr, i32, i64, !llvm.ptr, i32, i64, !llvm.ptr) -> !llvm.ptr
// CHECK-DAG:   llvm.call @kvrt_exec_empty(
// Each prefill passes the address of the forward and its config key.
// CHECK-DAG:   llvm.mlir.addressof @[[P]]_prefill : !llvm.ptr
// CHECK-DAG:   llvm.mlir.global internal constant @__kvrt_str_{{[0-9]+}}("dim=64 hidden=172 layers=5 heads=8 kv_heads=4 vocab=512 rope=interleaved theta=0x40c3880000000000 eps=0x3ee4f8b588e368f1 kv=f32\00")
// CHECK-DAG:   llvm.call @kvrt_exec_prefill(
// COMPOSE-DAG: llvm.call @kvrt_exec_prefill(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})
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

// SYMBOLS-DAG: U kvrt_exec_prefill
// SYMBOLS-DAG: U kvrt_exec_segment_bounds
// SYMBOLS-DAG: U kvrt_parallel_for
// SYMBOLS-DAG: U kvrt_get_num_threads
// SYMBOLS-NOT: _mlir_ciface
