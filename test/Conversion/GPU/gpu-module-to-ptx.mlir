// kv-opt carries the GPU pipeline stages and their registrations: a kernel
// using math.exp goes to PTX for the H200 (sm_90, PTX 8.0) with libdevice
// linked from the toolkit, and ptxas assembles it.
// REQUIRES: cuda-toolkit
// RUN: kv-opt %s --nvvm-attach-target="chip=sm_90 features=+ptx80" --convert-gpu-to-nvvm --gpu-module-to-binary="format=isa toolkit=%cuda_toolkit" | FileCheck %s
// RUN: kv-opt %s --nvvm-attach-target="chip=sm_90 features=+ptx80" --convert-gpu-to-nvvm --gpu-module-to-binary="format=bin toolkit=%cuda_toolkit" | FileCheck %s --check-prefix=CUBIN

// CHECK: gpu.binary @kernels
// CHECK-SAME: #nvvm.target<chip = "sm_90", features = "+ptx80">
// CHECK-SAME: .target sm_90
// CHECK-NOT: __nv_expf
// CUBIN: gpu.binary @kernels {{.*}}bin = "
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @exp_in_place(%a: memref<?xf32>) kernel {
      %i = gpu.thread_id x
      %v = memref.load %a[%i] : memref<?xf32>
      %e = math.exp %v : f32
      memref.store %e, %a[%i] : memref<?xf32>
      gpu.return
    }
  }
}
