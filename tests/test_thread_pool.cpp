// The kernel's thread pool: every task runs once, thread indices stay in
// range and are never held by two tasks at once (the kernel indexes scratch
// buffers by them), exceptions reach the caller, nested calls run inline, and
// jobs with growing and shrinking thread counts reuse one pool.
#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "mha/base/thread_pool.hpp"

TEST_CASE("every task runs exactly once on a thread index below the count", "[thread_pool]") {
  for (int threads : {1, 2, 3, 5, 2, 8, 1, 4}) {
    for (std::size_t n : {0, 1, 2, 7, 100, 1000}) {
      std::vector<std::atomic<int>> runs(n);
      std::vector<std::atomic<int>> busy(8);
      std::atomic<int> overlap{0}, out_of_range{0};
      mha::parallel_for(n, threads, [&](std::size_t task, int thread) {
        if (thread < 0 || thread >= std::max(threads, 1)) {
          ++out_of_range;
          return;
        }
        if (busy[thread].fetch_add(1) != 0) ++overlap;  // another task holds this index
        runs[task].fetch_add(1);
        if (task % 7 == 0) std::this_thread::yield();
        busy[thread].fetch_sub(1);
      });
      INFO("threads " << threads << ", tasks " << n);
      CHECK(out_of_range == 0);
      CHECK(overlap == 0);
      for (std::size_t i = 0; i < n; ++i) CHECK(runs[i] == 1);
    }
  }
}

TEST_CASE("more than one thread takes part when there is work", "[thread_pool]") {
  // Tasks wait until a second thread has joined (bounded, so a failure cannot hang).
  std::atomic<int> seen_other{0};
  mha::parallel_for(64, 2, [&](std::size_t, int thread) {
    if (thread == 1) seen_other = 1;
    for (int i = 0; i < 200000 && !seen_other; ++i) std::this_thread::yield();
  });
  CHECK(seen_other == 1);
}

TEST_CASE("the first exception of a task reaches the caller", "[thread_pool]") {
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH(mha::parallel_for(100, 3,
                                      [&](std::size_t task, int) {
                                        ++ran;
                                        if (task == 10) throw std::runtime_error("task 10 failed");
                                      }),
                    "task 10 failed");
  CHECK(ran >= 1);
  // The pool still works afterwards.
  std::atomic<int> count{0};
  mha::parallel_for(50, 3, [&](std::size_t, int) { ++count; });
  CHECK(count == 50);
}

TEST_CASE("a parallel_for inside a task runs inline", "[thread_pool]") {
  std::atomic<int> inner{0}, inner_thread_not_zero{0};
  mha::parallel_for(8, 2, [&](std::size_t, int) {
    mha::parallel_for(5, 4, [&](std::size_t, int thread) {
      ++inner;
      if (thread != 0) ++inner_thread_not_zero;
    });
  });
  CHECK(inner == 40);
  CHECK(inner_thread_not_zero == 0);
}

TEST_CASE("thread counts resolve to the default for 0", "[thread_pool]") {
  CHECK(mha::default_threads() >= 1);
  CHECK(mha::resolve_threads(0) == mha::default_threads());
  CHECK(mha::resolve_threads(3) == 3);
}
