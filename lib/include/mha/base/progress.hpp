// How far a long call has got, for a display on another thread (mha run's
// progress line): the library names the stage it is in and counts the units
// of work done out of a total (the kernel's attention blocks); a reader only
// loads. Every field is atomic, so the reader needs no lock and the writer
// pays one relaxed add per block.
#pragma once

#include <atomic>
#include <cstdint>

namespace mha {

struct StageProgress {
  // A string literal: plan, load, compute, repeat, write, done.
  std::atomic<const char*> stage{"plan"};
  std::atomic<std::uint64_t> done{0}, total{0};  // total 0: the stage is not counted

  // Enters `name` (a string literal) with `units` of work to count.
  void begin(const char* name, std::uint64_t units = 0) {
    total.store(units, std::memory_order_relaxed);
    done.store(0, std::memory_order_relaxed);
    stage.store(name, std::memory_order_release);
  }
  void add(std::uint64_t n = 1) { done.fetch_add(n, std::memory_order_relaxed); }
};

}  // namespace mha
