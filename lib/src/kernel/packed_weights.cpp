#include "mha/kernel/packed_weights.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "bf16_gemm.hpp"
#include "linear.hpp"
#include "mha/base/thread_pool.hpp"

namespace mha {

namespace {

// Packed words (bf16_pairs(k) x n), allocated as the kernel's buffers are.
std::shared_ptr<std::uint32_t> words_for(std::size_t k, std::size_t n) {
  const std::size_t count = std::max<std::size_t>(1, detail::bf16_pairs(k) * n);
  return std::shared_ptr<std::uint32_t>(
      static_cast<std::uint32_t*>(allocate_array(count * sizeof(std::uint32_t))),
      [](std::uint32_t* p) { free_array(p); });
}

void pack_into(Tensor<float, 2>& W, PackedBf16& packed, int threads) {
  if (W.size() == 0) return;
  packed = pack_bf16(W.data(), W.shape()[0], W.shape()[1], threads);
}

}  // namespace

bool bf16_packing() {
  return detail::bf16_native();
}

void reserve_bf16(PackedBf16& packed, std::size_t k, std::size_t n) {
  if (!(packed.words && packed.words.use_count() == 1 && packed.k == k && packed.n == n))
    packed.words = words_for(k, n);
  packed.k = k;
  packed.n = n;
  packed.of = nullptr;
}

namespace {

// Columns [col, col + count) of `packed` from src (float or bfloat16 bits),
// in tasks of kColumns columns.
template <class Src>
void pack_columns(PackedBf16& packed, std::size_t col, std::size_t count, const Src* src,
                  std::size_t ld, bool rows, int threads) {
  const std::size_t k = packed.k, n = packed.n;
  std::uint32_t* words = packed.words.get();
  constexpr std::size_t kColumns = 64;
  const std::size_t chunks = (count + kColumns - 1) / kColumns;
  parallel_for(chunks, threads, [&](std::size_t c, int) {
    const std::size_t j0 = c * kColumns, cols = std::min(kColumns, count - j0);
    const Src* from = rows ? src + j0 * ld : src + j0;
    if constexpr (std::is_same_v<Src, float>)
      detail::bf16_pack_b(rows, k, cols, from, ld, words + col + j0, n);
    else
      detail::bf16_pack_b_bits(rows, k, cols, from, ld, words + col + j0, n);
  });
}

}  // namespace

void pack_bf16_columns(PackedBf16& packed, std::size_t col, std::size_t count, const float* src,
                       std::size_t ld, bool rows, int threads) {
  pack_columns(packed, col, count, src, ld, rows, threads);
}

void pack_bf16_columns(PackedBf16& packed, std::size_t col, std::size_t count,
                       const std::uint16_t* src, std::size_t ld, bool rows, int threads) {
  pack_columns(packed, col, count, src, ld, rows, threads);
}

PackedBf16 pack_bf16(const float* W, std::size_t k, std::size_t n, int threads) {
  PackedBf16 packed;
  reserve_bf16(packed, k, n);
  pack_bf16_columns(packed, 0, n, W, n, false, threads);
  packed.of = W;
  return packed;
}

Tensor<float, 2> unpack_bf16(const PackedBf16& packed) {
  const std::size_t k = packed.k, n = packed.n;
  Tensor<float, 2> W({k, n});
  for (std::size_t i = 0; i < k; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      const std::uint32_t word = packed.words.get()[i / 2 * n + j];
      const std::uint32_t bits = (i % 2 ? word >> 16 : word & 0xffffu) << 16;
      std::memcpy(&W(i, j), &bits, 4);
    }
  return W;
}

void pack_bf16(Weights<float>& w, int threads) {
  if (!bf16_packing()) return;
  pack_into(w.W_q, w.packed_q, threads);
  pack_into(w.W_k, w.packed_k, threads);
  pack_into(w.W_v, w.packed_v, threads);
  pack_into(w.W_o, w.packed_o, threads);
}

void pack_bf16(TransformerLayer<float>& L, int threads) {
  if (!bf16_packing()) return;
  pack_bf16(L.self_attn, threads);
  pack_bf16(L.cross_attn, threads);
  pack_into(L.ffn.W_1, L.ffn.packed_1, threads);
  pack_into(L.ffn.W_2, L.ffn.packed_2, threads);
  pack_into(L.ffn.W_gate, L.ffn.packed_gate, threads);
}

}  // namespace mha
