// kv-lower-to-nvvm with the target pinned (sm_90, PTX 8.0): kernels to PTX
// with libdevice linked (no unresolved __nv_* call, no approximate sin/cos),
// host code calling the mgpu* runtime functions; cubins that ptxas accepts
// for stories260K, a half-RoPE GQA config and head size 128; a kv program.
// REQUIRES: cuda-toolkit
// RUN: kv-opt %s -split-input-file --kv-lower-to-nvvm="chip=sm_90 features=+ptx80 format=isa toolkit=%cuda_toolkit" -o %t.isa.mlir
// RUN: FileCheck %s < %t.isa.mlir
// RUN: FileCheck %s --check-prefix=PTX < %t.isa.mlir
// RUN: kv-opt %s -split-input-file --kv-lower-to-nvvm="chip=sm_90 features=+ptx80 format=bin toolkit=%cuda_toolkit" | FileCheck %s --check-prefix=CUBIN
// RUN: kv-opt %kvir_src_root/examples/agent-edit.mlir --kv-optimize | kv-opt --kv-lower-to-nvvm="chip=sm_90 features=+ptx80 format=bin toolkit=%cuda_toolkit" | FileCheck %s --check-prefix=AGENT

// stories260K.
module attributes {kv.export_forwards = [!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>]} {}

// CHECK:       gpu.binary @[[P:kv_fwd_[0-9a-f]{16}]]_kernels
// CHECK-SAME:    #nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">
// CHECK-SAME:    .version 8.0
// CHECK-SAME:    .target sm_90
// CHECK-SAME:    .entry rmsnorm
// CHECK-SAME:    .entry matmul
// CHECK-SAME:    .entry swiglu
// CHECK-SAME:    .entry store_kv
// CHECK-SAME:    .entry attn_tile
// CHECK-SAME:    .entry attn_merge
// CHECK-SAME:    .entry materialize
// Each entry point runs its launches on a stream and waits for them.
// CHECK:       llvm.func @[[P]]_prefill(%{{.*}}: !llvm.ptr)
// CHECK:         llvm.call @mgpuStreamCreate
// CHECK:         gpu.launch_func <%{{.*}} : !llvm.ptr> @[[P]]_kernels::@rmsnorm
// CHECK:         gpu.launch_func <%{{.*}} : !llvm.ptr> @[[P]]_kernels::@store_kv
// CHECK:         llvm.call @mgpuStreamSynchronize
// CHECK:       llvm.func @[[P]]_attention(%{{.*}}: !llvm.ptr)
// CHECK:         llvm.call @mgpuStreamCreate
// CHECK:         gpu.launch_func <%{{.*}} : !llvm.ptr> @[[P]]_kernels::@attn_tile
// CHECK:         gpu.launch_func <%{{.*}} : !llvm.ptr> @[[P]]_kernels::@attn_merge
// CHECK:         llvm.call @mgpuStreamSynchronize
// CHECK:       llvm.func @[[P]]_materialize(%{{.*}}: !llvm.ptr)
// CHECK:         gpu.launch_func <%{{.*}} : !llvm.ptr> @[[P]]_kernels::@materialize
// CHECK:         llvm.call @mgpuStreamSynchronize
// CHECK-NOT:   func.func
// CHECK-NOT:   scf.

// No approximate sine or cosine (RoPE angles are exact to f64), no call left
// unresolved (libdevice linked) in any of the PTX.
// PTX-NOT:     sin.approx
// PTX-NOT:     cos.approx
// PTX-NOT:     .extern .func

// CUBIN:       gpu.binary @kv_fwd_{{[0-9a-f]+}}_kernels {{.*}}#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">, properties = {{.*}}, bin = "\7FELF
// CUBIN:       gpu.binary @kv_fwd_{{[0-9a-f]+}}_kernels {{.*}}bin = "\7FELF
// CUBIN:       gpu.binary @kv_fwd_{{[0-9a-f]+}}_kernels {{.*}}bin = "\7FELF

// -----

// Half RoPE, GQA, theta 1e6.
module attributes {kv.export_forwards = [!kv.model<dim = 256, hidden = 512, layers = 3, heads = 4, kv_heads = 2, vocab = 300, rope = half, theta = 1000000.0>]} {}

// CHECK:       gpu.binary @kv_fwd_{{[0-9a-f]+}}_kernels
// CHECK-SAME:    .entry attn_tile

// -----

// Head size 128: four elements per lane of the attention warps.
module attributes {kv.export_forwards = [!kv.model<dim = 1024, hidden = 2816, layers = 8, heads = 8, kv_heads = 8, vocab = 1024>]} {}

// CHECK:       gpu.binary @kv_fwd_{{[0-9a-f]+}}_kernels
// CHECK-SAME:    .entry attn_tile

// -----

// f16 and bf16 pages, head size 128: the kernels that touch pages read and
// write 16-bit elements (f16 through cvt, bf16 through integer bit
// arithmetic), ptxas takes both.
module attributes {kv.export_forwards = [[!kv.model<dim = 1024, hidden = 2816, layers = 2, heads = 8, kv_heads = 4, vocab = 1024>, f16], [!kv.model<dim = 1024, hidden = 2816, layers = 2, heads = 8, kv_heads = 4, vocab = 1024>, bf16]]} {}

// CHECK:       gpu.binary @kv_fwd_{{[0-9a-f]+}}_kernels
// CHECK-SAME:    .entry store_kv
// CHECK-SAME:    cvt.rn.f16.f32
// CHECK-SAME:    .entry attn_tile
// CHECK-SAME:    cvt.f32.f16
// CHECK:       gpu.binary @kv_fwd_{{[0-9a-f]+}}_kernels
// CHECK-SAME:    .entry store_kv
// CHECK-SAME:    st.global.b16
// CHECK-SAME:    .entry attn_tile
// CHECK-SAME:    ld.global.b16

// The agent example: its prefills call the runtime with the GPU forward's
// entry point; the kernels are one cubin.
// AGENT:       llvm.func @_kvrt_entry_main(
// AGENT:         %[[ENTRY:.+]] = llvm.mlir.addressof @[[P:kv_fwd_[0-9a-f]{16}]]_prefill : !llvm.ptr
// AGENT:         llvm.call @kvrt_exec_prefill(%{{.*}}, %{{.*}}, %{{.*}}, %[[ENTRY]],
// AGENT:       gpu.binary @[[P]]_kernels {{.*}}bin = "\7FELF
// AGENT:       llvm.func @[[P]]_prefill(%{{.*}}: !llvm.ptr)
// AGENT:         gpu.launch_func <%{{.*}} : !llvm.ptr> @[[P]]_kernels::@attn_tile
