//===- CudaResult.h - CUresult codes the stub driver returns ----*- C++ -*-===//
//
// The values are the driver API's (cuda.h, CUresult); the table gives the
// names and texts cuGetErrorName and cuGetErrorString return for them.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_TEST_STUB_CUDA_CUDARESULT_H
#define KVIR_TEST_STUB_CUDA_CUDARESULT_H

namespace kvir::stubcuda {

#define KVIR_STUB_CUDA_RESULTS(X)                                              \
  X(CUDA_SUCCESS, 0, "no error")                                               \
  X(CUDA_ERROR_INVALID_VALUE, 1, "invalid argument")                           \
  X(CUDA_ERROR_OUT_OF_MEMORY, 2, "out of memory")                              \
  X(CUDA_ERROR_NOT_INITIALIZED, 3, "initialization error")                     \
  X(CUDA_ERROR_DEINITIALIZED, 4, "driver shutting down")                       \
  X(CUDA_ERROR_NO_DEVICE, 100, "no CUDA-capable device is detected")           \
  X(CUDA_ERROR_INVALID_DEVICE, 101, "invalid device ordinal")                  \
  X(CUDA_ERROR_INVALID_IMAGE, 200, "device kernel image is invalid")           \
  X(CUDA_ERROR_INVALID_CONTEXT, 201, "invalid device context")                 \
  X(CUDA_ERROR_NO_BINARY_FOR_GPU, 209,                                         \
    "no kernel image is available for execution on the device")                \
  X(CUDA_ERROR_INVALID_PTX, 218, "a PTX JIT compilation failed")               \
  X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222,                                   \
    "the provided PTX was compiled with an unsupported toolchain.")            \
  X(CUDA_ERROR_INVALID_HANDLE, 400, "invalid resource handle")                 \
  X(CUDA_ERROR_NOT_FOUND, 500, "named symbol not found")                       \
  X(CUDA_ERROR_ILLEGAL_ADDRESS, 700,                                           \
    "an illegal memory access was encountered")                                \
  X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, 701,                                   \
    "too many resources requested for launch")                                 \
  X(CUDA_ERROR_MISALIGNED_ADDRESS, 716, "misaligned address")                  \
  X(CUDA_ERROR_NOT_SUPPORTED, 801, "operation not supported")

enum CudaResult : int {
#define KVIR_STUB_CUDA_RESULT_ENUM(name, value, text) name = value,
  KVIR_STUB_CUDA_RESULTS(KVIR_STUB_CUDA_RESULT_ENUM)
#undef KVIR_STUB_CUDA_RESULT_ENUM
};

} // namespace kvir::stubcuda

#endif // KVIR_TEST_STUB_CUDA_CUDARESULT_H
