//===- CudaRuntimeTest.cpp - The CUDA layer without a usable driver -*- C++
//-*-===//
//
// Each case runs in a child process (a death test), since the driver is opened
// once per process: KVIR_CUDA_DRIVER selects what that process finds.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaRuntime.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

namespace {

/// In the child: points the runtime at `driver`, initialises, prints the
/// error, and exits 3 on failure (0 on success).
[[noreturn]] void initWith(const char *driver) {
  setenv("KVIR_CUDA_DRIVER", driver, 1);
  kvrt_status status = kvrt_cuda_init();
  if (status == KVRT_OK)
    std::exit(0);
  std::fprintf(stderr, "status=%s error=%s\n", kvrt_status_name(status),
               kvrt_last_error());
  std::exit(3);
}

TEST(CudaRuntimeDeathTest, MissingDriverIsAClearError) {
  EXPECT_EXIT(initWith("/nonexistent/libcuda.so.1"), testing::ExitedWithCode(3),
              "status=unavailable error=no CUDA driver: cannot open "
              "/nonexistent/libcuda.so.1");
}

TEST(CudaRuntimeDeathTest, ALibraryThatIsNotADriverIsNamed) {
  // libm opens fine but exports none of the driver's functions.
  EXPECT_EXIT(initWith("libm.so.6"), testing::ExitedWithCode(3),
              "the CUDA driver libm.so.6 lacks cuInit");
}

TEST(CudaRuntimeDeathTest, MgpuCallsWithoutADriverDoNotCrash) {
  // What a host program compiled by gpu-to-llvm does at start-up and when it
  // runs: with no driver every call is a no-op and the first error is kept.
  auto run = [] {
    setenv("KVIR_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
    char image[] = "not a cubin";
    void *module = mgpuModuleLoad(image, sizeof(image));
    void *function = mgpuModuleGetFunction(module, "kernel");
    void *stream = mgpuStreamCreate();
    void *buffer = mgpuMemAlloc(1024, stream, false);
    mgpuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr,
                     0);
    mgpuMemcpy(buffer, image, sizeof(image), stream);
    mgpuStreamSynchronize(stream);
    mgpuMemFree(buffer, stream);
    mgpuStreamDestroy(stream);
    mgpuModuleUnload(module);
    bool allNull = !module && !function && !stream && !buffer;
    std::fprintf(stderr, "null=%d error=%s\n", allNull, kvrt_cuda_last_error());
    std::exit(allNull ? 4 : 5);
  };
  EXPECT_EXIT(run(), testing::ExitedWithCode(4),
              "null=1 error=no CUDA driver: cannot open");
}

} // namespace

#include "runtime/cuda/CudaBackend.h"

namespace {

TEST(CudaRuntimeDeathTest, CudaBackendWithoutADriverIsAClearError) {
  auto run = [] {
    setenv("KVIR_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
    kvrt_model_config config;
    kvrt_model_config_init(&config);
    kvrt_model *model = nullptr;
    if (kvrt_model_synthetic(&config, 1, &model) != KVRT_OK)
      std::exit(6);
    std::string error;
    auto backend = kvir::cuda::createCudaBackend(model, &error);
    kvrt_model_release(model);
    std::fprintf(stderr, "null=%d error=%s\n", backend == nullptr,
                 error.c_str());
    std::exit(backend ? 5 : 4);
  };
  EXPECT_EXIT(run(), testing::ExitedWithCode(4),
              "null=1 error=no CUDA driver: cannot open");
}

TEST(CudaRuntimeDeathTest, DeviceMemoryWithoutADriverIsAnError) {
  auto run = [] {
    setenv("KVIR_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
    void *ptr = reinterpret_cast<void *>(1);
    kvrt_status status = kvrt_cuda_malloc(64, &ptr);
    std::fprintf(stderr, "status=%s null=%d sync=%s\n",
                 kvrt_status_name(status), ptr == nullptr,
                 kvrt_status_name(kvrt_cuda_synchronize()));
    std::exit(status == KVRT_ERR_UNAVAILABLE ? 4 : 5);
  };
  EXPECT_EXIT(run(), testing::ExitedWithCode(4),
              "status=unavailable null=1 sync=unavailable");
}

} // namespace
