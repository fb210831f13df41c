#include "mha/base/thread_pool.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace mha {
namespace {

// Spins of a waiting thread before it sleeps: each is a pause instruction
// (tens of cycles), so about 50 us in all, enough to catch the next job of a
// kernel that runs several in a row, short enough not to hold a vCPU.
constexpr int kSpins = 4000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

thread_local bool t_in_task = false;

class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      ++generation_;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void run(std::size_t n, int threads, const std::function<void(std::size_t, int)>& body) {
    std::lock_guard<std::mutex> one_job(job_mutex_);  // one job at a time in the process
    grow(threads - 1);
    job_body_ = &body;
    job_n_ = n;
    next_.store(0, std::memory_order_relaxed);
    failed_.store(false, std::memory_order_relaxed);
    error_ = nullptr;
    helpers_ = threads - 1;
    // Every worker acknowledges every job, those it does not need at once, so
    // none can lag into the next job with this one's view of it.
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    work(0);
    // Wait for the helpers: spin briefly, then sleep.
    for (int i = 0; i < kSpins && pending_.load(std::memory_order_acquire) > 0; ++i) cpu_relax();
    if (pending_.load(std::memory_order_acquire) > 0) {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
    }
    job_body_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Starts workers until there are `count`.
  void grow(int count) {
    while (static_cast<int>(workers_.size()) < count) {
      const int id = static_cast<int>(workers_.size()) + 1;
      // A new worker waits for the next job, not one that ended before it started.
      const std::uint64_t seen = generation_.load(std::memory_order_acquire);
      workers_.emplace_back([this, id, seen] { loop(id, seen); });
    }
  }

  void work(int thread) {
    t_in_task = true;
    for (;;) {
      if (failed_.load(std::memory_order_relaxed)) break;
      const std::size_t task = next_.fetch_add(1, std::memory_order_relaxed);
      if (task >= job_n_) break;
      try {
        (*job_body_)(task, thread);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
    }
    t_in_task = false;
  }

  void loop(int id, std::uint64_t seen) {
    for (;;) {
      // Wait for a new generation: spin briefly, then sleep.
      std::uint64_t g = generation_.load(std::memory_order_acquire);
      for (int i = 0; i < kSpins && g == seen; ++i) {
        cpu_relax();
        g = generation_.load(std::memory_order_acquire);
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        g = generation_.load(std::memory_order_acquire);
      }
      seen = g;
      if (stop_) return;
      if (id <= helpers_) work(id);  // else this job wants fewer threads
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mutex_);
        done_.notify_one();
      }
    }
  }

  std::mutex job_mutex_;
  std::mutex mutex_;  // guards sleeping on wake_ and done_
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  std::atomic<std::uint64_t> generation_{0};
  bool stop_ = false;
  // The current job, written before generation_ is bumped (release) and read
  // after it is seen (acquire).
  const std::function<void(std::size_t, int)>* job_body_ = nullptr;
  std::size_t job_n_ = 0;
  int helpers_ = 0;
  std::atomic<std::size_t> next_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> failed_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

int available_cpus() {
  int n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (n < 1) n = static_cast<int>(std::thread::hardware_concurrency());
  // Where Slurm does not pin CPUs (TaskPlugin=task/none) the affinity mask
  // is the whole node; the allocation is SLURM_CPUS_PER_TASK.
  if (const char* env = std::getenv("SLURM_CPUS_PER_TASK")) {
    const int v = std::atoi(env);
    if (v > 0 && (n < 1 || v < n)) n = v;
  }
  return std::max(1, n);
}

int default_threads() {
  static const int n = [] {
    if (const char* env = std::getenv("OMP_NUM_THREADS")) {
      const int v = std::atoi(env);  // "4" or "4,2": the first level
      if (v > 0) return v;
    }
    return available_cpus();
  }();
  return n;
}

int resolve_threads(int threads) {
  return threads > 0 ? threads : default_threads();
}

void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t, int)>& body) {
  const int used = static_cast<int>(std::min<std::size_t>(std::max(threads, 1), n));
  if (used <= 1 || t_in_task) {
    for (std::size_t task = 0; task < n; ++task) body(task, 0);
    return;
  }
  pool().run(n, used, body);
}

}  // namespace mha
