//===- PlanCache.h - Compiled kv programs, once per shape -------*- C++ -*-===//
//
// The programs kv-serve writes (Plans.h), planned by kv-optimize, lowered by
// kv-lower-to-cpu and JIT-compiled (driver/compiler) the first time a shape
// is asked for, then kept in memory under their text and run for every
// request of that shape. Requests that ask for a shape being compiled wait
// for that compile; compiles themselves run one at a time (they share one
// MLIRContext). At most `capacity` plans are kept: the least recently used
// one no request is running is dropped beyond it.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_SERVER_PLANCACHE_H
#define KVIR_DRIVER_SERVER_PLANCACHE_H

#include "runtime/core/KVRuntime.h"
#include "runtime/exec/Session.h"

#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace kvir::serve {

/// One compiled program.
struct Plan {
  exec::EntryManifest manifest;
  exec::EntryFn entry = nullptr;
  double compileSeconds = 0;
  /// The compiled code and the module it came from.
  std::shared_ptr<void> code;
};

class PlanCache {
public:
  /// Plans for the model of `config` with K/V pages of `dtype`.
  PlanCache(const kvrt_model_config &config, kvrt_kv_dtype dtype,
            size_t capacity);
  ~PlanCache();

  /// The printed `!kv.model<...>` of the model and the `!kv.cache<LxHxDxT`
  /// prefix of its caches, for Plans.h.
  const std::string &modelType() const { return model; }
  const std::string &cacheType() const { return cache; }

  /// The plan of `program`, compiled now when it is not cached
  /// (`compiled` says so). Null with `error` (the compiler's diagnostics)
  /// when it does not compile.
  std::shared_ptr<const Plan> get(const std::string &program, bool &compiled,
                                  std::string &error);

  /// Plans compiled and cache hits so far, plans held.
  int64_t compiles() const;
  int64_t hits() const;
  size_t size() const;

private:
  struct Slot {
    bool done = false;
    std::shared_ptr<const Plan> plan;
    std::string error;
    std::list<std::string>::iterator lru;
  };
  std::shared_ptr<const Plan> compile(const std::string &program,
                                      std::string &error);

  std::string model, cache;
  size_t capacity;
  mutable std::mutex mutex;
  std::condition_variable ready;
  std::map<std::string, std::shared_ptr<Slot>> slots;
  /// Most recently used first.
  std::list<std::string> lru;
  int64_t compileCount = 0, hitCount = 0;
  /// One compile at a time: the MLIRContext is not shared across threads.
  std::mutex compileMutex;
  struct Compiler;
  std::unique_ptr<Compiler> compiler;
};

} // namespace kvir::serve

#endif // KVIR_DRIVER_SERVER_PLANCACHE_H
