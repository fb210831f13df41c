#include "mha/base/large_array.hpp"

#include <sys/mman.h>

#include <cstdlib>

namespace mha {

namespace {
constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kAlign = 64;  // a cache line: enough for every vector load
}  // namespace

void* allocate_array(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes < kLargeArrayBytes) {
    void* p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
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

}  // namespace mha
