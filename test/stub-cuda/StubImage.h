//===- StubImage.h - What the stub driver reads of an image -----*- C++ -*-===//
//
// The stub CUDA driver (StubDriver.cpp) runs no kernel, but it checks every
// launch against what the module image says of the kernel: its parameters,
// its static shared memory, its registers, and (PTX only) whether its shared
// buffers are aligned for the vector accesses made to them. This reads those
// facts from the two images a real driver takes from KVIR: PTX text (the
// JIT path of kv-run --backend cuda) and a cubin ELF (kv-aot's bundles).
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_TEST_STUB_CUDA_STUBIMAGE_H
#define KVIR_TEST_STUB_CUDA_STUBIMAGE_H

#include <cstdint>
#include <string>
#include <vector>

namespace kvir::stubcuda {

/// One kernel parameter as the image declares it.
struct KernelParam {
  uint32_t bytes = 0;
  /// A pointer the kernel dereferences (PTX `.ptr`, a cubin's KPARAM flag).
  bool pointer = false;
};

/// A kernel (`.entry`) of an image.
struct KernelInfo {
  std::string name;
  std::vector<KernelParam> params;
  /// Bytes of shared memory the kernel declares (without the 1 KiB an sm_90
  /// reserves per block).
  uint64_t staticShared = 0;
  /// Registers per thread; 0 where the image does not say (PTX: the JIT
  /// decides).
  uint32_t registers = 0;
  /// A fault its first launch would hit, found in the image (PTX: a vector
  /// access to shared memory declared with a smaller alignment), or "".
  std::string fault;
};

/// What an image holds, or why a driver would refuse it.
struct ImageInfo {
  /// "PTX (.target sm_90, ISA 8.0)" or "cubin sm_90".
  std::string kind;
  std::vector<KernelInfo> kernels;
  /// The CUresult a driver loading it returns (0 when it loads) and the log
  /// it writes (the JIT's error log for PTX).
  int error = 0;
  std::string log;
};

/// The architecture the stub stands for: an H200 (sm_90), and the newest PTX
/// ISA its driver (CUDA 13.0) compiles.
constexpr int kDeviceSm = 90;
constexpr int kMaxPtxIsa = 90;

/// Reads the image at `data` as cuModuleLoadData does (the size is not
/// given: PTX ends at its NUL, a cubin's headers give its extent).
ImageInfo readImage(const void *data);

} // namespace kvir::stubcuda

#endif // KVIR_TEST_STUB_CUDA_STUBIMAGE_H
