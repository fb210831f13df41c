#include "mha/base/large_array.hpp"

#include <malloc.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>

namespace mha {

namespace {
std::atomic<bool> g_huge{false};
constexpr std::size_t kHugePage = std::size_t{2} << 20;
}  // namespace

void* allocate_array(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes < kLargeArrayBytes || !g_huge.load(std::memory_order_relaxed)) {
    void* p = std::malloc(bytes);
    if (!p) throw std::bad_alloc();
    return p;
  }
  // Whole huge pages, so the last one is not shared with another allocation
  // (which would keep it from being a huge page, or waste it).
  const std::size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, size);
  if (!p) throw std::bad_alloc();
  // Advice only: without THP (or on a kernel in "never" mode) the memory is
  // ordinary pages and the call's failure changes nothing.
  ::madvise(p, size, MADV_HUGEPAGE);
  return p;
}

void free_array(void* p) noexcept {
  std::free(p);
}

void advise_huge_page_heap(std::size_t bytes) noexcept {
  char* p = static_cast<char*>(std::malloc(bytes));
  if (!p) return;
  // The whole huge pages inside the block; the block becomes the heap's free top.
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + kHugePage - 1) / kHugePage * kHugePage;
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + bytes) / kHugePage * kHugePage;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  std::free(p);
}

void use_one_run_heap() noexcept {
  ::mallopt(M_MMAP_THRESHOLD, 512 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
  advise_huge_page_heap(std::size_t{384} << 20);
}

void set_huge_page_arrays(bool on) noexcept {
  g_huge.store(on, std::memory_order_relaxed);
}

}  // namespace mha
