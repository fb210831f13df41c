// Memory for the large arrays of a computation (weights, inputs, projections,
// scratch blocks, outputs). In a process that turns huge pages on (`mha run`:
// one run, all of its memory touched for the first time), an array from
// kLargeArrayBytes up is aligned to 2 MiB and advised for transparent huge
// pages (madvise; Debian's default THP mode), so touching it costs one page
// fault per 2 MiB instead of one per 4 KiB: on the reference VM, 4 MiB took
// 0.47 ms to touch instead of 2.4 ms. Otherwise (the default: warm loops, the
// Python module, sweep workers) arrays come from malloc, which hands freed
// memory back already touched; huge pages there were freed and zeroed again
// on every call (bert-s512 warm: 17.7 -> 20 ms, a tenth of it clearing pages).
#pragma once

#include <cstddef>
#include <new>

namespace mha {

constexpr std::size_t kLargeArrayBytes = std::size_t{1} << 20;

// `bytes` of memory aligned as malloc's, huge-page backed (and 2 MiB-aligned)
// from kLargeArrayBytes up. Throws std::bad_alloc.
void* allocate_array(std::size_t bytes);
// Frees what allocate_array returned (null is ignored).
void free_array(void* p) noexcept;

// Whether allocate_array gives large arrays huge pages (default false).
void set_huge_page_arrays(bool on) noexcept;

// Grows malloc's heap by about `bytes` now and advises that range for
// transparent huge pages (madvise), leaving it free in the heap: what a
// one-run process allocates next comes from memory whose first touch costs
// one fault per 2 MiB. For processes that keep freed memory in the heap
// (mallopt: M_MMAP_THRESHOLD above `bytes`, a large M_TRIM_THRESHOLD), as a
// model run does; otherwise the range goes back to the system when freed and
// the call changes nothing. Touches no page: memory not used stays unbacked.
// Advice only: no error is reported.
void advise_huge_page_heap(std::size_t bytes) noexcept;

// The heap of a process that does one large piece of work and exits (`mha run
// --model`, `mha tokenize`): malloc keeps what is freed (M_MMAP_THRESHOLD 512
// MiB, M_TRIM_THRESHOLD 1 GiB), so buffers freed and allocated again at the
// same sizes (a model's layers) reuse memory already touched, and the heap's
// next 384 MiB are advised for huge pages (advise_huge_page_heap). GPT-2 small
// at 512 tokens: 830-860 -> 600-610 ms a run; LLaMA-3's tokenizer.json loads
// in 0.31-0.39 s instead of 0.61-0.90 s (docs/benchmarks.md "Whole models").
void use_one_run_heap() noexcept;

// A standard allocator over allocate_array, for std::vector and xtensor
// (tensor.hpp's Tensor allocates through it too).
template <class T>
struct ArrayAllocator {
  using value_type = T;
  ArrayAllocator() = default;
  template <class U>
  ArrayAllocator(const ArrayAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_alloc();
    return static_cast<T*>(allocate_array(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t) noexcept { free_array(p); }
  template <class U>
  bool operator==(const ArrayAllocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const ArrayAllocator<U>&) const noexcept {
    return false;
  }
};

}  // namespace mha
