//===- Error.cpp - Error reporting across the C ABI -------------*- C++ -*-===//

#include "runtime/core/Support.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {
/// The message of the last failing call on this thread.
thread_local std::string lastError;
} // namespace

kvrt_status kvrt::fail(kvrt_status status, const std::string &message) {
  lastError = message;
  return status;
}

extern "C" const char *kvrt_last_error(void) { return lastError.c_str(); }

extern "C" const char *kvrt_status_name(kvrt_status status) {
  switch (status) {
  case KVRT_OK:
    return "ok";
  case KVRT_ERR_INVALID_ARGUMENT:
    return "invalid argument";
  case KVRT_ERR_IO:
    return "i/o error";
  case KVRT_ERR_BAD_MODEL:
    return "bad model";
  case KVRT_ERR_POOL_EXHAUSTED:
    return "pool exhausted";
  case KVRT_ERR_STATE:
    return "invalid state";
  case KVRT_ERR_OUT_OF_MEMORY:
    return "out of memory";
  case KVRT_ERR_INTERNAL:
    return "internal error";
  case KVRT_ERR_UNAVAILABLE:
    return "unavailable";
  }
  return "unknown status";
}

kvrt_status kvrt::checkPrefillArguments(const kvrt_model_config &c,
                                        const int32_t *tokens, int64_t n,
                                        int64_t pos, const char *what) {
  if (n <= 0 || !tokens)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str(what, ": needs at least one token (got ", n, ")"));
  if (pos < 0 || pos > KVRT_MAX_POSITION - n)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str(what, ": position ", pos, " is outside [0, 2^53 - n)"));
  for (int64_t t = 0; t < n; ++t)
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str(what, ": token ", tokens[t], " at index ", t,
                      " is outside the vocabulary [0, ", c.vocab_size, ")"));
  return KVRT_OK;
}

kvrt_status kvrt::openInputFile(const char *path, const char *what, File &out,
                                uint64_t *bytes, bool *regular) {
  auto failure = [&](const std::string &why) {
    return fail(KVRT_ERR_IO, str("cannot open ", what, " '", path, "': ", why));
  };
  int fd = ::open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return failure(std::strerror(errno));
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    int error = errno;
    ::close(fd);
    return failure(std::strerror(error));
  }
  if (S_ISDIR(info.st_mode)) {
    ::close(fd);
    return failure("it is a directory");
  }
  // Back to blocking reads: a pipe's reader waits for its writer, and sees
  // the end at once when there is none.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::FILE *file = ::fdopen(fd, "rb");
  if (!file) {
    int error = errno;
    ::close(fd);
    return failure(std::strerror(error));
  }
  out.reset(file);
  *regular = S_ISREG(info.st_mode);
  *bytes = *regular ? static_cast<uint64_t>(info.st_size) : 0;
  return KVRT_OK;
}

kvrt_status kvrt::openRegularFile(const char *path, const char *what, File &out,
                                  uint64_t *bytes) {
  bool regular = false;
  if (kvrt_status s = openInputFile(path, what, out, bytes, &regular))
    return s;
  if (regular)
    return KVRT_OK;
  bool fifo = false;
  struct stat info;
  if (::fstat(::fileno(out.get()), &info) == 0)
    fifo = S_ISFIFO(info.st_mode);
  out.reset();
  return fail(KVRT_ERR_IO, str("cannot open ", what, " '", path, "': ",
                               fifo ? "it is a FIFO, not a regular file"
                                    : "not a regular file"));
}

//===----------------------------------------------------------------------===//
// Fault injection
//===----------------------------------------------------------------------===//

namespace {

constexpr int kFaultKinds = 3;
std::atomic<int64_t> faultCount[kFaultKinds];
std::atomic<int64_t> faultArmed[kFaultKinds];

bool validKind(kvrt_fault_kind kind) {
  return int(kind) >= 0 && int(kind) < kFaultKinds;
}

} // namespace

extern "C" void kvrt_fault_arm(kvrt_fault_kind kind, int64_t nth) {
  if (!validKind(kind))
    return;
  faultCount[kind].store(0, std::memory_order_relaxed);
  faultArmed[kind].store(nth < 0 ? 0 : nth, std::memory_order_relaxed);
}

extern "C" int64_t kvrt_fault_count(kvrt_fault_kind kind) {
  return validKind(kind) ? faultCount[kind].load(std::memory_order_relaxed) : 0;
}

kvrt_status kvrt::allocationFault(kvrt_fault_kind kind, const char *what) {
  int64_t n = faultCount[kind].fetch_add(1, std::memory_order_relaxed) + 1;
  if (n != faultArmed[kind].load(std::memory_order_relaxed))
    return KVRT_OK;
  if (kind == KVRT_FAULT_PAGES)
    return fail(KVRT_ERR_POOL_EXHAUSTED,
                str("kv pool exhausted: injected fault at page allocation ", n,
                    " (", what, ")"));
  return fail(KVRT_ERR_OUT_OF_MEMORY,
              str("out of memory: injected fault at ",
                  kind == KVRT_FAULT_WEIGHTS ? "weight" : "scratch",
                  " allocation ", n, " (", what, ")"));
}
