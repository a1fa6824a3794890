//===- Error.cpp - Error reporting across the C ABI -------------*- C++ -*-===//

#include "runtime/core/Support.h"

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
