//===- Support.h - Helpers behind the C ABI ---------------------*- C++ -*-===//
//
// Internal helpers of the runtime: record the thread-local message returned by
// kvrt_last_error(), keep C++ exceptions from crossing the C interface, and
// count references of the objects behind opaque handles.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_SUPPORT_H
#define KVIR_RUNTIME_CORE_SUPPORT_H

#include "runtime/core/KVFaults.h"
#include "runtime/core/KVRuntime.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvrt {

/// Holds one reference to each of a list of pages until destroyed: the pages
/// a call allocated go back to the pool on every early return. Not copyable
/// (a copy would release them twice).
struct PageRefs {
  kvrt_pool *pool;
  std::vector<int32_t> pages;
  PageRefs(kvrt_pool *pool, std::vector<int32_t> pages)
      : pool(pool), pages(std::move(pages)) {}
  PageRefs(const PageRefs &) = delete;
  PageRefs &operator=(const PageRefs &) = delete;
  ~PageRefs() {
    for (int32_t page : pages)
      kvrt_pool_release_page(pool, page);
  }
};

/// Checks the arguments every prefill shares, whatever the backend: at least
/// one token, positions pos .. pos+n-1 within [0, 2^53), every token in the
/// vocabulary. Messages start with `what`.
kvrt_status checkPrefillArguments(const kvrt_model_config &config,
                                  const int32_t *tokens, int64_t n, int64_t pos,
                                  const char *what);

/// A FILE closed when destroyed.
struct FileCloser {
  void operator()(std::FILE *f) const {
    if (f)
      std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

/// Opens `path` for reading without blocking on the open (a FIFO nobody
/// writes to would wait forever): `*regular` says whether it is a regular
/// file, whose size is then in `*bytes`. A directory is refused. Reads of
/// what is not a regular file block as usual afterwards, and end at once
/// when no writer is left. Fails with KVRT_ERR_IO and "cannot open <what>
/// '<path>': <why>".
kvrt_status openInputFile(const char *path, const char *what, File &out,
                          uint64_t *bytes, bool *regular);

/// openInputFile for a regular file only (a loader that needs the size
/// first): a FIFO or a device is refused as well.
kvrt_status openRegularFile(const char *path, const char *what, File &out,
                            uint64_t *bytes);

/// Counts an allocation of `kind` and fails it when the fault hook armed
/// this one (KVFaults.h): KVRT_OK, or the kind's status with its message.
kvrt_status allocationFault(kvrt_fault_kind kind, const char *what);

/// Records `message` as this thread's last error and returns `status`.
kvrt_status fail(kvrt_status status, const std::string &message);

/// FNV-1a over `data`, continuing from `hash`: stable across machines and
/// compilers, unlike std::hash (names of generated code, cache files).
inline uint64_t fnv1a(std::string_view data,
                      uint64_t hash = 0xcbf29ce484222325ULL) {
  for (unsigned char c : data) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

/// Concatenates the stream representations of `parts`.
template <typename... Parts> std::string str(Parts &&...parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  return os.str();
}

/// The error of a C entry point called with a NULL handle or out pointer.
inline kvrt_status nullArgument(const char *function) {
  return fail(KVRT_ERR_INVALID_ARGUMENT,
              str(function, ": a required argument is NULL"));
}

/// Adds a reference to an object with an atomic `refs` member (NULL is
/// ignored).
template <typename T> void retain(T *object) {
  if (object)
    object->refs.fetch_add(1, std::memory_order_relaxed);
}

/// Drops a reference and deletes the object with the last one.
template <typename T> void release(T *object) {
  if (object && object->refs.fetch_sub(1, std::memory_order_acq_rel) == 1)
    delete object;
}

/// Runs `body` (returning kvrt_status) and converts any exception it throws
/// into a status and a message.
template <typename Body> kvrt_status guard(Body &&body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(KVRT_ERR_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception &e) {
    return fail(KVRT_ERR_INTERNAL, str("internal error: ", e.what()));
  } catch (...) {
    return fail(KVRT_ERR_INTERNAL, "internal error: unknown exception");
  }
}

} // namespace kvrt

#endif // KVIR_RUNTIME_CORE_SUPPORT_H
