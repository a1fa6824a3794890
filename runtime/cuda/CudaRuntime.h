//===- CudaRuntime.h - The CUDA driver, opened at run time ------*- C++ -*-===//
//
// KVIR never links libcuda: it opens the driver with dlopen the first time a
// GPU function is used, so everything builds and runs where no GPU is. This
// header is the C interface of that layer:
//
//  - kvrt_cuda_init() opens the driver, finds a device and retains its
//    primary context, which every function here makes current on the thread
//    that calls it (once per thread). It fails with a message naming the
//    problem (no driver library, a driver too old for a needed function, no
//    device, an init error), and may be called again: it only tries once per
//    process.
//  - The mgpu* functions are those that upstream MLIR GPU lowering
//    (gpu-to-llvm) emits calls to; Debian ships no libmlir_cuda_runtime, so
//    KVIR implements them here over the driver API. They cannot return errors,
//    so the first failure is recorded (kvrt_cuda_last_error) and every later
//    mgpu call becomes a no-op returning null: a host program that loads a
//    module where no driver is does not crash, and its runner reports the
//    recorded error and exits non-zero. A failed launch names the kernel,
//    its grid and block; a failed synchronisation names the last launch
//    (a kernel's fault is reported there); a module the driver refuses
//    carries the JIT's error log.
//
// The driver library is libcuda.so.1, or the file named by the environment
// variable KVIR_CUDA_DRIVER (used by tests: a missing or broken driver, or
// test/stub-cuda's checking stub, libkvir-stub-cuda.so).
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CUDA_CUDARUNTIME_H
#define KVIR_RUNTIME_CUDA_CUDARUNTIME_H

#include "runtime/core/KVRuntime.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Opens the driver and makes device 0's primary context current. Returns
/// KVRT_OK, or KVRT_ERR_UNAVAILABLE with the reason in kvrt_last_error() and
/// kvrt_cuda_last_error().
kvrt_status kvrt_cuda_init(void);

/// The first error any CUDA call of this process recorded, or NULL.
const char *kvrt_cuda_last_error(void);

/// Clears the recorded error (tests only; a failed init stays failed).
void kvrt_cuda_clear_error(void);

/// The name of the current device (after a successful init), else "".
const char *kvrt_cuda_device_name(void);

/// The device, its architecture, SMs and memory, and the driver's version
/// ("NVIDIA H200, sm_90, 132 SMs, 139.8 GiB, driver 13.0") after a
/// successful init, else "".
const char *kvrt_cuda_device_description(void);

//===----------------------------------------------------------------------===//
// Device memory for the runtime's own buffers (weights, pages, tables). Each
// fails with KVRT_ERR_UNAVAILABLE and the recorded CUDA error, or (malloc)
// KVRT_ERR_OUT_OF_MEMORY naming the size and the free memory.
//===----------------------------------------------------------------------===//

/// KVRT_OK when the driver is ready and no CUDA error is recorded (a failed
/// launch or copy of generated code included), else the error.
kvrt_status kvrt_cuda_check(void);
kvrt_status kvrt_cuda_malloc(size_t bytes, void **out);
void kvrt_cuda_free(void *ptr);
kvrt_status kvrt_cuda_upload(void *dst, const void *src, size_t bytes);
kvrt_status kvrt_cuda_download(void *dst, const void *src, size_t bytes);
kvrt_status kvrt_cuda_copy(void *dst, const void *src, size_t bytes);
/// Waits for all work of the context; reports a failed kernel.
kvrt_status kvrt_cuda_synchronize(void);

//===----------------------------------------------------------------------===//
// The functions upstream GPU lowering calls (see BUILD-NOTES: gpu-to-llvm).
//===----------------------------------------------------------------------===//

void *mgpuModuleLoad(void *data, size_t size);
void *mgpuModuleLoadJIT(void *data, int optLevel);
void mgpuModuleUnload(void *module);
void *mgpuModuleGetFunction(void *module, const char *name);
void mgpuLaunchKernel(void *function, intptr_t gridX, intptr_t gridY,
                      intptr_t gridZ, intptr_t blockX, intptr_t blockY,
                      intptr_t blockZ, int32_t smem, void *stream,
                      void **params, void **extra, size_t paramsCount);
void *mgpuStreamCreate(void);
void mgpuStreamDestroy(void *stream);
void mgpuStreamSynchronize(void *stream);
void mgpuStreamWaitEvent(void *stream, void *event);
void *mgpuEventCreate(void);
void mgpuEventDestroy(void *event);
void mgpuEventSynchronize(void *event);
void mgpuEventRecord(void *event, void *stream);
void *mgpuMemAlloc(uint64_t sizeBytes, void *stream, bool isHostShared);
void mgpuMemFree(void *ptr, void *stream);
void mgpuMemcpy(void *dst, void *src, size_t sizeBytes, void *stream);
void mgpuMemset32(void *dst, unsigned int value, size_t count, void *stream);
void mgpuSetDefaultDevice(int32_t device);

/// The name and address of every mgpu* function above, terminated by
/// {NULL, NULL}: a JIT binds generated GPU host code with these.
typedef struct kvrt_cuda_symbol {
  const char *name;
  void *address;
} kvrt_cuda_symbol;
const kvrt_cuda_symbol *kvrt_cuda_mgpu_symbols(void);

#ifdef __cplusplus
} // extern "C"
#endif

#endif // KVIR_RUNTIME_CUDA_CUDARUNTIME_H
