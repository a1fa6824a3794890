//===- CudaRuntimeTest.cpp - The CUDA layer without a usable driver -------===//
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

//===----------------------------------------------------------------------===//
// Against the checking stub driver (test/stub-cuda): what a real driver
// refuses, the runtime avoids or reports with the details.
//===----------------------------------------------------------------------===//

#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace {

/// A module of one kernel `k(ptr)`; `extra` is added before it.
std::string stubPtx(const std::string &extra = "") {
  return ".version 8.0\n.target sm_90\n.address_size 64\n" + extra +
         ".visible .entry k(\n\t.param .u64 .ptr .align 1 k_param_0\n)\n{\n"
         "\t.reg .b64 %rd<2>;\n\tld.param.u64 %rd1, [k_param_0];\n"
         "\tst.global.b32 [%rd1], 0;\n\tret;\n}\n";
}

/// In the child: the runtime on the stub, initialised.
void useStub() {
  setenv("KVIR_CUDA_DRIVER", KVIR_STUB_CUDA, 1);
  if (kvrt_cuda_init() != KVRT_OK) {
    std::fprintf(stderr, "init: %s\n", kvrt_last_error());
    std::exit(6);
  }
}

/// In the child: the runtime on the stub, and kernel `k` of stubPtx() loaded
/// through the JIT path.
void *stubKernel() {
  useStub();
  std::string ptx = stubPtx();
  void *module = mgpuModuleLoadJIT(ptx.data(), 3);
  return mgpuModuleGetFunction(module, "k");
}

TEST(CudaRuntimeDeathTest, EveryThreadGetsTheContext) {
  auto run = [] {
    useStub();
    kvrt_status status = KVRT_ERR_INTERNAL;
    std::thread([&] {
      void *ptr = nullptr;
      status = kvrt_cuda_malloc(64, &ptr);
      kvrt_cuda_free(ptr);
    }).join();
    std::fprintf(stderr, "status=%s\n", kvrt_status_name(status));
    std::exit(status == KVRT_OK && !kvrt_cuda_last_error() ? 4 : 5);
  };
  EXPECT_EXIT(run(), testing::ExitedWithCode(4), "status=ok");
}

/// A destroyed stream is kept for the next mgpuStreamCreate: the generated
/// host code creates one per prefill layer and attention call.
TEST(CudaRuntimeDeathTest, DestroyedStreamsAreReused) {
  auto run = [] {
    useStub();
    void *first = mgpuStreamCreate();
    mgpuStreamDestroy(first);
    void *again = mgpuStreamCreate();
    void *other = mgpuStreamCreate();
    mgpuStreamSynchronize(again);
    std::fprintf(stderr, "reused=%d distinct=%d error=%s\n", again == first,
                 other && other != again,
                 kvrt_cuda_last_error() ? kvrt_cuda_last_error() : "none");
    std::exit(first && again == first && other && other != again ? 4 : 5);
  };
  EXPECT_EXIT(run(), testing::ExitedWithCode(4),
              "reused=1 distinct=1 error=none");
}

TEST(CudaRuntimeDeathTest, ARefusedModuleCarriesTheJitLog) {
  auto run = [] {
    useStub();
    std::string ptx =
        stubPtx(".extern .func (.param .b32 r) __nv_expf(.param .b32 x);\n");
    void *module = mgpuModuleLoadJIT(ptx.data(), 3);
    std::fprintf(stderr, "error=%s\n", kvrt_cuda_last_error());
    std::exit(module ? 5 : 4);
  };
  EXPECT_EXIT(run(), testing::ExitedWithCode(4),
              "error=cuModuleLoadDataEx \\(PTX JIT\\) failed: "
              "CUDA_ERROR_INVALID_PTX \\(218\\): a PTX JIT compilation "
              "failed; the JIT's log: ptxas fatal   : Unresolved extern "
              "function '__nv_expf'");
}

TEST(CudaRuntimeDeathTest, AFailedLaunchNamesTheKernelAndItsGrid) {
  auto run = [] {
    void *kernel = stubKernel();
    void *out = mgpuMemAlloc(64, nullptr, false);
    void *params[] = {&out};
    mgpuLaunchKernel(kernel, 1, 70000, 1, 32, 1, 1, 0, nullptr, params, nullptr,
                     1);
    std::fprintf(stderr, "error=%s\n", kvrt_cuda_last_error());
    std::exit(kernel && out ? 4 : 5);
  };
  EXPECT_EXIT(run(), testing::ExitedWithCode(4),
              "error=cuLaunchKernel \\(kernel k, grid 1x70000x1, block "
              "32x1x1, 0 bytes of dynamic shared memory\\) failed: "
              "CUDA_ERROR_INVALID_VALUE");
}

TEST(CudaRuntimeDeathTest, AFaultIsReportedWithTheLastLaunch) {
  auto run = [] {
    void *kernel = stubKernel();
    // A host pointer where the kernel dereferences device memory.
    int host = 0;
    void *out = &host;
    void *params[] = {&out};
    mgpuLaunchKernel(kernel, 2, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr, 1);
    kvrt_status status = kvrt_cuda_synchronize();
    std::fprintf(stderr, "status=%s error=%s\n", kvrt_status_name(status),
                 kvrt_cuda_last_error());
    std::exit(status == KVRT_ERR_UNAVAILABLE ? 4 : 5);
  };
  EXPECT_EXIT(run(), testing::ExitedWithCode(4),
              "error=cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS "
              "\\(700\\): an illegal memory access was encountered \\(the "
              "last launch: kernel k, grid 2x1x1");
}

TEST(CudaRuntimeDeathTest, ModulesAreNotUnloadedOnceTheProcessExits) {
  // A program library unloads its module from a destructor that runs after
  // the driver may be finalised (the stub is, and refuses the call): once
  // exit() has begun the runtime leaves the module to the process's end.
  std::string log = testing::TempDir() + "/kvir-unload-at-exit.log";
  std::remove(log.c_str());
  auto run = [&] {
    setenv("KVIR_STUB_CUDA_LOG", log.c_str(), 1);
    setenv("KVIR_STUB_CUDA_TRACE", "1", 1);
    // Destroyed after the runtime's exit handler ran (constructed before).
    static void *module = nullptr;
    static struct Unload {
      ~Unload() { mgpuModuleUnload(module); }
    } unload;
    useStub();
    std::string ptx = stubPtx();
    module = mgpuModuleLoadJIT(ptx.data(), 3);
    std::exit(module ? 4 : 5);
  };
  EXPECT_EXIT(run(), testing::ExitedWithCode(4), "");
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("call cuModuleLoadDataEx"), std::string::npos)
      << text.str();
  EXPECT_EQ(text.str().find("cuModuleUnload"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("0 refused, 0 faults"), std::string::npos)
      << text.str();
}

} // namespace
