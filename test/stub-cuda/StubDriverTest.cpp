//===- StubDriverTest.cpp - What the stub CUDA driver refuses ---*- C++ -*-===//
//
// The stub is opened with dlopen, as the runtime opens a driver, and called
// with what a real device refuses: each case checks the CUresult and, where
// it matters, the line the stub logs.
//
//===----------------------------------------------------------------------===//

#include <dlfcn.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using CUdeviceptr = uint64_t;

/// The stub's entry points, resolved by their exported names.
struct Api {
  int (*init)(unsigned);
  int (*deviceGetCount)(int *);
  int (*primaryCtxRetain)(void **, int);
  int (*ctxSetCurrent)(void *);
  int (*ctxSynchronize)();
  int (*moduleLoadData)(void **, const void *);
  int (*moduleLoadDataEx)(void **, const void *, unsigned, int *, void **);
  int (*moduleUnload)(void *);
  int (*moduleGetFunction)(void **, void *, const char *);
  int (*funcGetAttribute)(int *, int, void *);
  int (*launchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                      unsigned, unsigned, void *, void **, void **);
  int (*memAlloc)(CUdeviceptr *, size_t);
  int (*memFree)(CUdeviceptr);
  int (*memcpyHtoD)(CUdeviceptr, const void *, size_t);
  int (*memcpyDtoH)(void *, CUdeviceptr, size_t);
  int (*memcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, void *);
  void *context = nullptr;
};

template <typename Fn> void resolve(void *library, Fn &fn, const char *name) {
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  if (!fn) {
    std::fprintf(stderr, "the stub lacks %s\n", name);
    std::abort();
  }
}

/// The stub, opened once per process (as the runtime does), initialised,
/// its context current on the calling thread when `ready`.
Api &api(bool ready = true) {
  static Api a = [] {
    Api a{};
    void *library = dlopen(KVIR_STUB_CUDA, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      std::fprintf(stderr, "cannot open the stub: %s\n", dlerror());
      std::abort();
    }
    resolve(library, a.init, "cuInit");
    resolve(library, a.deviceGetCount, "cuDeviceGetCount");
    resolve(library, a.primaryCtxRetain, "cuDevicePrimaryCtxRetain");
    resolve(library, a.ctxSetCurrent, "cuCtxSetCurrent");
    resolve(library, a.ctxSynchronize, "cuCtxSynchronize");
    resolve(library, a.moduleLoadData, "cuModuleLoadData");
    resolve(library, a.moduleLoadDataEx, "cuModuleLoadDataEx");
    resolve(library, a.moduleUnload, "cuModuleUnload");
    resolve(library, a.moduleGetFunction, "cuModuleGetFunction");
    resolve(library, a.funcGetAttribute, "cuFuncGetAttribute");
    resolve(library, a.launchKernel, "cuLaunchKernel");
    resolve(library, a.memAlloc, "cuMemAlloc_v2");
    resolve(library, a.memFree, "cuMemFree_v2");
    resolve(library, a.memcpyHtoD, "cuMemcpyHtoD_v2");
    resolve(library, a.memcpyDtoH, "cuMemcpyDtoH_v2");
    resolve(library, a.memcpyAsync, "cuMemcpyAsync");
    return a;
  }();
  if (ready && !a.context) {
    EXPECT_EQ(a.init(0), 0);
    EXPECT_EQ(a.primaryCtxRetain(&a.context, 0), 0);
  }
  if (ready)
    EXPECT_EQ(a.ctxSetCurrent(a.context), 0);
  return a;
}

constexpr int kInvalidValue = 1, kNotInitialized = 3, kInvalidImage = 200,
              kInvalidContext = 201, kInvalidPtx = 218, kInvalidHandle = 400,
              kNotFound = 500, kIllegalAddress = 700, kMisaligned = 716;

/// A kernel `k` with one pointer parameter and 2 KiB of shared memory
/// (aligned for its v4 loads unless `align` says otherwise); `extra` is
/// appended to the module.
std::string ptx(int align = 16, const std::string &extra = "") {
  return ".version 8.0\n.target sm_90\n.address_size 64\n" + extra +
         ".visible .entry k(\n\t.param .u64 .ptr .align 1 k_param_0\n)\n{\n"
         "\t.shared .align " +
         std::to_string(align) +
         " .b8 buf[2048];\n\t.reg .b32 %r<5>;\n\t.reg .b64 %rd<2>;\n"
         "\tld.param.u64 %rd1, [k_param_0];\n"
         "\tld.shared.v4.b32 {%r1, %r2, %r3, %r4}, [buf];\n"
         "\tst.global.b32 [%rd1], %r1;\n\tret;\n}\n";
}

/// The kernel of `text`, loaded.
void *kernelOf(const std::string &text) {
  void *module = nullptr, *kernel = nullptr;
  EXPECT_EQ(api().moduleLoadData(&module, text.c_str()), 0);
  EXPECT_EQ(api().moduleGetFunction(&kernel, module, "k"), 0);
  return kernel;
}

TEST(StubCudaDeathTest, CallsBeforeCuInitAreRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto run = [] {
    int count = 0;
    std::exit(api(false).deviceGetCount(&count) == kNotInitialized ? 4 : 5);
  };
  EXPECT_EXIT(run(), testing::ExitedWithCode(4),
              "REFUSED cuDeviceGetCount: called before cuInit "
              "\\(CUDA_ERROR_NOT_INITIALIZED\\)");
}

TEST(StubCudaTest, EachThreadNeedsTheContextCurrent) {
  Api &a = api();
  CUdeviceptr ptr = 0;
  int withoutContext = -1, withContext = -1;
  std::thread([&] {
    withoutContext = a.memAlloc(&ptr, 64);
    a.ctxSetCurrent(a.context);
    withContext = a.memAlloc(&ptr, 64);
  }).join();
  EXPECT_EQ(withoutContext, kInvalidContext);
  EXPECT_EQ(withContext, 0);
  EXPECT_EQ(a.memFree(ptr), 0);
}

TEST(StubCudaTest, LaunchesOutsideTheDeviceLimitsAreRefused) {
  Api &a = api();
  void *kernel = kernelOf(ptx());
  CUdeviceptr out = 0;
  ASSERT_EQ(a.memAlloc(&out, 64), 0);
  void *params[] = {&out};
  auto launch = [&](unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                    unsigned by, unsigned bz, unsigned smem) {
    return a.launchKernel(kernel, gx, gy, gz, bx, by, bz, smem, nullptr, params,
                          nullptr);
  };
  EXPECT_EQ(launch(1u << 31, 1, 1, 32, 1, 1, 0), kInvalidValue);
  EXPECT_EQ(launch(1, 65536, 1, 32, 1, 1, 0), kInvalidValue);
  EXPECT_EQ(launch(1, 1, 65536, 32, 1, 1, 0), kInvalidValue);
  EXPECT_EQ(launch(0, 1, 1, 32, 1, 1, 0), kInvalidValue);
  EXPECT_EQ(launch(1, 1, 1, 1025, 1, 1, 0), kInvalidValue);
  EXPECT_EQ(launch(1, 1, 1, 1, 1, 65, 0), kInvalidValue);
  EXPECT_EQ(launch(1, 1, 1, 64, 32, 1, 0), kInvalidValue);
  // 2 KiB static: 46 KiB of dynamic shared memory fit, one byte more not.
  EXPECT_EQ(launch(1, 1, 1, 32, 1, 1, 46 * 1024 + 1), kInvalidValue);
  EXPECT_EQ(launch(1, 1, 1, 32, 1, 1, 46 * 1024), 0);
  EXPECT_EQ(launch((1u << 31) - 1, 65535, 65535, 1024, 1, 1, 0), 0);
  int shared = 0;
  EXPECT_EQ(a.funcGetAttribute(&shared, 1, kernel), 0);
  EXPECT_EQ(shared, 2048);
  EXPECT_EQ(a.ctxSynchronize(), 0);
  EXPECT_EQ(a.memFree(out), 0);
}

TEST(StubCudaTest, PointersNeverAllocatedOrFreedAreRefused) {
  Api &a = api();
  CUdeviceptr ptr = 0;
  ASSERT_EQ(a.memAlloc(&ptr, 100), 0);
  std::vector<char> host(200, 1);
  EXPECT_EQ(a.memcpyHtoD(ptr, host.data(), 100), 0);
  EXPECT_EQ(a.memcpyDtoH(host.data(), ptr + 50, 50), 0);
  // Past the end, by one byte.
  EXPECT_EQ(a.memcpyHtoD(ptr + 1, host.data(), 100), kInvalidValue);
  EXPECT_EQ(a.memcpyDtoH(host.data(), ptr, 101), kInvalidValue);
  // A host address where a device address belongs, and the reverse.
  EXPECT_EQ(
      a.memcpyHtoD(reinterpret_cast<CUdeviceptr>(host.data()), host.data(), 8),
      kInvalidValue);
  EXPECT_EQ(a.memcpyHtoD(ptr, reinterpret_cast<void *>(ptr), 8), kInvalidValue);
  EXPECT_EQ(a.memFree(ptr + 8), kInvalidValue);
  EXPECT_EQ(a.memFree(ptr), 0);
  EXPECT_EQ(a.memFree(ptr), kInvalidValue);
  EXPECT_EQ(a.memcpyDtoH(host.data(), ptr, 8), kInvalidValue);
  EXPECT_EQ(a.memcpyAsync(ptr, reinterpret_cast<CUdeviceptr>(host.data()), 8,
                          nullptr),
            kInvalidValue);
  EXPECT_EQ(a.memFree(reinterpret_cast<CUdeviceptr>(host.data())),
            kInvalidValue);
}

TEST(StubCudaTest, ImagesThatAreNotPtxOrACubinAreRefused) {
  Api &a = api();
  void *module = nullptr;
  EXPECT_EQ(a.moduleLoadData(&module, "not a module"), kInvalidImage);
  // An ELF for this machine is no cubin.
  std::ifstream self("/proc/self/exe", std::ios::binary);
  std::vector<char> elf(4096);
  self.read(elf.data(), std::streamsize(elf.size()));
  EXPECT_EQ(a.moduleLoadData(&module, elf.data()), kInvalidImage);
  std::string newer = ptx();
  newer.replace(newer.find("sm_90"), 5, "sm_100");
  EXPECT_EQ(a.moduleLoadData(&module, newer.c_str()), kInvalidPtx);
}

TEST(StubCudaTest, TheJitErrorLogSaysWhy) {
  Api &a = api();
  std::string text = ptx(16, ".extern .func (.param .b32 r) __nv_expf(\n"
                             "\t.param .b32 x\n);\n");
  char log[256] = {};
  int options[] = {5, 6};
  void *values[] = {log, reinterpret_cast<void *>(sizeof(log))};
  void *module = nullptr;
  EXPECT_EQ(a.moduleLoadDataEx(&module, text.c_str(), 2, options, values),
            kInvalidPtx);
  EXPECT_STREQ(log, "ptxas fatal   : Unresolved extern function '__nv_expf'");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(values[1]), std::strlen(log) + 1);
}

TEST(StubCudaTest, KernelsOfAnUnloadedModuleAreRefused) {
  Api &a = api();
  void *module = nullptr, *kernel = nullptr;
  ASSERT_EQ(a.moduleLoadData(&module, ptx().c_str()), 0);
  EXPECT_EQ(a.moduleGetFunction(&kernel, module, "nosuch"), kNotFound);
  ASSERT_EQ(a.moduleGetFunction(&kernel, module, "k"), 0);
  EXPECT_EQ(a.moduleUnload(module), 0);
  CUdeviceptr out = 0;
  void *params[] = {&out};
  EXPECT_EQ(
      a.launchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr),
      kInvalidHandle);
  EXPECT_EQ(a.moduleUnload(module), kInvalidHandle);
}

/// In a child: a launch whose fault is reported, sticky, by the next
/// synchronisation; exits with that error.
[[noreturn]] void faultingLaunch(const std::string &text, bool freeFirst) {
  Api &a = api();
  void *kernel = kernelOf(text);
  CUdeviceptr out = 0;
  a.memAlloc(&out, 64);
  if (freeFirst)
    a.memFree(out);
  void *params[] = {&out};
  int launch =
      a.launchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr);
  int first = a.ctxSynchronize(), second = a.ctxSynchronize();
  std::exit(launch == 0 && first == second ? first : 1);
}

TEST(StubCudaDeathTest, AFreedPointerParameterIsAFault) {
  EXPECT_EXIT(faultingLaunch(ptx(), true),
              testing::ExitedWithCode(kIllegalAddress % 256),
              "FAULT kernel k, grid 1x1x1, block 32x1x1, 0 bytes of dynamic "
              "shared memory: parameter 0 of kernel k is 0x[0-9a-f]+, in "
              "allocation #[0-9]+ of 64 bytes at 0x[0-9a-f]+, freed by "
              "cuMemFree");
}

TEST(StubCudaDeathTest, AMisalignedSharedVectorAccessIsAFault) {
  EXPECT_EXIT(faultingLaunch(ptx(4), false),
              testing::ExitedWithCode(kMisaligned % 256),
              "FAULT kernel k, .*: its ld.shared.v4.b32 accesses 16 bytes at "
              "a time in shared memory, but buf is declared .align 4");
}

TEST(StubCudaTest, CubinsAreReadForSharedMemoryAndRegisters) {
  std::string ptxas = std::string(KVIR_CUDA_TOOLKIT) + "/bin/ptxas";
  if (std::string(KVIR_CUDA_TOOLKIT).empty() || access(ptxas.c_str(), X_OK))
    GTEST_SKIP() << "no CUDA toolkit (ptxas) to assemble a cubin";
  std::string dir = testing::TempDir();
  std::ofstream(dir + "/stub.ptx") << ptx();
  std::string command =
      ptxas + " -arch=sm_90 " + dir + "/stub.ptx -o " + dir + "/stub.cubin";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream in(dir + "/stub.cubin", std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  std::string cubin = bytes.str();
  Api &a = api();
  void *module = nullptr, *kernel = nullptr;
  ASSERT_EQ(a.moduleLoadData(&module, cubin.data()), 0);
  ASSERT_EQ(a.moduleGetFunction(&kernel, module, "k"), 0);
  int shared = 0, registers = 0;
  EXPECT_EQ(a.funcGetAttribute(&shared, 1, kernel), 0);
  EXPECT_EQ(a.funcGetAttribute(&registers, 4, kernel), 0);
  EXPECT_EQ(shared, 2048);
  EXPECT_GT(registers, 0);
  CUdeviceptr out = 0;
  ASSERT_EQ(a.memAlloc(&out, 64), 0);
  void *params[] = {&out};
  EXPECT_EQ(a.launchKernel(kernel, 1, 1, 1, 32, 1, 1, 47 * 1024, nullptr,
                           params, nullptr),
            kInvalidValue);
  EXPECT_EQ(
      a.launchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr),
      0);
  // A cubin for another architecture does not run here.
  command =
      ptxas + " -arch=sm_80 " + dir + "/stub.ptx -o " + dir + "/stub80.cubin";
  std::string ptx80 = ptx();
  ptx80.replace(ptx80.find("sm_90"), 5, "sm_80");
  std::ofstream(dir + "/stub.ptx") << ptx80;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream in80(dir + "/stub80.cubin", std::ios::binary);
  std::stringstream bytes80;
  bytes80 << in80.rdbuf();
  EXPECT_EQ(a.moduleLoadData(&module, bytes80.str().data()), 209);
  EXPECT_EQ(a.memFree(out), 0);
}

} // namespace
