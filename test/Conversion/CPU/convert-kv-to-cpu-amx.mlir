// REQUIRES: amx
// RUN: kv-opt %s --convert-kv-to-cpu=quant-dot=amx | FileCheck %s
// RUN: kv-opt %s --convert-kv-to-cpu | FileCheck %s
// RUN: kv-opt %s --kv-lower-to-cpu=quant-dot=amx | FileCheck %s --check-prefix=LLVM
// RUN: kv-opt %s --convert-kv-to-cpu=quant-dot=int8 | FileCheck %s --check-prefix=INT8

// quant-dot=amx (and auto on a host with AMX): a Q8_0 or Q4_K prefill's
// tiles on AMX. matmul_q8_0 asks Linux for the tile state (arch_prctl
// through libc's syscall); where it is granted it packs the panels unbiased
// and runs the AMX tile task, where not it packs them biased for the VNNI
// tile task. Per block and panel one tdpbssd of the tokens' quants (16 x 32)
// and the panel's weights (8 x 64), both signed, stored and scaled by
// AVX-512; Q4_K (w1) the same with its unsigned quants a byte (tdpbsud). The
// decode tiles and Q6_K (the classifier) stay VNNI.
!m = !kv.model<dim = 256, hidden = 512, layers = 2, heads = 2, kv_heads = 1, vocab = 32>
module attributes {kv.export_forwards = [!m], kv.weight_formats = [[!m, "wq:q8_0;wk:q8_0;wv:q8_0;wo:q8_0;w1:q4_k;w2:q8_0;w3:q8_0;wcls:q6_k"]]} {
}

// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0(
// CHECK:         %[[ASKED:.+]] = llvm.call @syscall(%{{.*}}, %{{.*}}, %{{.*}}) vararg(!llvm.func<i64 (i64, ...)>)
// CHECK:         %[[GRANTED:.+]] = arith.cmpi eq, %[[ASKED]]
// CHECK:         scf.if %[[GRANTED]] {
// CHECK:           func.constant @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0_amx_pack_task
// CHECK:           func.constant @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0_amx_tile_task
// CHECK:         } else {
// CHECK:           func.constant @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0_pack_task
// CHECK:           func.constant @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0_tile_task
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0_dot_task(
// CHECK-NOT:     amx.
// CHECK:         llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK:       llvm.func @syscall(i64, ...) -> i64
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0_amx_tile_task(
// CHECK:         memref.alloca() {alignment = 64 : i64} : memref<8192xi32>
// CHECK:         amx.tile_load %{{.*}} : memref<?xi8> into !amx.tile<16x32xi8>
// CHECK:         amx.tile_load %{{.*}} : memref<?xi8> into !amx.tile<8x64xi8>
// CHECK:         amx.tile_zero : !amx.tile<16x16xi32>
// CHECK:         amx.tile_muli %{{.*}}, %{{.*}}, %{{.*}} : !amx.tile<16x32xi8>, !amx.tile<8x64xi8>, !amx.tile<16x16xi32>
// CHECK:         amx.tile_store %{{.*}} : memref<8192xi32>, !amx.tile<16x16xi32>
// CHECK:         arith.sitofp %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK:         vector.fma
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q4_k(
// CHECK:         func.constant @{{kv_fwd_[0-9a-f]+}}_matmul_q4_k_amx_tile_task
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q4_k_amx_tile_task(
// CHECK:         amx.tile_muli %{{.*}}, %{{.*}} zext, %{{.*}} : !amx.tile<16x32xi8>, !amx.tile<8x64xi8>, !amx.tile<16x16xi32>
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q6_k(
// CHECK-NOT:     amx_tile_task

// LLVM-LABEL: llvm.func internal @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0_amx_tile_task(
// LLVM:         llvm.call_intrinsic "llvm.x86.tileloadd64.internal"
// LLVM:         llvm.call_intrinsic "llvm.x86.tdpbssd.internal"
// LLVM:         llvm.call_intrinsic "llvm.x86.tilestored64.internal"

// INT8-NOT: amx.
// INT8-NOT: @syscall
