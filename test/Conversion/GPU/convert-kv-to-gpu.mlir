// convert-kv-to-gpu emits the GPU forward of each kv.forward model: kernels in
// a gpu.module, host functions that launch them; no toolkit needed.
// RUN: kv-opt %s --convert-kv-to-gpu -split-input-file -verify-diagnostics | FileCheck %s

// The kernels of stories260K's shape and the launches of one layer.
// CHECK: module attributes {gpu.container_module}
// CHECK-NOT: kv.forward
// CHECK: gpu.module @tiny_kernels
// CHECK: func.func private @tiny_rope_cs(%{{.*}}: i64, %{{.*}}: index) -> (f64, f64)
// CHECK: math.powf %{{.*}}, %{{.*}} : f64
// CHECK: math.cos %{{.*}} : f64
// CHECK: math.sin %{{.*}} : f64
// CHECK: func.func private @tiny_warp_sum
// CHECK: gpu.shuffle xor
// CHECK: gpu.func @tiny_rmsnorm({{.*}}) workgroup(%{{.*}} : memref<256xf64, #gpu.address_space<workgroup>>) kernel
// CHECK: gpu.func @tiny_matmul(
// CHECK: gpu.func @tiny_swiglu(
// CHECK: gpu.func @tiny_store_kv(
// CHECK: gpu.func @tiny_attn_tile({{.*}}) workgroup(%{{.*}} : memref<8xf32, #gpu.address_space<workgroup>>
// CHECK: vector<1xf32>
// CHECK: gpu.func @tiny_attn_merge(
// CHECK: func.func @tiny_attention({{.*}}) attributes {llvm.emit_c_interface}
// CHECK: gpu.launch_func @tiny_kernels::@tiny_attn_tile
// CHECK: gpu.launch_func @tiny_kernels::@tiny_attn_merge
// CHECK: func.func @tiny_prefill({{.*}}) attributes {llvm.emit_c_interface}
// CHECK: scf.for
// CHECK: gpu.launch_func @tiny_kernels::@tiny_rmsnorm
// CHECK: gpu.launch_func @tiny_kernels::@tiny_store_kv
// CHECK-NOT: fastmath
module attributes {kv.forward = {tiny = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>}} {}

// -----

// Head size 128: four elements per lane of the attention warps.
// CHECK-LABEL: gpu.module @big_kernels
// CHECK: gpu.func @big_attn_tile
// CHECK: vector.load %{{.*}} : memref<?xf32>, vector<4xf32>
module attributes {kv.forward = {big = !kv.model<dim = 1024, hidden = 2816, layers = 2, heads = 8, kv_heads = 8, vocab = 64>}} {}

// -----

// @negative_head_size: a head too large for one thread per RoPE pair.
// expected-error @below {{cannot build the GPU forward 'huge': head size 4096 exceeds 1024}}
module attributes {kv.forward = {huge = !kv.model<dim = 4096, hidden = 64, layers = 1, heads = 1, kv_heads = 1, vocab = 8>}} {}

// -----

// @negative_not_a_model
// expected-error @below {{'kv.forward' entry 'x' must be a !kv.model type, got 3 : i64}}
module attributes {kv.forward = {x = 3}} {}
