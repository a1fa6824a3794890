//===- ParallelTest.cpp - The runtime's thread pool -----------------------===//
//
// kvrt_parallel_for must run every item of every loop exactly once and
// return, however late a worker is from the loop before. Many short loops of
// changing sizes on more threads than cores make workers late (preempted
// between reading a loop's cursor and claiming from it). A lost or doubled
// count would hang the caller: a watchdog turns a hang into a failure.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/KVParallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace {

constexpr int64_t kMaxCount = 97;

struct Loop {
  std::atomic<int32_t> runs[kMaxCount + 64];
  int64_t count = 0;
};

void record(void *context, int64_t begin, int64_t end) {
  auto *loop = static_cast<Loop *>(context);
  for (int64_t i = begin; i < end; ++i)
    loop->runs[i].fetch_add(1, std::memory_order_relaxed);
}

/// Fails the whole test binary if `body` has not returned within `seconds`.
class Watchdog {
public:
  explicit Watchdog(int seconds)
      : thread([this, seconds] {
          std::unique_lock<std::mutex> lock(mutex);
          if (!cv.wait_for(lock, std::chrono::seconds(seconds),
                           [this] { return finished; })) {
            std::fprintf(stderr,
                         "ParallelTest: kvrt_parallel_for did not "
                         "return within %d s\n",
                         seconds);
            std::_Exit(1);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      finished = true;
    }
    cv.notify_all();
    thread.join();
  }

private:
  std::mutex mutex;
  std::condition_variable cv;
  bool finished = false;
  std::thread thread;
};

TEST(ParallelTest, EveryItemOfEveryLoopRunsOnce) {
  Watchdog watchdog(60);
  int32_t before = kvrt_get_num_threads();
  for (int32_t threads : {2, 3, 5}) {
    kvrt_set_num_threads(threads);
    uint64_t state = 12345 + threads;
    for (int iteration = 0; iteration < 20000; ++iteration) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      Loop loop;
      loop.count = 1 + int64_t((state >> 33) % kMaxCount);
      for (auto &r : loop.runs)
        r.store(0, std::memory_order_relaxed);
      kvrt_parallel_for(loop.count, record, &loop);
      for (int64_t i = 0; i < kMaxCount + 64; ++i) {
        int32_t expected = i < loop.count ? 1 : 0;
        if (loop.runs[i].load() != expected) {
          ADD_FAILURE() << "threads " << threads << ", loop " << iteration
                        << " of " << loop.count << " items: item " << i
                        << " ran " << loop.runs[i].load() << " times";
          kvrt_set_num_threads(before);
          return;
        }
      }
    }
  }
  kvrt_set_num_threads(before);
}

} // namespace
