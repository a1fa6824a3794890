//===- Parallel.cpp - The runtime's thread pool -----------------*- C++ -*-===//
//
// A fixed pool of worker threads, started at the first parallel loop that
// needs them and kept for the life of the process. A loop publishes its task
// under a new generation number; each worker runs its static share and counts
// itself done. Workers spin briefly on the generation before they sleep: a
// prefill issues a few loops per layer, each a millisecond or less, and a
// futex wake-up per loop would cost more than the spin.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/KVParallel.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace {

int32_t defaultThreads() {
  if (const char *env = std::getenv("KVIR_THREADS")) {
    int value = std::atoi(env);
    if (value >= 1)
      return value;
  }
  unsigned cores = std::thread::hardware_concurrency();
  return cores ? int32_t(cores) : 1;
}

thread_local bool insideTask = false;

class Pool {
public:
  static Pool &get() {
    // Never destroyed: workers may still sleep when static destructors run.
    static Pool *pool = new Pool();
    return *pool;
  }

  void setThreads(int32_t n) {
    n = n >= 1 ? n : defaultThreads();
    threads.store(n < KVRT_MAX_THREADS ? n : KVRT_MAX_THREADS,
                  std::memory_order_relaxed);
  }
  int32_t numThreads() const { return threads.load(std::memory_order_relaxed); }

  void run(int64_t count, kvrt_task_fn task, void *context) {
    int32_t n = numThreads();
    if (count <= 0)
      return;
    if (n > count)
      n = int32_t(count);
    std::unique_lock<std::mutex> busy(callMutex, std::try_to_lock);
    if (n <= 1 || insideTask || !busy.owns_lock()) {
      task(context, 0, count);
      return;
    }
    ensureWorkers(n - 1);
    job.task = task;
    job.context = context;
    job.count = count;
    job.parts = n;
    // Every worker acknowledges every generation, so none can lag behind
    // and read the next job while it is written.
    pending.store(int32_t(workers.size()), std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(sleepMutex);
      generation.fetch_add(1, std::memory_order_release);
    }
    wake.notify_all();
    insideTask = true;
    task(context, 0, count / n);
    insideTask = false;
    while (pending.load(std::memory_order_acquire) != 0)
      std::this_thread::yield();
  }

private:
  struct Job {
    kvrt_task_fn task = nullptr;
    void *context = nullptr;
    int64_t count = 0;
    int32_t parts = 0;
  };

  Pool() { setThreads(0); }

  void ensureWorkers(int32_t needed) {
    while (int32_t(workers.size()) < needed) {
      int32_t index = int32_t(workers.size()) + 1;
      // The generation before the job that starts the worker: it must run
      // that job, however late it starts.
      uint64_t before = generation.load(std::memory_order_acquire);
      workers.emplace_back([this, index, before] { work(index, before); });
      workers.back().detach();
    }
  }

  void work(int32_t index, uint64_t seen) {
    insideTask = true;
    for (;;) {
      uint64_t now = seen;
      for (int spin = 0; spin < 20000 && now == seen; ++spin) {
        now = generation.load(std::memory_order_acquire);
        if (now == seen)
          spinPause();
      }
      if (now == seen) {
        std::unique_lock<std::mutex> lock(sleepMutex);
        wake.wait(lock, [&] {
          return generation.load(std::memory_order_acquire) != seen;
        });
        now = generation.load(std::memory_order_acquire);
      }
      seen = now;
      Job j = job;
      if (index < j.parts) {
        int64_t begin = j.count * index / j.parts;
        int64_t end = j.count * (index + 1) / j.parts;
        if (begin < end)
          j.task(j.context, begin, end);
      }
      pending.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  static void spinPause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  std::atomic<int32_t> threads{1};
  std::mutex callMutex;
  std::mutex sleepMutex;
  std::condition_variable wake;
  std::atomic<uint64_t> generation{0};
  std::atomic<int32_t> pending{0};
  Job job;
  std::vector<std::thread> workers;
};

} // namespace

extern "C" void kvrt_parallel_for(int64_t count, kvrt_task_fn task,
                                  void *context) {
  Pool::get().run(count, task, context);
}

extern "C" void kvrt_set_num_threads(int32_t n) { Pool::get().setThreads(n); }

extern "C" int32_t kvrt_get_num_threads(void) {
  return Pool::get().numThreads();
}
