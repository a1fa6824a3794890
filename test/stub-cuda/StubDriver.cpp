//===- StubDriver.cpp - A checking stub of the CUDA driver ------*- C++ -*-===//
//
// libkvir-stub-cuda.so exports the CUDA driver API functions that
// runtime/cuda/CudaRuntime.cpp opens (with their versioned names: cuMemAlloc_v2
// ...), so that KVIR_CUDA_DRIVER=libkvir-stub-cuda.so runs every GPU host
// path of KVIR on a machine without a GPU. It runs no kernel, but it refuses
// what a real H200 (sm_90) would refuse, with the driver's error code and a
// line that names the call and the reason:
//
//  - calls before cuInit, or on a thread where no context is current;
//  - module images that are neither PTX text nor a cubin ELF, PTX the JIT
//    rejects (unresolved externs, a newer ISA or target), cubins for another
//    sm; the JIT's error log is written where CU_JIT_ERROR_LOG_BUFFER says;
//  - launches outside the grid (x < 2^31, y and z <= 65535) and block limits
//    (1024 threads; x, y <= 1024, z <= 64), with more shared memory
//    (static + dynamic) or registers than a block has, of kernels of an
//    unloaded module, with parameters the image does not declare;
//  - device pointers never allocated or already freed, copies past the end
//    of an allocation, frees of pointers that are not an allocation;
//  - calls after the driver was unloaded (process exit).
// What only running the kernel would show, the stub finds where the image
// tells: a kernel pointer parameter that is not device memory (or was freed),
// and (PTX) vector accesses to shared buffers declared with a smaller
// alignment. As on a device, these are faults: the launch returns success,
// the context's sticky error (CUDA_ERROR_ILLEGAL_ADDRESS, _MISALIGNED_ADDRESS)
// is returned by every later call.
//
// Device memory is host memory, zero-filled, reached only through the
// driver's copies: a device pointer is an address of a reserved range that
// the host cannot read (as on a device, host code that dereferences one
// crashes; the stub names the allocation first), and freed ranges stay
// reserved so that a stale pointer is always recognised. Kernels leave their
// outputs as they are. Managed memory (cuMemAllocManaged) is host-readable.
//
// Environment: KVIR_STUB_CUDA_LOG=FILE appends every refusal and fault, and
// at exit a summary of the process's calls, to FILE (refusals also go to
// stderr); KVIR_STUB_CUDA_TRACE=1 logs every call; KVIR_STUB_CUDA_DEVICES=N
// (default 1) and KVIR_STUB_CUDA_MEMORY=BYTES (default an H200's) simulate
// machines without a device or with less memory.
//
//===----------------------------------------------------------------------===//

#include "test/stub-cuda/CudaResult.h"
#include "test/stub-cuda/StubImage.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace kvir::stubcuda;

#define STUB_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using CUdeviceptr = uint64_t;

/// The limits of an H200 (sm_90) the launches are checked against.
constexpr uint64_t kMaxGridX = (1ull << 31) - 1;
constexpr uint64_t kMaxGridYZ = 65535;
constexpr uint64_t kMaxBlockXY = 1024, kMaxBlockZ = 64, kMaxThreads = 1024;
/// Shared memory per block without and with the opt-in attribute.
constexpr uint64_t kSharedDefault = 48 * 1024, kSharedOptIn = 227 * 1024;
constexpr uint64_t kRegistersPerBlock = 65536;
constexpr uint64_t kH200Memory = 150754820096ull;
constexpr const char *kDeviceName =
    "kvir-stub-cuda (H200 limits, sm_90; runs no kernel)";

// cuda.h's enumerators the stub interprets.
constexpr int kJitInfoLog = 3, kJitInfoLogSize = 4, kJitErrorLog = 5,
              kJitErrorLogSize = 6, kJitOptimizationLevel = 7,
              kJitNumOptions = 32;
constexpr int kFuncMaxThreads = 0, kFuncSharedSize = 1, kFuncNumRegs = 4,
              kFuncMaxDynamicShared = 8;

struct Module;

struct Kernel {
  KernelInfo info;
  Module *module = nullptr;
  /// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
  uint64_t maxDynamicShared = 0;
  bool faultReported = false;
};

struct Module {
  uint64_t serial = 0;
  std::string kind;
  std::vector<std::unique_ptr<Kernel>> kernels;
  bool loaded = true;
};

struct Allocation {
  uint64_t serial = 0, base = 0, bytes = 0, reserved = 0;
  /// Where the bytes are for the host (the stub's copies).
  char *host = nullptr;
  bool managed = false, live = true;
};

struct Context {
  int references = 0;
  /// A fault's error: every later call of the context returns it.
  int sticky = CUDA_SUCCESS;
};

/// Everything the stub knows; never destroyed, so that calls made while the
/// process exits find it (and are refused as a driver unloaded would).
struct Stub {
  std::recursive_mutex mutex;
  bool initialized = false;
  std::atomic<bool> unloaded{false};
  int devices = 1;
  uint64_t totalMemory = kH200Memory, usedMemory = 0;
  Context primary;
  std::map<uint64_t, Allocation> allocations;
  std::set<const void *> modules, kernels, streams, events;
  uint64_t serial = 0;
  // The summary.
  std::map<std::string, uint64_t> calls;
  uint64_t copiedBytes = 0, refusals = 0, faults = 0, peakMemory = 0;
  int logFd = -1;
  bool trace = false;
  bool handlerInstalled = false;
  struct sigaction previousSegv {};
};

Stub &stub() {
  static Stub *s = [] {
    auto *s = new Stub();
    if (const char *path = std::getenv("KVIR_STUB_CUDA_LOG"); path && *path)
      s->logFd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    const char *trace = std::getenv("KVIR_STUB_CUDA_TRACE");
    s->trace = trace && *trace && std::strcmp(trace, "0") != 0;
    if (const char *n = std::getenv("KVIR_STUB_CUDA_DEVICES"); n && *n)
      s->devices = std::atoi(n);
    if (const char *m = std::getenv("KVIR_STUB_CUDA_MEMORY"); m && *m)
      s->totalMemory = std::strtoull(m, nullptr, 10);
    return s;
  }();
  return *s;
}

/// `text` as a line of the log (the file of KVIR_STUB_CUDA_LOG, and stderr
/// when `alsoStderr` or when no file is given).
void logLine(const std::string &text, bool alsoStderr) {
  Stub &s = stub();
  std::string line = "kvir-stub-cuda: " + text + "\n";
  if (s.logFd >= 0 && write(s.logFd, line.data(), line.size()) < 0)
    s.logFd = -1;
  if (alsoStderr || s.logFd < 0)
    (void)!write(STDERR_FILENO, line.data(), line.size());
}

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  char buffer[1024];
  vsnprintf(buffer, sizeof(buffer), fmt, args);
  va_end(args);
  return buffer;
}

const char *resultName(int result) {
  switch (result) {
#define KVIR_STUB_CUDA_RESULT_NAME(name, value, text)                          \
  case value:                                                                  \
    return #name;
    KVIR_STUB_CUDA_RESULTS(KVIR_STUB_CUDA_RESULT_NAME)
#undef KVIR_STUB_CUDA_RESULT_NAME
  }
  return nullptr;
}

const char *resultText(int result) {
  switch (result) {
#define KVIR_STUB_CUDA_RESULT_TEXT(name, value, text)                          \
  case value:                                                                  \
    return text;
    KVIR_STUB_CUDA_RESULTS(KVIR_STUB_CUDA_RESULT_TEXT)
#undef KVIR_STUB_CUDA_RESULT_TEXT
  }
  return nullptr;
}

/// Logs the refusal of `call` and returns `error`.
int refuse(int error, const char *call, const std::string &why) {
  ++stub().refusals;
  logLine(format("REFUSED %s: %s (%s)", call, why.c_str(), resultName(error)),
          true);
  return error;
}

/// One driver call: counts it, traces it, and checks what every call needs
/// (an initialised driver that is still loaded; with `needsContext`, a
/// context current on this thread and no fault recorded in it). Returns
/// CUDA_SUCCESS or the refusal.
thread_local Context *current = nullptr;

int enter(const char *call, bool needsContext, const std::string &detail = "") {
  Stub &s = stub();
  ++s.calls[call];
  if (s.trace)
    logLine(
        format("call %s%s%s", call, detail.empty() ? "" : " ", detail.c_str()),
        false);
  if (s.unloaded)
    return refuse(CUDA_ERROR_DEINITIALIZED, call,
                  "called after the driver was unloaded (process exit)");
  if (!s.initialized)
    return refuse(CUDA_ERROR_NOT_INITIALIZED, call, "called before cuInit");
  if (!needsContext)
    return CUDA_SUCCESS;
  if (!current || current->references == 0)
    return refuse(
        CUDA_ERROR_INVALID_CONTEXT, call,
        format("no context is current on this thread (thread %zu): "
               "each thread that calls the driver needs "
               "cuCtxSetCurrent",
               std::hash<std::thread::id>()(std::this_thread::get_id()) %
                   100000));
  if (current->sticky != CUDA_SUCCESS)
    return current->sticky;
  return CUDA_SUCCESS;
}

/// Records a fault a kernel would hit when it runs: the launch succeeds,
/// every later call of the context returns `error`.
void fault(int error, const std::string &why) {
  Stub &s = stub();
  ++s.faults;
  logLine(format("FAULT %s (%s; every later call returns it)", why.c_str(),
                 resultName(error)),
          true);
  if (current && current->sticky == CUDA_SUCCESS)
    current->sticky = error;
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

size_t pageSize() {
  static size_t size = size_t(sysconf(_SC_PAGESIZE));
  return size;
}

/// The allocation (live or freed) whose reserved range holds `address`.
Allocation *findAllocation(uint64_t address) {
  Stub &s = stub();
  auto it = s.allocations.upper_bound(address);
  if (it == s.allocations.begin())
    return nullptr;
  --it;
  Allocation &a = it->second;
  return address < a.base + a.reserved ? &a : nullptr;
}

/// Host code that reads device memory crashes, as on a device; first the
/// stub says which allocation it was.
void onSegv(int signal, siginfo_t *info, void *context) {
  Stub &s = stub();
  uint64_t address = reinterpret_cast<uint64_t>(info->si_addr);
  if (Allocation *a = findAllocation(address)) {
    std::string line = format(
        "FAULT host code accessed device memory at 0x%llx: %s allocation #%llu "
        "of %llu bytes (device pointers are for the driver's copies and "
        "kernels)",
        (unsigned long long)address, a->live ? "in" : "in the freed",
        (unsigned long long)a->serial, (unsigned long long)a->bytes);
    logLine(line, true);
  }
  sigaction(SIGSEGV, &s.previousSegv, nullptr);
  (void)signal;
  (void)context;
}

void installHandler() {
  Stub &s = stub();
  if (s.handlerInstalled)
    return;
  s.handlerInstalled = true;
  struct sigaction action {};
  action.sa_sigaction = onSegv;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &s.previousSegv);
}

int allocate(const char *call, uint64_t bytes, bool managed, CUdeviceptr *out) {
  Stub &s = stub();
  if (!out)
    return refuse(CUDA_ERROR_INVALID_VALUE, call, "a null result pointer");
  *out = 0;
  if (bytes == 0)
    return refuse(CUDA_ERROR_INVALID_VALUE, call, "an allocation of 0 bytes");
  if (bytes > s.totalMemory - s.usedMemory)
    return CUDA_ERROR_OUT_OF_MEMORY;
  size_t page = pageSize();
  uint64_t rounded = (bytes + page - 1) / page * page;
  // A guard page after each allocation: ranges never touch.
  uint64_t reserved = rounded + page;
  void *range = mmap(nullptr, reserved, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range == MAP_FAILED)
    return CUDA_ERROR_OUT_OF_MEMORY;
  char *host;
  if (managed) {
    host = static_cast<char *>(
        mmap(range, rounded, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0));
  } else {
    host = static_cast<char *>(mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                                    -1, 0));
  }
  if (host == MAP_FAILED) {
    munmap(range, reserved);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  installHandler();
  Allocation a;
  a.serial = ++s.serial;
  a.base = reinterpret_cast<uint64_t>(range);
  a.bytes = bytes;
  a.reserved = reserved;
  a.host = host;
  a.managed = managed;
  s.allocations[a.base] = a;
  s.usedMemory += bytes;
  s.peakMemory = std::max(s.peakMemory, s.usedMemory);
  *out = a.base;
  return CUDA_SUCCESS;
}

std::string describe(const Allocation &a) {
  return format("allocation #%llu of %llu bytes at 0x%llx",
                (unsigned long long)a.serial, (unsigned long long)a.bytes,
                (unsigned long long)a.base);
}

/// The host address of `bytes` of device memory at `address` (`role` names
/// it in a refusal: "destination" ...), or null with `*error` set.
char *deviceRange(const char *call, const char *role, uint64_t address,
                  uint64_t bytes, int *error) {
  *error = CUDA_SUCCESS;
  Allocation *a = findAllocation(address);
  if (!a || address >= a->base + a->bytes) {
    *error = refuse(CUDA_ERROR_INVALID_VALUE, call,
                    format("the %s 0x%llx is not device memory (never "
                           "allocated by cuMemAlloc)",
                           role, (unsigned long long)address));
    return nullptr;
  }
  if (!a->live) {
    *error = refuse(CUDA_ERROR_INVALID_VALUE, call,
                    format("the %s 0x%llx is in %s, freed by cuMemFree", role,
                           (unsigned long long)address, describe(*a).c_str()));
    return nullptr;
  }
  uint64_t offset = address - a->base;
  if (bytes > a->bytes - offset) {
    *error = refuse(
        CUDA_ERROR_INVALID_VALUE, call,
        format("%llu bytes at offset %llu of the %s run %llu bytes past the "
               "end of %s",
               (unsigned long long)bytes, (unsigned long long)offset, role,
               (unsigned long long)(bytes - (a->bytes - offset)),
               describe(*a).c_str()));
    return nullptr;
  }
  return a->host + offset;
}

/// The host side of a copy: host memory, never a device range (the host
/// cannot read those).
bool hostRange(const char *call, const char *role, const void *ptr,
               int *error) {
  *error = CUDA_SUCCESS;
  if (!ptr) {
    *error = refuse(CUDA_ERROR_INVALID_VALUE, call,
                    format("the %s is a null pointer", role));
    return false;
  }
  Allocation *a = findAllocation(reinterpret_cast<uint64_t>(ptr));
  if (a && !a->managed) {
    *error = refuse(CUDA_ERROR_INVALID_VALUE, call,
                    format("the %s %p is device memory (%s%s), not host memory",
                           role, ptr, describe(*a).c_str(),
                           a->live ? "" : ", freed"));
    return false;
  }
  return true;
}

/// Either side of a unified-address copy (cuMemcpyAsync): device memory when
/// it is in a device range, else host memory.
char *unifiedRange(const char *call, const char *role, uint64_t address,
                   uint64_t bytes, int *error) {
  *error = CUDA_SUCCESS;
  if (!address) {
    *error = refuse(CUDA_ERROR_INVALID_VALUE, call,
                    format("the %s is a null pointer", role));
    return nullptr;
  }
  if (findAllocation(address))
    return deviceRange(call, role, address, bytes, error);
  return reinterpret_cast<char *>(address);
}

int copy(char *to, const char *from, uint64_t bytes) {
  std::memmove(to, from, bytes);
  stub().copiedBytes += bytes;
  return CUDA_SUCCESS;
}

//===----------------------------------------------------------------------===//
// Launches
//===----------------------------------------------------------------------===//

std::string launchText(const Kernel &k, unsigned gx, unsigned gy, unsigned gz,
                       unsigned bx, unsigned by, unsigned bz, unsigned smem) {
  return format("kernel %s, grid %ux%ux%u, block %ux%ux%u, %u bytes of "
                "dynamic shared memory",
                k.info.name.c_str(), gx, gy, gz, bx, by, bz, smem);
}

/// The launch configuration a device refuses, or "".
std::string configurationProblem(const Kernel &k, uint64_t gx, uint64_t gy,
                                 uint64_t gz, uint64_t bx, uint64_t by,
                                 uint64_t bz, uint64_t smem, int *error) {
  *error = CUDA_ERROR_INVALID_VALUE;
  if (gx == 0 || gy == 0 || gz == 0)
    return "an empty grid";
  if (gx > kMaxGridX)
    return format("grid x is %llu, the device allows %llu",
                  (unsigned long long)gx, (unsigned long long)kMaxGridX);
  if (gy > kMaxGridYZ || gz > kMaxGridYZ)
    return format("grid %s is %llu, the device allows %llu",
                  gy > kMaxGridYZ ? "y" : "z",
                  (unsigned long long)(gy > kMaxGridYZ ? gy : gz),
                  (unsigned long long)kMaxGridYZ);
  if (bx == 0 || by == 0 || bz == 0)
    return "an empty block";
  if (bx > kMaxBlockXY || by > kMaxBlockXY || bz > kMaxBlockZ)
    return format("block %llux%llux%llu exceeds the device's 1024x1024x64",
                  (unsigned long long)bx, (unsigned long long)by,
                  (unsigned long long)bz);
  uint64_t threads = bx * by * bz;
  if (threads > kMaxThreads)
    return format("%llu threads per block, the device allows 1024",
                  (unsigned long long)threads);
  uint64_t sharedLimit = k.maxDynamicShared
                             ? k.info.staticShared + k.maxDynamicShared
                             : kSharedDefault;
  if (k.info.staticShared + smem > std::min(sharedLimit, kSharedOptIn))
    return format("%llu bytes of static and %llu of dynamic shared memory, "
                  "the block has %llu",
                  (unsigned long long)k.info.staticShared,
                  (unsigned long long)smem,
                  (unsigned long long)std::min(sharedLimit, kSharedOptIn));
  if (k.info.registers) {
    // Registers are allocated per warp, 256 at a time.
    uint64_t warps = (threads + 31) / 32;
    uint64_t perWarp = (k.info.registers * 32 + 255) / 256 * 256;
    if (warps * perWarp > kRegistersPerBlock) {
      *error = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
      return format("%u registers per thread x %llu threads exceed the "
                    "block's 65536",
                    k.info.registers, (unsigned long long)threads);
    }
  }
  *error = CUDA_SUCCESS;
  return "";
}

/// A fault the kernel would hit with these parameters (a pointer parameter
/// that is not device memory), or "".
std::string parameterFault(const Kernel &k, void **params) {
  for (size_t i = 0; i < k.info.params.size(); ++i) {
    const KernelParam &p = k.info.params[i];
    if (p.bytes != 8)
      continue;
    uint64_t value;
    std::memcpy(&value, params[i], 8);
    Allocation *a = findAllocation(value);
    if (a && !a->live)
      return format("parameter %zu of kernel %s is 0x%llx, in %s, freed by "
                    "cuMemFree",
                    i, k.info.name.c_str(), (unsigned long long)value,
                    describe(*a).c_str());
    if (p.pointer && value && !a)
      return format("pointer parameter %zu of kernel %s is 0x%llx, which is "
                    "not device memory",
                    i, k.info.name.c_str(), (unsigned long long)value);
  }
  return "";
}

/// CUDA_SUCCESS if `h` is a live handle of `set` (or null, the default
/// stream, where `nullIsDefault`), else the refusal of `call`; `what` names
/// the kind.
int liveHandle(const char *call, const std::set<const void *> &set, void *h,
               const char *what, bool nullIsDefault) {
  if (set.count(h) || (nullIsDefault && !h))
    return CUDA_SUCCESS;
  return refuse(CUDA_ERROR_INVALID_HANDLE, call,
                format("%p is not a live %s", h, what));
}

/// At unload (process exit, or dlclose): the summary; later calls are
/// refused as calls into an unloaded driver.
__attribute__((destructor)) void unloadStub() {
  Stub &s = stub();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  uint64_t launches = s.calls["cuLaunchKernel"];
  uint64_t copies = s.calls["cuMemcpyHtoD_v2"] + s.calls["cuMemcpyDtoH_v2"] +
                    s.calls["cuMemcpyDtoD_v2"] + s.calls["cuMemcpyAsync"];
  if (s.initialized || s.refusals)
    logLine(format("summary of pid %d: %llu modules loaded, %llu launches, "
                   "%llu copies (%.1f MB), %llu streams, peak %.1f MB of "
                   "device memory, %llu refused, %llu faults",
                   int(getpid()), (unsigned long long)s.modules.size(),
                   (unsigned long long)launches, (unsigned long long)copies,
                   double(s.copiedBytes) / 1e6,
                   (unsigned long long)s.calls["cuStreamCreate"],
                   double(s.peakMemory) / 1e6, (unsigned long long)s.refusals,
                   (unsigned long long)s.faults),
            s.trace);
  s.unloaded = true;
}

/// The module of `image`, or the refusal (with the JIT's log in `log`).
int loadModule(const char *call, void **out, const void *image,
               std::string &log) {
  Stub &s = stub();
  if (!out)
    return refuse(CUDA_ERROR_INVALID_VALUE, call, "a null result pointer");
  *out = nullptr;
  ImageInfo info = readImage(image);
  log = info.log;
  if (info.error != CUDA_SUCCESS)
    return refuse(info.error, call, "the image is refused: " + info.log);
  auto *module = new Module();
  module->serial = ++s.serial;
  module->kind = info.kind;
  for (KernelInfo &k : info.kernels) {
    auto kernel = std::make_unique<Kernel>();
    kernel->info = std::move(k);
    kernel->module = module;
    s.kernels.insert(kernel.get());
    module->kernels.push_back(std::move(kernel));
  }
  s.modules.insert(module);
  if (s.trace)
    logLine(format("module #%llu: %s, %zu kernels",
                   (unsigned long long)module->serial, module->kind.c_str(),
                   module->kernels.size()),
            false);
  *out = module;
  return CUDA_SUCCESS;
}

/// Writes `text` into a JIT log buffer of `*size` bytes (NUL-terminated,
/// cut to fit) and stores the bytes written in `*size`.
void writeJitLog(char *buffer, uintptr_t *size, const std::string &text) {
  if (!buffer || !size || *size == 0)
    return;
  size_t n = std::min<size_t>(text.size(), *size - 1);
  std::memcpy(buffer, text.data(), n);
  buffer[n] = '\0';
  *size = n + 1;
}

} // namespace

#define STUB_LOCK std::lock_guard<std::recursive_mutex> stubLock(stub().mutex)

//===----------------------------------------------------------------------===//
// Initialisation, devices, contexts, errors
//===----------------------------------------------------------------------===//

STUB_EXPORT int cuInit(unsigned flags) {
  STUB_LOCK;
  Stub &s = stub();
  ++s.calls["cuInit"];
  if (s.unloaded)
    return refuse(CUDA_ERROR_DEINITIALIZED, "cuInit",
                  "called after the driver was unloaded (process exit)");
  if (flags != 0)
    return refuse(CUDA_ERROR_INVALID_VALUE, "cuInit",
                  format("flags %u (must be 0)", flags));
  s.initialized = true;
  return CUDA_SUCCESS;
}

STUB_EXPORT int cuDriverGetVersion(int *version) {
  STUB_LOCK;
  if (!version)
    return refuse(CUDA_ERROR_INVALID_VALUE, "cuDriverGetVersion",
                  "a null result pointer");
  *version = 13000;
  return CUDA_SUCCESS;
}

STUB_EXPORT int cuDeviceGetCount(int *count) {
  STUB_LOCK;
  if (int r = enter("cuDeviceGetCount", false))
    return r;
  if (!count)
    return refuse(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetCount",
                  "a null result pointer");
  *count = stub().devices;
  return CUDA_SUCCESS;
}

/// Whether `device` is an ordinal of the stub's devices.
static int checkDevice(const char *call, int device) {
  if (device < 0 || device >= stub().devices)
    return refuse(
        CUDA_ERROR_INVALID_DEVICE, call,
        format("device %d (the machine has %d)", device, stub().devices));
  return CUDA_SUCCESS;
}

STUB_EXPORT int cuDeviceGet(int *device, int ordinal) {
  STUB_LOCK;
  if (int r = enter("cuDeviceGet", false))
    return r;
  if (!device)
    return refuse(CUDA_ERROR_INVALID_VALUE, "cuDeviceGet",
                  "a null result pointer");
  if (int r = checkDevice("cuDeviceGet", ordinal))
    return r;
  *device = ordinal;
  return CUDA_SUCCESS;
}

STUB_EXPORT int cuDeviceGetName(char *name, int length, int device) {
  STUB_LOCK;
  if (int r = enter("cuDeviceGetName", false))
    return r;
  if (int r = checkDevice("cuDeviceGetName", device))
    return r;
  if (!name || length <= 0)
    return refuse(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetName",
                  "no buffer for the name");
  std::snprintf(name, size_t(length), "%s", kDeviceName);
  return CUDA_SUCCESS;
}

STUB_EXPORT int cuDeviceGetAttribute(int *value, int attribute, int device) {
  STUB_LOCK;
  if (int r = enter("cuDeviceGetAttribute", false))
    return r;
  if (int r = checkDevice("cuDeviceGetAttribute", device))
    return r;
  if (!value)
    return refuse(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetAttribute",
                  "a null result pointer");
  static const std::map<int, int> attributes = {{1, int(kMaxThreads)},
                                                {2, int(kMaxBlockXY)},
                                                {3, int(kMaxBlockXY)},
                                                {4, int(kMaxBlockZ)},
                                                {5, int(kMaxGridX)},
                                                {6, int(kMaxGridYZ)},
                                                {7, int(kMaxGridYZ)},
                                                {8, int(kSharedDefault)},
                                                {10, 32},
                                                {12, int(kRegistersPerBlock)},
                                                {16, 132},
                                                {75, kDeviceSm / 10},
                                                {76, kDeviceSm % 10},
                                                {97, int(kSharedOptIn)}};
  auto it = attributes.find(attribute);
  if (it == attributes.end())
    return refuse(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetAttribute",
                  format("attribute %d is not one the stub knows", attribute));
  *value = it->second;
  return CUDA_SUCCESS;
}

STUB_EXPORT int cuDeviceTotalMem_v2(size_t *bytes, int device) {
  STUB_LOCK;
  if (int r = enter("cuDeviceTotalMem_v2", false))
    return r;
  if (int r = checkDevice("cuDeviceTotalMem_v2", device))
    return r;
  if (!bytes)
    return refuse(CUDA_ERROR_INVALID_VALUE, "cuDeviceTotalMem_v2",
                  "a null result pointer");
  *bytes = stub().totalMemory;
  return CUDA_SUCCESS;
}

STUB_EXPORT int cuDevicePrimaryCtxRetain(void **context, int device) {
  STUB_LOCK;
  if (int r = enter("cuDevicePrimaryCtxRetain", false))
    return r;
  if (int r = checkDevice("cuDevicePrimaryCtxRetain", device))
    return r;
  if (!context)
    return refuse(CUDA_ERROR_INVALID_VALUE, "cuDevicePrimaryCtxRetain",
                  "a null result pointer");
  ++stub().primary.references;
  *context = &stub().primary;
  return CUDA_SUCCESS;
}

STUB_EXPORT int cuDevicePrimaryCtxRelease_v2(int device) {
  STUB_LOCK;
  if (int r = enter("cuDevicePrimaryCtxRelease_v2", false))
    return r;
  if (int r = checkDevice("cuDevicePrimaryCtxRelease_v2", device))
    return r;
  if (stub().primary.references == 0)
    return refuse(CUDA_ERROR_INVALID_CONTEXT, "cuDevicePrimaryCtxRelease_v2",
                  "the primary context is not retained");
  --stub().primary.references;
  return CUDA_SUCCESS;
}

STUB_EXPORT int cuCtxSetCurrent(void *context) {
  STUB_LOCK;
  if (int r = enter("cuCtxSetCurrent", false))
    return r;
  if (context && (context != &stub().primary || stub().primary.references == 0))
    return refuse(CUDA_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent",
                  format("%p is not a context the driver created", context));
  current = static_cast<Context *>(context);
  return CUDA_SUCCESS;
}

STUB_EXPORT int cuCtxGetCurrent(void **context) {
  STUB_LOCK;
  if (int r = enter("cuCtxGetCurrent", false))
    return r;
  if (!context)
    return refuse(CUDA_ERROR_INVALID_VALUE, "cuCtxGetCurrent",
                  "a null result pointer");
  *context = current;
  return CUDA_SUCCESS;
}

STUB_EXPORT int cuCtxSynchronize(void) {
  STUB_LOCK;
  return enter("cuCtxSynchronize", true);
}

STUB_EXPORT int cuGetErrorName(int error, const char **name) {
  if (!name)
    return CUDA_ERROR_INVALID_VALUE;
  *name = resultName(error);
  return *name ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

STUB_EXPORT int cuGetErrorString(int error, const char **text) {
  if (!text)
    return CUDA_ERROR_INVALID_VALUE;
  *text = resultText(error);
  return *text ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

//===----------------------------------------------------------------------===//
// Modules and kernels
//===----------------------------------------------------------------------===//

STUB_EXPORT int cuModuleLoadData(void **module, const void *image) {
  STUB_LOCK;
  if (int r = enter("cuModuleLoadData", true))
    return r;
  std::string log;
  return loadModule("cuModuleLoadData", module, image, log);
}

STUB_EXPORT int cuModuleLoadDataEx(void **module, const void *image,
                                   unsigned numOptions, int *options,
                                   void **values) {
  STUB_LOCK;
  const char *call = "cuModuleLoadDataEx";
  if (int r = enter(call, true))
    return r;
  if (numOptions && (!options || !values))
    return refuse(CUDA_ERROR_INVALID_VALUE, call,
                  format("%u options without their arrays", numOptions));
  char *errorLog = nullptr, *infoLog = nullptr;
  uintptr_t *errorSize = nullptr, *infoSize = nullptr;
  for (unsigned i = 0; i < numOptions; ++i) {
    uintptr_t value = reinterpret_cast<uintptr_t>(values[i]);
    switch (options[i]) {
    case kJitErrorLog:
      errorLog = static_cast<char *>(values[i]);
      break;
    case kJitErrorLogSize:
      errorSize = reinterpret_cast<uintptr_t *>(&values[i]);
      break;
    case kJitInfoLog:
      infoLog = static_cast<char *>(values[i]);
      break;
    case kJitInfoLogSize:
      infoSize = reinterpret_cast<uintptr_t *>(&values[i]);
      break;
    case kJitOptimizationLevel:
      if (value > 4)
        return refuse(CUDA_ERROR_INVALID_VALUE, call,
                      format("CU_JIT_OPTIMIZATION_LEVEL %llu (0 to 4)",
                             (unsigned long long)value));
      break;
    default:
      if (options[i] < 0 || options[i] >= kJitNumOptions)
        return refuse(CUDA_ERROR_INVALID_VALUE, call,
                      format("option %d is not a CUjit_option", options[i]));
    }
  }
  std::string log;
  int r = loadModule(call, module, image, log);
  writeJitLog(r ? errorLog : infoLog, r ? errorSize : infoSize, log);
  if (r && infoLog && infoSize)
    writeJitLog(infoLog, infoSize, "");
  return r;
}

/// The live module `handle`, or null after a refusal stored in `*error`.
static Module *liveModule(const char *call, void *handle, int *error) {
  *error = CUDA_SUCCESS;
  if (!stub().modules.count(handle)) {
    *error = refuse(CUDA_ERROR_INVALID_HANDLE, call,
                    format("%p is not a module the driver loaded", handle));
    return nullptr;
  }
  auto *module = static_cast<Module *>(handle);
  if (!module->loaded) {
    *error = refuse(CUDA_ERROR_INVALID_HANDLE, call,
                    format("module #%llu was unloaded",
                           (unsigned long long)module->serial));
    return nullptr;
  }
  return module;
}

STUB_EXPORT int cuModuleUnload(void *handle) {
  STUB_LOCK;
  if (int r = enter("cuModuleUnload", true))
    return r;
  int r;
  Module *module = liveModule("cuModuleUnload", handle, &r);
  if (!module)
    return r;
  // The object stays (handles of its kernels are recognised as stale).
  module->loaded = false;
  return CUDA_SUCCESS;
}

STUB_EXPORT int cuModuleGetFunction(void **function, void *handle,
                                    const char *name) {
  STUB_LOCK;
  if (int r = enter("cuModuleGetFunction", true, name ? name : ""))
    return r;
  int r;
  Module *module = liveModule("cuModuleGetFunction", handle, &r);
  if (!module)
    return r;
  if (!function || !name)
    return refuse(CUDA_ERROR_INVALID_VALUE, "cuModuleGetFunction",
                  "a null result pointer or name");
  for (const std::unique_ptr<Kernel> &k : module->kernels)
    if (k->info.name == name) {
      *function = k.get();
      return CUDA_SUCCESS;
    }
  return refuse(CUDA_ERROR_NOT_FOUND, "cuModuleGetFunction",
                format("module #%llu (%s) has no kernel %s",
                       (unsigned long long)module->serial, module->kind.c_str(),
                       name));
}

/// The kernel `function` of a loaded module, or null with the refusal.
static Kernel *liveKernel(const char *call, void *function, int *error) {
  *error = CUDA_SUCCESS;
  if (!stub().kernels.count(function)) {
    *error = refuse(CUDA_ERROR_INVALID_HANDLE, call,
                    format("%p is not a kernel of a loaded module", function));
    return nullptr;
  }
  auto *kernel = static_cast<Kernel *>(function);
  if (!kernel->module->loaded) {
    *error = refuse(CUDA_ERROR_INVALID_HANDLE, call,
                    "kernel " + kernel->info.name +
                        " belongs to a module that was unloaded");
    return nullptr;
  }
  return kernel;
}

STUB_EXPORT int cuFuncGetAttribute(int *value, int attribute, void *function) {
  STUB_LOCK;
  if (int r = enter("cuFuncGetAttribute", true))
    return r;
  int r;
  Kernel *k = liveKernel("cuFuncGetAttribute", function, &r);
  if (!k)
    return r;
  if (!value)
    return refuse(CUDA_ERROR_INVALID_VALUE, "cuFuncGetAttribute",
                  "a null result pointer");
  switch (attribute) {
  case kFuncMaxThreads:
    *value = int(kMaxThreads);
    return CUDA_SUCCESS;
  case kFuncSharedSize:
    *value = int(k->info.staticShared);
    return CUDA_SUCCESS;
  case kFuncNumRegs:
    *value = int(k->info.registers);
    return CUDA_SUCCESS;
  case kFuncMaxDynamicShared:
    *value = int(k->maxDynamicShared ? k->maxDynamicShared
                                     : kSharedDefault - k->info.staticShared);
    return CUDA_SUCCESS;
  }
  return refuse(CUDA_ERROR_INVALID_VALUE, "cuFuncGetAttribute",
                format("attribute %d is not one the stub knows", attribute));
}

STUB_EXPORT int cuFuncSetAttribute(void *function, int attribute, int value) {
  STUB_LOCK;
  if (int r = enter("cuFuncSetAttribute", true))
    return r;
  int r;
  Kernel *k = liveKernel("cuFuncSetAttribute", function, &r);
  if (!k)
    return r;
  if (attribute != kFuncMaxDynamicShared)
    return refuse(CUDA_ERROR_NOT_SUPPORTED, "cuFuncSetAttribute",
                  format("attribute %d is not one the stub sets", attribute));
  if (value < 0 || uint64_t(value) + k->info.staticShared > kSharedOptIn)
    return refuse(CUDA_ERROR_INVALID_VALUE, "cuFuncSetAttribute",
                  format("%d bytes of dynamic shared memory for kernel %s "
                         "(with %llu static, at most %llu)",
                         value, k->info.name.c_str(),
                         (unsigned long long)k->info.staticShared,
                         (unsigned long long)kSharedOptIn));
  k->maxDynamicShared = uint64_t(value);
  return CUDA_SUCCESS;
}

STUB_EXPORT int cuLaunchKernel(void *function, unsigned gx, unsigned gy,
                               unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned smem, void *stream,
                               void **params, void **extra) {
  STUB_LOCK;
  const char *call = "cuLaunchKernel";
  int r;
  Kernel *k = stub().kernels.count(function) ? static_cast<Kernel *>(function)
                                             : nullptr;
  std::string what =
      k ? launchText(*k, gx, gy, gz, bx, by, bz, smem) : std::string();
  if ((r = enter(call, true, what)))
    return r;
  if (!(k = liveKernel(call, function, &r)))
    return r;
  if ((r = liveHandle(call, stub().streams, stream, "stream", true)))
    return r;
  std::string problem =
      configurationProblem(*k, gx, gy, gz, bx, by, bz, smem, &r);
  if (!problem.empty())
    return refuse(r, call, what + ": " + problem);
  if (extra)
    return refuse(CUDA_ERROR_NOT_SUPPORTED, call,
                  what + ": parameters through `extra` (the stub reads "
                         "kernelParams)");
  if (!k->info.params.empty() && !params)
    return refuse(CUDA_ERROR_INVALID_VALUE, call,
                  format("%s: the kernel has %zu parameters, none given",
                         what.c_str(), k->info.params.size()));
  if (!k->info.fault.empty() && !k->faultReported) {
    k->faultReported = true;
    fault(CUDA_ERROR_MISALIGNED_ADDRESS, what + ": " + k->info.fault);
    return CUDA_SUCCESS;
  }
  std::string bad = parameterFault(*k, params);
  if (!bad.empty())
    fault(CUDA_ERROR_ILLEGAL_ADDRESS, what + ": " + bad);
  return CUDA_SUCCESS;
}

//===----------------------------------------------------------------------===//
// Streams and events
//===----------------------------------------------------------------------===//

/// Creates a handle in `set` (creation `flags` up to `maxFlags`).
static int createHandle(const char *call, std::set<const void *> &set,
                        void **out, unsigned flags, unsigned maxFlags) {
  if (int r = enter(call, true))
    return r;
  if (!out)
    return refuse(CUDA_ERROR_INVALID_VALUE, call, "a null result pointer");
  if (flags > maxFlags)
    return refuse(CUDA_ERROR_INVALID_VALUE, call, format("flags %u", flags));
  auto *handle = new uint64_t(++stub().serial);
  set.insert(handle);
  *out = handle;
  return CUDA_SUCCESS;
}

/// Destroys handle `h` of `set`.
static int destroyHandle(const char *call, std::set<const void *> &set, void *h,
                         const char *what) {
  if (int r = enter(call, true))
    return r;
  if (int r = liveHandle(call, set, h, what, false))
    return r;
  set.erase(h);
  delete static_cast<uint64_t *>(h);
  return CUDA_SUCCESS;
}

STUB_EXPORT int cuStreamCreate(void **stream, unsigned flags) {
  STUB_LOCK;
  return createHandle("cuStreamCreate", stub().streams, stream, flags, 1);
}

STUB_EXPORT int cuStreamDestroy_v2(void *stream) {
  STUB_LOCK;
  return destroyHandle("cuStreamDestroy_v2", stub().streams, stream, "stream");
}

STUB_EXPORT int cuStreamSynchronize(void *stream) {
  STUB_LOCK;
  if (int r = enter("cuStreamSynchronize", true))
    return r;
  return liveHandle("cuStreamSynchronize", stub().streams, stream, "stream",
                    true);
}

STUB_EXPORT int cuStreamWaitEvent(void *stream, void *event, unsigned flags) {
  STUB_LOCK;
  const char *call = "cuStreamWaitEvent";
  if (int r = enter(call, true))
    return r;
  if (int r = liveHandle(call, stub().streams, stream, "stream", true))
    return r;
  if (flags > 1)
    return refuse(CUDA_ERROR_INVALID_VALUE, call, format("flags %u", flags));
  return liveHandle(call, stub().events, event, "event", false);
}

STUB_EXPORT int cuEventCreate(void **event, unsigned flags) {
  STUB_LOCK;
  return createHandle("cuEventCreate", stub().events, event, flags, 0xf);
}

STUB_EXPORT int cuEventDestroy_v2(void *event) {
  STUB_LOCK;
  return destroyHandle("cuEventDestroy_v2", stub().events, event, "event");
}

STUB_EXPORT int cuEventSynchronize(void *event) {
  STUB_LOCK;
  if (int r = enter("cuEventSynchronize", true))
    return r;
  return liveHandle("cuEventSynchronize", stub().events, event, "event", false);
}

STUB_EXPORT int cuEventRecord(void *event, void *stream) {
  STUB_LOCK;
  const char *call = "cuEventRecord";
  if (int r = enter(call, true))
    return r;
  if (int r = liveHandle(call, stub().events, event, "event", false))
    return r;
  return liveHandle(call, stub().streams, stream, "stream", true);
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

STUB_EXPORT int cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes) {
  STUB_LOCK;
  if (int r = enter("cuMemAlloc_v2", true))
    return r;
  return allocate("cuMemAlloc_v2", bytes, false, ptr);
}

STUB_EXPORT int cuMemAllocManaged(CUdeviceptr *ptr, size_t bytes,
                                  unsigned flags) {
  STUB_LOCK;
  if (int r = enter("cuMemAllocManaged", true))
    return r;
  if (flags != 1 && flags != 2)
    return refuse(CUDA_ERROR_INVALID_VALUE, "cuMemAllocManaged",
                  format("flags %u (CU_MEM_ATTACH_GLOBAL or _HOST)", flags));
  return allocate("cuMemAllocManaged", bytes, true, ptr);
}

STUB_EXPORT int cuMemFree_v2(CUdeviceptr ptr) {
  STUB_LOCK;
  const char *call = "cuMemFree_v2";
  if (int r = enter(call, true))
    return r;
  if (!ptr)
    return CUDA_SUCCESS;
  Allocation *a = findAllocation(ptr);
  if (!a)
    return refuse(CUDA_ERROR_INVALID_VALUE, call,
                  format("0x%llx was never allocated by cuMemAlloc",
                         (unsigned long long)ptr));
  if (!a->live)
    return refuse(CUDA_ERROR_INVALID_VALUE, call,
                  format("0x%llx is %s, already freed", (unsigned long long)ptr,
                         describe(*a).c_str()));
  if (a->base != ptr)
    return refuse(CUDA_ERROR_INVALID_VALUE, call,
                  format("0x%llx is inside %s, not its start",
                         (unsigned long long)ptr, describe(*a).c_str()));
  size_t rounded = a->reserved - pageSize();
  if (a->managed)
    // The range stays reserved, without its pages.
    mmap(reinterpret_cast<void *>(a->base), rounded, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  else
    munmap(a->host, rounded);
  a->host = nullptr;
  a->live = false;
  stub().usedMemory -= a->bytes;
  return CUDA_SUCCESS;
}

STUB_EXPORT int cuMemGetInfo_v2(size_t *freeBytes, size_t *totalBytes) {
  STUB_LOCK;
  if (int r = enter("cuMemGetInfo_v2", true))
    return r;
  if (!freeBytes || !totalBytes)
    return refuse(CUDA_ERROR_INVALID_VALUE, "cuMemGetInfo_v2",
                  "a null result pointer");
  *totalBytes = stub().totalMemory;
  *freeBytes = stub().totalMemory - stub().usedMemory;
  return CUDA_SUCCESS;
}

STUB_EXPORT int cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src,
                                size_t bytes) {
  STUB_LOCK;
  const char *call = "cuMemcpyHtoD_v2";
  int r;
  if ((r = enter(call, true)))
    return r;
  char *to = deviceRange(call, "destination", dst, bytes, &r);
  if (!to || !hostRange(call, "source", src, &r))
    return r;
  return copy(to, static_cast<const char *>(src), bytes);
}

STUB_EXPORT int cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) {
  STUB_LOCK;
  const char *call = "cuMemcpyDtoH_v2";
  int r;
  if ((r = enter(call, true)))
    return r;
  char *from = deviceRange(call, "source", src, bytes, &r);
  if (!from || !hostRange(call, "destination", dst, &r))
    return r;
  return copy(static_cast<char *>(dst), from, bytes);
}

STUB_EXPORT int cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src,
                                size_t bytes) {
  STUB_LOCK;
  const char *call = "cuMemcpyDtoD_v2";
  int r;
  if ((r = enter(call, true)))
    return r;
  char *to = deviceRange(call, "destination", dst, bytes, &r);
  if (!to)
    return r;
  char *from = deviceRange(call, "source", src, bytes, &r);
  if (!from)
    return r;
  return copy(to, from, bytes);
}

STUB_EXPORT int cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                              void *stream) {
  STUB_LOCK;
  const char *call = "cuMemcpyAsync";
  int r;
  if ((r = enter(call, true)))
    return r;
  if ((r = liveHandle(call, stub().streams, stream, "stream", true)))
    return r;
  char *to = unifiedRange(call, "destination", dst, bytes, &r);
  if (!to)
    return r;
  char *from = unifiedRange(call, "source", src, bytes, &r);
  if (!from)
    return r;
  return copy(to, from, bytes);
}

STUB_EXPORT int cuMemsetD32Async(CUdeviceptr dst, unsigned value, size_t count,
                                 void *stream) {
  STUB_LOCK;
  const char *call = "cuMemsetD32Async";
  int r;
  if ((r = enter(call, true)))
    return r;
  if ((r = liveHandle(call, stub().streams, stream, "stream", true)))
    return r;
  if (dst % 4)
    return refuse(
        CUDA_ERROR_INVALID_VALUE, call,
        format("0x%llx is not 4-byte aligned", (unsigned long long)dst));
  char *to = deviceRange(call, "destination", dst, uint64_t(count) * 4, &r);
  if (!to)
    return r;
  for (size_t i = 0; i < count; ++i)
    std::memcpy(to + 4 * i, &value, 4);
  return CUDA_SUCCESS;
}
