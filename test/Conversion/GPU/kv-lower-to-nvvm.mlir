// kv-lower-to-nvvm with the target pinned (sm_90, PTX 8.0): kernels to PTX
// with libdevice linked (no unresolved __nv_* call, no approximate sin/cos),
// host code calling the mgpu* runtime functions; the cubin variant too.
// REQUIRES: cuda-toolkit
// RUN: kv-opt %s --kv-lower-to-nvvm="chip=sm_90 features=+ptx80 format=isa toolkit=%cuda_toolkit" | FileCheck %s
// RUN: kv-opt %s --kv-lower-to-nvvm="format=bin" | FileCheck %s --check-prefix=CUBIN

// CHECK: gpu.binary @tiny_kernels
// CHECK-SAME: #nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">
// CHECK-SAME: .version 8.0
// CHECK-SAME: .target sm_90
// CHECK-SAME: .entry tiny_attn_tile
// CHECK-NOT: sin.approx
// CHECK-NOT: cos.approx
// CHECK-NOT: __nv_
// CHECK: llvm.func @tiny_attention
// CHECK: llvm.call @mgpuStreamCreate
// CHECK: gpu.launch_func <%{{.*}} : !llvm.ptr> @tiny_kernels::@tiny_attn_tile
// CHECK: gpu.launch_func <%{{.*}} : !llvm.ptr> @tiny_kernels::@tiny_attn_merge
// CHECK: llvm.call @mgpuStreamSynchronize
// CHECK: llvm.func @_mlir_ciface_tiny_prefill
// CHECK-NOT: func.func
// CHECK-NOT: scf.

// CUBIN: gpu.binary @tiny_kernels {{.*}}#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">, properties = {{.*}}, bin = "\7FELF
module attributes {kv.forward = {tiny = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>}} {}
