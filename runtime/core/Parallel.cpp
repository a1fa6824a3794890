//===- Parallel.cpp - The runtime's thread pool -----------------*- C++ -*-===//
//
// A fixed pool of worker threads, started at the first parallel loop that
// needs them and kept for the life of the process. A loop publishes its task
// under a new generation; the caller and the workers then claim blocks of
// items from one cursor until none is left, and the caller returns once
// every item is done. Claiming is dynamic, so a core that other work keeps
// busy (a shared machine) takes fewer items instead of holding the loop up,
// and a causal attention's later, longer query tokens do not pile up on one
// thread. Blocks shrink as the loop drains (guided self-scheduling,
// claimBlock), so that the threads finish close together. The generated tasks
// compute every item on its own, whichever thread runs it and however the range
// is cut, so results do not depend on the thread count. Workers spin briefly on
// the generation before they sleep: a prefill issues a few loops per layer,
// each a millisecond or less, and a futex wake-up per loop would cost more than
// the spin.
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
      return value < KVRT_MAX_THREADS ? value : KVRT_MAX_THREADS;
  }
  unsigned cores = std::thread::hardware_concurrency();
  return cores ? int32_t(cores) : 1;
}

thread_local bool insideTask = false;

/// The cursor packs the loop's generation (high 32 bits) with the next
/// unclaimed item (low 32 bits): a claim succeeds only for the loop it was
/// meant for, and the job's fields stay valid while a claimed item is
/// unfinished, since the caller waits for every item.
constexpr int64_t kMaxItems = int64_t(1) << 31;
/// The low half of a cursor no claim can take (beyond every count).
constexpr uint64_t kClosed = 0xffffffffu;

/// The items a claim at `begin` of a loop of `count` items on `threads`
/// threads takes: 1 / (kGuidedShare x threads) of those left, and at least
/// 1 / (kLeastShare x threads) of the loop. A loop then starts with blocks
/// of a quarter of its items on two threads and ends with small ones: the
/// caller waits at the end of a loop for the last block another thread
/// holds, half a block on average. Measured on the TinyLlama-shaped Q4_K_M
/// decode on two threads (perf, decode only, three runs each, alternated;
/// an AMD EPYC 2-core machine): the pool's waits were 10.5-10.9% of the
/// samples with fixed blocks of an eighth, 5.7-7.4% with a share of 4;
/// 5.6-8.7% without the floor (more claims), 7.9-8.8% with a share of 2.
/// But each claim of a decode step's matmul starts its rows' streams anew
/// (the gated product two matrices' at once) for the memory's prefetchers
/// to pick up again, the likely reason why fewer claims ran faster on the
/// Zen 4 machine (alternated rounds, 128 steps,
/// bench/results/pool-claims.txt): the Q4_K_M step took 15.1-20.5 ms with a
/// share of 2 against 17.5-21.1 with 4 (nine rounds, each faster),
/// 14.1-19.3 with a block of half the loop; Q8_0 and F16 moved within the
/// noise; a 512-token prefill did not move with a share of 1, which was as
/// fast as 2. 2 keeps a first block of a quarter, so a thread that other
/// work holds up holds up less.
constexpr int64_t kGuidedShare = 2, kLeastShare = 32;
int64_t claimBlock(int64_t begin, int64_t count, int64_t threads) {
  int64_t guided = (count - begin) / (kGuidedShare * threads);
  int64_t least = count / (kLeastShare * threads);
  int64_t block = guided > least ? guided : least;
  return block > 1 ? block : 1;
}

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
    if (count <= 0)
      return;
    int32_t n = numThreads();
    if (n > count)
      n = int32_t(count);
    std::unique_lock<std::mutex> busy(callMutex, std::try_to_lock);
    if (n <= 1 || insideTask || !busy.owns_lock() || count >= kMaxItems) {
      task(context, 0, count);
      return;
    }
    ensureWorkers(n - 1);
    uint32_t gen = ++loopGeneration;
    // Close the cursor under the new generation before the job changes. A
    // worker late from the previous loop may still hold that loop's cursor
    // and read this loop's count: its claim must fail, or it would run items
    // that do not exist and count them into this loop's `done` (which then
    // never equals `count`). The exchange, the job's sizes and the claims
    // are sequentially consistent, so a claim that read a new size comes
    // after the exchange and fails.
    cursor.exchange((uint64_t(gen) << 32) | kClosed, std::memory_order_seq_cst);
    job.task = task;
    job.context = context;
    job.count.store(count, std::memory_order_seq_cst);
    job.threads.store(n, std::memory_order_seq_cst);
    done.store(0, std::memory_order_relaxed);
    cursor.store(uint64_t(gen) << 32, std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(sleepMutex);
      generation.fetch_add(1, std::memory_order_release);
    }
    wake.notify_all();
    insideTask = true;
    runClaims(gen);
    insideTask = false;
    while (done.load(std::memory_order_acquire) != count)
      spinPause();
  }

private:
  /// The task and its context are read only by a thread that has claimed
  /// items of the loop; the sizes may be read by a late worker while the
  /// next loop writes them (its claim then fails), hence atomics.
  struct Job {
    kvrt_task_fn task = nullptr;
    void *context = nullptr;
    std::atomic<int64_t> count{0};
    std::atomic<int64_t> threads{1};
  };

  Pool() { setThreads(0); }

  /// Claims and runs blocks of loop `gen` until none is left.
  void runClaims(uint32_t gen) {
    uint64_t seen = cursor.load(std::memory_order_acquire);
    for (;;) {
      if (uint32_t(seen >> 32) != gen)
        return;
      int64_t begin = int64_t(seen & 0xffffffffu);
      // The job's fields are those of `gen` while the cursor says `gen`.
      // (Or of a later loop, read by a late worker: see run().)
      int64_t count = job.count.load(std::memory_order_seq_cst);
      int64_t threads = job.threads.load(std::memory_order_seq_cst);
      if (begin >= count)
        return;
      int64_t block = claimBlock(begin, count, threads);
      int64_t end = begin + block < count ? begin + block : count;
      if (!cursor.compare_exchange_weak(seen, (uint64_t(gen) << 32) | end,
                                        std::memory_order_seq_cst,
                                        std::memory_order_acquire))
        continue;
      // Claimed: the caller cannot return (nor change the job) before
      // these items are counted done.
      job.task(job.context, begin, end);
      done.fetch_add(end - begin, std::memory_order_acq_rel);
      seen = cursor.load(std::memory_order_acquire);
    }
  }

  void ensureWorkers(int32_t needed) {
    while (int32_t(workers.size()) < needed) {
      uint64_t before = generation.load(std::memory_order_acquire);
      workers.emplace_back([this, before] { work(before); });
      workers.back().detach();
    }
  }

  void work(uint64_t seen) {
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
      runClaims(uint32_t(cursor.load(std::memory_order_acquire) >> 32));
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
  /// Bumped per loop: what sleeping workers wait on.
  std::atomic<uint64_t> generation{0};
  /// (loop generation << 32) | next unclaimed item.
  std::atomic<uint64_t> cursor{0};
  /// Items of the current loop done.
  std::atomic<int64_t> done{0};
  /// Written only by the caller holding callMutex.
  uint32_t loopGeneration = 0;
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
