//===- FuzzSupport.h - Helpers shared by the fuzz targets -------*- C++ -*-===//
//
// The loaders take paths: a fuzz input is handed to them as an anonymous
// in-memory file (memfd), so that no fuzzing run writes to the disk.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_TEST_FUZZ_FUZZSUPPORT_H
#define KVIR_TEST_FUZZ_FUZZSUPPORT_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

namespace kvir::fuzz {

/// The bytes of one input as a regular file, for as long as it lives.
class MemoryFile {
public:
  MemoryFile(const uint8_t *data, size_t size) {
    fd = memfd_create("kv-fuzz-input", MFD_CLOEXEC);
    if (fd < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    for (size_t done = 0; done < size;) {
      ssize_t n = write(fd, data + done, size - done);
      if (n <= 0) {
        std::perror("write");
        std::abort();
      }
      done += static_cast<size_t>(n);
    }
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  ~MemoryFile() { close(fd); }
  MemoryFile(const MemoryFile &) = delete;
  MemoryFile &operator=(const MemoryFile &) = delete;

  const char *c_str() const { return path.c_str(); }

private:
  int fd = -1;
  std::string path;
};

/// Stops the run with `what` when a property the target checks fails: a
/// crash for libFuzzer, which saves the input.
[[noreturn]] inline void fail(const std::string &what) {
  std::fprintf(stderr, "fuzz property failed: %s\n", what.c_str());
  std::abort();
}

/// Reads the input as a stream of small choices: each call takes the next
/// byte (0 once the input is exhausted), so every input is a valid program
/// of choices.
class Choices {
public:
  Choices(const uint8_t *data, size_t size) : data(data), size(size) {}
  uint8_t byte() { return at < size ? data[at++] : 0; }
  /// A value in [lo, hi].
  int64_t range(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(byte()) % (hi - lo + 1);
  }
  bool flip() { return byte() & 1; }
  size_t consumed() const { return at; }

private:
  const uint8_t *data;
  size_t size, at = 0;
};

} // namespace kvir::fuzz

#endif // KVIR_TEST_FUZZ_FUZZSUPPORT_H
