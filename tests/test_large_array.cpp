// large_array.hpp: alignment, usability and the huge-page advice of large
// arrays when turned on; ordinary memory for small ones and when off; the
// allocator in a std::vector; the heap advice of a model run.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mha/base/large_array.hpp"

namespace {

// The VmFlags line of the mapping of /proc/self/smaps that holds `p`.
std::string vm_flags_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = lo <= a && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

}  // namespace

TEST_CASE("allocate_array aligns and advises large arrays", "[large_array]") {
  mha::set_huge_page_arrays(true);
  for (std::size_t bytes :
       {std::size_t{1}, std::size_t{100}, std::size_t{4096}, mha::kLargeArrayBytes - 1,
        mha::kLargeArrayBytes, std::size_t{5} << 20}) {
    INFO(bytes << " bytes");
    void* p = mha::allocate_array(bytes);
    REQUIRE(p != nullptr);
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    CHECK(a % alignof(std::max_align_t) == 0);
    std::memset(p, 0x5a, bytes);  // all of it is writable
    CHECK(static_cast<unsigned char*>(p)[bytes - 1] == 0x5a);
    if (bytes >= mha::kLargeArrayBytes) {
      CHECK(a % (std::size_t{2} << 20) == 0);
      // madvise(MADV_HUGEPAGE) shows as "hg" among the mapping's flags.
      const std::string flags = vm_flags_of(p);
      REQUIRE(!flags.empty());
      CHECK(flags.find(" hg") != std::string::npos);
    }
    mha::free_array(p);
  }
  mha::free_array(nullptr);
  // Off (the default): malloc's memory, without the advice.
  mha::set_huge_page_arrays(false);
  void* p = mha::allocate_array(std::size_t{5} << 20);
  const std::string flags = vm_flags_of(p);
  REQUIRE(!flags.empty());
  CHECK(flags.find(" hg") == std::string::npos);
  mha::free_array(p);
}

TEST_CASE("ArrayAllocator serves std::vector", "[large_array]") {
  mha::set_huge_page_arrays(true);
  std::vector<float, mha::ArrayAllocator<float>> v(3u << 20, 1.5f);  // 12 MiB
  mha::set_huge_page_arrays(false);
  CHECK(reinterpret_cast<std::uintptr_t>(v.data()) % (std::size_t{2} << 20) == 0);
  v.resize(10);
  v.shrink_to_fit();
  CHECK(v.size() == 10);
  CHECK(v[9] == 1.5f);
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MHA_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define MHA_TEST_ASAN 1
#endif

TEST_CASE("use_one_run_heap advises the heap a model run allocates from", "[large_array]") {
#ifdef MHA_TEST_ASAN
  SUCCEED("AddressSanitizer's allocator is not malloc's heap: nothing to observe");
#else
  // In a child: the heap settings and the advice are the whole process's.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int failed = 0;
    std::vector<float> before(1u << 20);  // 4 MiB, mapped by malloc as it was
    failed |= vm_flags_of(before.data()).find(" hg") != std::string::npos ? 1 : 0;
    mha::use_one_run_heap();
    std::vector<float> after(4u << 20, 1.0f);  // 16 MiB, touched
    const std::string flags = vm_flags_of(after.data() + (2u << 20));
    failed |= flags.find(" hg") == std::string::npos ? 2 : 0;
    failed |= after[(4u << 20) - 1] != 1.0f ? 4 : 0;
    ::_exit(failed);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  // 1: memory advised before the call; 2: the new arrays' memory not advised.
  CHECK(WEXITSTATUS(status) == 0);
#endif
}
