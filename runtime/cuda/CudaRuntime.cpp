//===- CudaRuntime.cpp - The CUDA driver, opened at run time ----*- C++ -*-===//
//
// The driver API is declared here by hand (no cuda.h needed): the handful of
// entry points KVIR uses, with the versioned symbol names the driver exports
// (test/stub-cuda, the checking stub CI runs these paths against, exports
// the same names).
//
// A program library's destructor unloads its module when the process exits:
// by then the function-local statics of this library may be destroyed and
// the driver finalised (the loader may finalise libcuda first). So the state is
// never destroyed, and once exit() has begun (an atexit handler, registered
// after the driver was opened, runs before any library is finalised) modules
// are not unloaded: the process's end releases them. The primary context is
// made current on each thread the first time that thread calls (the driver
// keeps the current context per thread).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaRuntime.h"
#include "runtime/core/Support.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = void *;
using CUmodule = void *;
using CUfunction = void *;
using CUstream = void *;
using CUevent = void *;
using CUdeviceptr = uint64_t;

constexpr CUresult kSuccess = 0;
/// CUDA_ERROR_DEINITIALIZED: the driver was torn down (process exit).
constexpr CUresult kDeinitialized = 4;
/// CUjit_option values: the JIT's error log and the optimisation level.
constexpr int kJitErrorLogBuffer = 5, kJitErrorLogBufferSize = 6,
              kJitOptimizationLevel = 7;
/// Bytes of the JIT's error log kept for the message.
constexpr size_t kJitLogBytes = 8192;
/// CUdevice_attribute values for the description of the device.
constexpr int kAttrMultiprocessors = 16, kAttrCapabilityMajor = 75,
              kAttrCapabilityMinor = 76;
/// CU_MEM_ATTACH_GLOBAL.
constexpr unsigned kMemAttachGlobal = 1;

/// The driver entry points, resolved by name from the opened library.
struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDeviceTotalMem)(size_t *, CUdevice);
  CUresult (*cuDriverGetVersion)(int *);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *,
                                 void **);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, CUstream, void **,
                             void **);
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemAllocManaged)(CUdeviceptr *, size_t, unsigned);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*cuCtxSynchronize)(void);
  CUresult (*cuMemGetInfo)(size_t *, size_t *);
};

/// Process-wide state: the driver, the first error, the device, and the
/// name of each kernel (for messages).
struct State {
  std::once_flag once;
  bool ready = false;
  Driver driver{};
  CUcontext context = nullptr;
  std::string error;
  std::string deviceName, deviceDescription;
  std::mutex errorMutex;
  /// exit() has begun: the driver may be finalised before the libraries
  /// whose destructors unload their modules.
  std::atomic<bool> exiting{false};
  std::mutex kernelMutex;
  std::map<CUfunction, std::string> kernelNames;
  /// The last launch (kernel, grid, block, dynamic shared memory): a fault
  /// of a kernel is reported by the next synchronisation, which names it.
  /// Described only then: a launch costs a copy of these numbers.
  struct Launch {
    CUfunction function = nullptr;
    intptr_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
    int32_t smem = 0;
  } lastLaunch;
  /// Streams the generated host code destroyed, kept for its next
  /// mgpuStreamCreate (never given back to the driver): each layer of a
  /// prefill and each attention call creates one, so the driver creates a
  /// handful per process. A stream is reused only after the code that
  /// destroyed it synchronised it (gpu-async-region), and work still queued
  /// on one would only order the next user after it.
  std::mutex streamMutex;
  std::vector<CUstream> freeStreams;
};

/// Never destroyed (see the file comment).
State &state() {
  static State *s = new State();
  return *s;
}

/// Whether the context is current on this thread.
thread_local bool contextCurrent = false;

/// Records the first error of the process (later ones add nothing: the first
/// is the cause).
void record(const std::string &message) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.errorMutex);
  if (s.error.empty())
    s.error = message;
}

std::string describe(CUresult result) {
  const Driver &d = state().driver;
  const char *name = nullptr, *text = nullptr;
  if (d.cuGetErrorName)
    d.cuGetErrorName(result, &name);
  if (d.cuGetErrorString)
    d.cuGetErrorString(result, &text);
  return kvrt::str(name ? name : "CUDA error", " (", result, ")",
                   text ? ": " : "", text ? text : "");
}

/// Resolves every entry point; names the first one missing.
bool resolve(void *library, Driver &d, std::string &missing) {
  bool ok = true;
  auto get = [&](auto &fn, const char *name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
        dlsym(library, name));
    if (!fn && ok) {
      ok = false;
      missing = name;
    }
  };
  get(d.cuInit, "cuInit");
  get(d.cuDeviceGetCount, "cuDeviceGetCount");
  get(d.cuDeviceGet, "cuDeviceGet");
  get(d.cuDeviceGetName, "cuDeviceGetName");
  get(d.cuDeviceGetAttribute, "cuDeviceGetAttribute");
  get(d.cuDeviceTotalMem, "cuDeviceTotalMem_v2");
  get(d.cuDriverGetVersion, "cuDriverGetVersion");
  get(d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  get(d.cuCtxSetCurrent, "cuCtxSetCurrent");
  get(d.cuGetErrorName, "cuGetErrorName");
  get(d.cuGetErrorString, "cuGetErrorString");
  get(d.cuModuleLoadDataEx, "cuModuleLoadDataEx");
  get(d.cuModuleUnload, "cuModuleUnload");
  get(d.cuModuleGetFunction, "cuModuleGetFunction");
  get(d.cuLaunchKernel, "cuLaunchKernel");
  get(d.cuStreamCreate, "cuStreamCreate");
  get(d.cuStreamSynchronize, "cuStreamSynchronize");
  get(d.cuStreamWaitEvent, "cuStreamWaitEvent");
  get(d.cuEventCreate, "cuEventCreate");
  get(d.cuEventDestroy, "cuEventDestroy_v2");
  get(d.cuEventSynchronize, "cuEventSynchronize");
  get(d.cuEventRecord, "cuEventRecord");
  get(d.cuMemAlloc, "cuMemAlloc_v2");
  get(d.cuMemAllocManaged, "cuMemAllocManaged");
  get(d.cuMemFree, "cuMemFree_v2");
  get(d.cuMemcpyAsync, "cuMemcpyAsync");
  get(d.cuMemsetD32Async, "cuMemsetD32Async");
  get(d.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  get(d.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  get(d.cuMemcpyDtoD, "cuMemcpyDtoD_v2");
  get(d.cuCtxSynchronize, "cuCtxSynchronize");
  get(d.cuMemGetInfo, "cuMemGetInfo_v2");
  return ok;
}

/// "NAME, sm_90, 132 SMs, 140.4 GiB, driver 13.0".
std::string describeDevice(const Driver &d, CUdevice device) {
  int major = 0, minor = 0, sms = 0, version = 0;
  size_t bytes = 0;
  d.cuDeviceGetAttribute(&major, kAttrCapabilityMajor, device);
  d.cuDeviceGetAttribute(&minor, kAttrCapabilityMinor, device);
  d.cuDeviceGetAttribute(&sms, kAttrMultiprocessors, device);
  d.cuDeviceTotalMem(&bytes, device);
  d.cuDriverGetVersion(&version);
  char memory[32];
  std::snprintf(memory, sizeof(memory), "%.1f GiB",
                double(bytes) / double(1ull << 30));
  return kvrt::str(state().deviceName, ", sm_", major, minor, ", ", sms,
                   " SMs, ", memory, ", driver ", version / 1000, ".",
                   version % 1000 / 10);
}

void initOnce() {
  State &s = state();
  const char *override = std::getenv("KVIR_CUDA_DRIVER");
  const char *path = override && *override ? override : "libcuda.so.1";
  void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *why = dlerror();
    record(kvrt::str("no CUDA driver: cannot open ", path, " (",
                     why ? why : "unknown reason",
                     "); install the NVIDIA driver or run on a machine with "
                     "a GPU"));
    return;
  }
  std::string missing;
  if (!resolve(library, s.driver, missing)) {
    record(kvrt::str("the CUDA driver ", path, " lacks ", missing,
                     "; it is too old or not a CUDA driver"));
    return;
  }
  std::atexit([] { state().exiting = true; });
  const Driver &d = s.driver;
  if (CUresult r = d.cuInit(0); r != kSuccess) {
    record("cuInit failed: " + describe(r));
    return;
  }
  int count = 0;
  if (CUresult r = d.cuDeviceGetCount(&count); r != kSuccess || count == 0) {
    record(r != kSuccess ? "cannot count CUDA devices: " + describe(r)
                         : std::string("no CUDA device found"));
    return;
  }
  CUdevice device;
  CUcontext context;
  if (CUresult r = d.cuDeviceGet(&device, 0); r != kSuccess) {
    record("cannot get CUDA device 0: " + describe(r));
    return;
  }
  char name[256] = {0};
  d.cuDeviceGetName(name, sizeof(name) - 1, device);
  s.deviceName = name;
  if (CUresult r = d.cuDevicePrimaryCtxRetain(&context, device);
      r != kSuccess) {
    record("cannot create a context on " + s.deviceName + ": " + describe(r));
    return;
  }
  s.deviceDescription = describeDevice(d, device);
  s.context = context;
  s.ready = true;
}

/// The driver, ready for use on this thread (its context current here), or
/// null (with the error recorded) when it is not available or an earlier
/// call failed.
const Driver *driver() {
  State &s = state();
  std::call_once(s.once, initOnce);
  if (!s.ready)
    return nullptr;
  {
    std::lock_guard<std::mutex> lock(s.errorMutex);
    if (!s.error.empty())
      return nullptr;
  }
  if (!contextCurrent) {
    if (CUresult r = s.driver.cuCtxSetCurrent(s.context); r != kSuccess) {
      record("cannot make the CUDA context current on this thread: " +
             describe(r));
      return nullptr;
    }
    contextCurrent = true;
  }
  return &s.driver;
}

/// Records `result` as the error of `what` unless it is a success.
bool check(CUresult result, const char *what) {
  if (result == kSuccess)
    return true;
  record(kvrt::str(what, " failed: ", describe(result)));
  return false;
}

CUdeviceptr devicePtr(void *ptr) { return reinterpret_cast<CUdeviceptr>(ptr); }

} // namespace

extern "C" {

kvrt_status kvrt_cuda_init(void) {
  if (driver())
    return KVRT_OK;
  return kvrt::fail(KVRT_ERR_UNAVAILABLE, kvrt_cuda_last_error());
}

const char *kvrt_cuda_last_error(void) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.errorMutex);
  return s.error.empty() ? nullptr : s.error.c_str();
}

void kvrt_cuda_clear_error(void) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.errorMutex);
  if (s.ready)
    s.error.clear();
}

const char *kvrt_cuda_device_name(void) { return state().deviceName.c_str(); }

const char *kvrt_cuda_device_description(void) {
  return state().deviceDescription.c_str();
}

/// KVRT_ERR_UNAVAILABLE with the recorded CUDA error (the first of the
/// process), or KVRT_OK when none is recorded.
static kvrt_status recordedStatus() {
  const char *error = kvrt_cuda_last_error();
  if (!error)
    return KVRT_OK;
  return kvrt::fail(KVRT_ERR_UNAVAILABLE, error);
}

kvrt_status kvrt_cuda_check(void) {
  if (kvrt_status s = kvrt_cuda_init())
    return s;
  return recordedStatus();
}

kvrt_status kvrt_cuda_malloc(size_t bytes, void **out) {
  if (!out)
    return kvrt::nullArgument(__func__);
  *out = nullptr;
  if (kvrt_status s = kvrt_cuda_check())
    return s;
  const Driver &d = state().driver;
  CUdeviceptr ptr = 0;
  if (CUresult r = d.cuMemAlloc(&ptr, bytes ? bytes : 1); r != kSuccess) {
    size_t freeBytes = 0, totalBytes = 0;
    d.cuMemGetInfo(&freeBytes, &totalBytes);
    // Out of device memory is the caller's to report, not a sticky error.
    return kvrt::fail(KVRT_ERR_OUT_OF_MEMORY,
                      kvrt::str("out of GPU memory: cannot allocate ", bytes,
                                " bytes on ", state().deviceName, " (",
                                freeBytes, " of ", totalBytes,
                                " bytes free): ", describe(r)));
  }
  *out = reinterpret_cast<void *>(ptr);
  return KVRT_OK;
}

void kvrt_cuda_free(void *ptr) {
  if (const Driver *d = driver(); d && ptr)
    check(d->cuMemFree(devicePtr(ptr)), "cuMemFree");
}

kvrt_status kvrt_cuda_upload(void *dst, const void *src, size_t bytes) {
  if (kvrt_status s = kvrt_cuda_check())
    return s;
  if (bytes && !check(state().driver.cuMemcpyHtoD(devicePtr(dst), src, bytes),
                      "cuMemcpyHtoD"))
    return recordedStatus();
  return KVRT_OK;
}

kvrt_status kvrt_cuda_download(void *dst, const void *src, size_t bytes) {
  if (kvrt_status s = kvrt_cuda_check())
    return s;
  if (bytes && !check(state().driver.cuMemcpyDtoH(
                          dst, devicePtr(const_cast<void *>(src)), bytes),
                      "cuMemcpyDtoH"))
    return recordedStatus();
  return KVRT_OK;
}

kvrt_status kvrt_cuda_copy(void *dst, const void *src, size_t bytes) {
  if (kvrt_status s = kvrt_cuda_check())
    return s;
  if (bytes &&
      !check(state().driver.cuMemcpyDtoD(
                 devicePtr(dst), devicePtr(const_cast<void *>(src)), bytes),
             "cuMemcpyDtoD"))
    return recordedStatus();
  return KVRT_OK;
}

/// "kernel NAME, grid XxYxZ, block XxYxZ, N bytes of dynamic shared
/// memory" (the caller holds kernelMutex).
static std::string describeLaunch(const State &s, const State::Launch &l) {
  auto it = s.kernelNames.find(l.function);
  return kvrt::str("kernel ", it == s.kernelNames.end() ? "?" : it->second,
                   ", grid ", l.grid[0], "x", l.grid[1], "x", l.grid[2],
                   ", block ", l.block[0], "x", l.block[1], "x", l.block[2],
                   ", ", l.smem, " bytes of dynamic shared memory");
}

/// `what` failed with `result` after the launch recorded last: names it,
/// since a kernel's fault is reported by the next synchronisation.
static bool checkAfterLaunch(CUresult result, const char *what) {
  if (result == kSuccess)
    return true;
  State &s = state();
  std::string last;
  {
    std::lock_guard<std::mutex> lock(s.kernelMutex);
    if (s.lastLaunch.function)
      last = describeLaunch(s, s.lastLaunch);
  }
  record(kvrt::str(what, " failed: ", describe(result),
                   last.empty() ? "" : " (the last launch: ", last,
                   last.empty() ? "" : ")"));
  return false;
}

kvrt_status kvrt_cuda_synchronize(void) {
  if (kvrt_status s = kvrt_cuda_check())
    return s;
  if (!checkAfterLaunch(state().driver.cuCtxSynchronize(), "cuCtxSynchronize"))
    return recordedStatus();
  return KVRT_OK;
}

/// Loads a module image (cubin or PTX) with the JIT's error log kept:
/// without it an invalid PTX says only CUDA_ERROR_INVALID_PTX.
static CUmodule loadModule(const Driver &d, const void *data, int optLevel,
                           const char *what) {
  CUmodule module = nullptr;
  std::vector<char> log(kJitLogBytes, '\0');
  int options[] = {kJitErrorLogBuffer, kJitErrorLogBufferSize,
                   kJitOptimizationLevel};
  void *values[] = {log.data(), reinterpret_cast<void *>(log.size()),
                    reinterpret_cast<void *>(static_cast<intptr_t>(optLevel))};
  unsigned count = optLevel >= 0 ? 3 : 2;
  CUresult r = d.cuModuleLoadDataEx(&module, data, count, options, values);
  if (r == kSuccess)
    return module;
  std::string text(log.data(), strnlen(log.data(), log.size()));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  record(kvrt::str(what, " failed: ", describe(r),
                   text.empty() ? "" : "; the JIT's log: ", text));
  return nullptr;
}

void *mgpuModuleLoad(void *data, size_t) {
  const Driver *d = driver();
  return d ? loadModule(*d, data, -1, "cuModuleLoadDataEx (cubin)") : nullptr;
}

void *mgpuModuleLoadJIT(void *data, int optLevel) {
  const Driver *d = driver();
  return d ? loadModule(*d, data, optLevel, "cuModuleLoadDataEx (PTX JIT)")
           : nullptr;
}

void mgpuModuleUnload(void *module) {
  if (state().exiting)
    return;
  const Driver *d = driver();
  if (!d || !module)
    return;
  // A driver that was finalised all the same has released the module.
  if (CUresult r = d->cuModuleUnload(module); r != kDeinitialized)
    check(r, "cuModuleUnload");
}

void *mgpuModuleGetFunction(void *module, const char *name) {
  const Driver *d = driver();
  CUfunction function = nullptr;
  if (!d || !module)
    return nullptr;
  if (!check(d->cuModuleGetFunction(&function, module, name),
             kvrt::str("cuModuleGetFunction of ", name).c_str()))
    return nullptr;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.kernelMutex);
  s.kernelNames[function] = name;
  return function;
}

void mgpuLaunchKernel(void *function, intptr_t gridX, intptr_t gridY,
                      intptr_t gridZ, intptr_t blockX, intptr_t blockY,
                      intptr_t blockZ, int32_t smem, void *stream,
                      void **params, void **extra, size_t) {
  const Driver *d = driver();
  if (!d || !function)
    return;
  State &s = state();
  State::Launch launch{static_cast<CUfunction>(function),
                       {gridX, gridY, gridZ},
                       {blockX, blockY, blockZ},
                       smem};
  {
    std::lock_guard<std::mutex> lock(s.kernelMutex);
    s.lastLaunch = launch;
  }
  CUresult result =
      d->cuLaunchKernel(function, gridX, gridY, gridZ, blockX, blockY, blockZ,
                        smem, stream, params, extra);
  if (result != kSuccess) {
    std::string what;
    {
      std::lock_guard<std::mutex> lock(s.kernelMutex);
      what = describeLaunch(s, launch);
    }
    check(result, kvrt::str("cuLaunchKernel (", what, ")").c_str());
  }
}

void *mgpuStreamCreate(void) {
  const Driver *d = driver();
  CUstream stream = nullptr;
  if (!d)
    return nullptr;
  State &s = state();
  {
    std::lock_guard<std::mutex> lock(s.streamMutex);
    if (!s.freeStreams.empty()) {
      stream = s.freeStreams.back();
      s.freeStreams.pop_back();
      return stream;
    }
  }
  check(d->cuStreamCreate(&stream, 0), "cuStreamCreate");
  return stream;
}

/// Keeps the stream for the next mgpuStreamCreate (State::freeStreams).
void mgpuStreamDestroy(void *stream) {
  if (const Driver *d = driver(); d && stream) {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.streamMutex);
    s.freeStreams.push_back(static_cast<CUstream>(stream));
  }
}

void mgpuStreamSynchronize(void *stream) {
  if (const Driver *d = driver())
    checkAfterLaunch(d->cuStreamSynchronize(stream), "cuStreamSynchronize");
}

void mgpuStreamWaitEvent(void *stream, void *event) {
  if (const Driver *d = driver(); d && event)
    check(d->cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent");
}

void *mgpuEventCreate(void) {
  const Driver *d = driver();
  CUevent event = nullptr;
  if (d)
    check(d->cuEventCreate(&event, 0), "cuEventCreate");
  return event;
}

void mgpuEventDestroy(void *event) {
  if (const Driver *d = driver(); d && event)
    check(d->cuEventDestroy(event), "cuEventDestroy");
}

void mgpuEventSynchronize(void *event) {
  if (const Driver *d = driver(); d && event)
    checkAfterLaunch(d->cuEventSynchronize(event), "cuEventSynchronize");
}

void mgpuEventRecord(void *event, void *stream) {
  if (const Driver *d = driver(); d && event)
    check(d->cuEventRecord(event, stream), "cuEventRecord");
}

void *mgpuMemAlloc(uint64_t sizeBytes, void *, bool isHostShared) {
  const Driver *d = driver();
  CUdeviceptr ptr = 0;
  if (!d || sizeBytes == 0)
    return nullptr;
  bool ok = isHostShared
                ? check(d->cuMemAllocManaged(&ptr, sizeBytes, kMemAttachGlobal),
                        "cuMemAllocManaged")
                : check(d->cuMemAlloc(&ptr, sizeBytes), "cuMemAlloc");
  return ok ? reinterpret_cast<void *>(ptr) : nullptr;
}

void mgpuMemFree(void *ptr, void *) {
  if (const Driver *d = driver(); d && ptr)
    check(d->cuMemFree(devicePtr(ptr)), "cuMemFree");
}

void mgpuMemcpy(void *dst, void *src, size_t sizeBytes, void *stream) {
  if (const Driver *d = driver(); d && dst && src)
    check(d->cuMemcpyAsync(devicePtr(dst), devicePtr(src), sizeBytes, stream),
          "cuMemcpyAsync");
}

void mgpuMemset32(void *dst, unsigned int value, size_t count, void *stream) {
  if (const Driver *d = driver(); d && dst)
    check(d->cuMemsetD32Async(devicePtr(dst), value, count, stream),
          "cuMemsetD32Async");
}

void mgpuSetDefaultDevice(int32_t device) {
  if (device != 0)
    record(kvrt::str("device ", device,
                     " requested; this runtime drives device 0 only"));
}

const kvrt_cuda_symbol *kvrt_cuda_mgpu_symbols(void) {
#define KVRT_MGPU(name)                                                        \
  { #name, reinterpret_cast < void *>(&name) }
  static const kvrt_cuda_symbol symbols[] = {
      KVRT_MGPU(mgpuModuleLoad),
      KVRT_MGPU(mgpuModuleLoadJIT),
      KVRT_MGPU(mgpuModuleUnload),
      KVRT_MGPU(mgpuModuleGetFunction),
      KVRT_MGPU(mgpuLaunchKernel),
      KVRT_MGPU(mgpuStreamCreate),
      KVRT_MGPU(mgpuStreamDestroy),
      KVRT_MGPU(mgpuStreamSynchronize),
      KVRT_MGPU(mgpuStreamWaitEvent),
      KVRT_MGPU(mgpuEventCreate),
      KVRT_MGPU(mgpuEventDestroy),
      KVRT_MGPU(mgpuEventSynchronize),
      KVRT_MGPU(mgpuEventRecord),
      KVRT_MGPU(mgpuMemAlloc),
      KVRT_MGPU(mgpuMemFree),
      KVRT_MGPU(mgpuMemcpy),
      KVRT_MGPU(mgpuMemset32),
      KVRT_MGPU(mgpuSetDefaultDevice),
      {nullptr, nullptr},
  };
#undef KVRT_MGPU
  return symbols;
}

} // extern "C"
