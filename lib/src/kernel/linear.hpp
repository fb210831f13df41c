// Linear maps Y = X W + b as GEMMs over the thread pool, shared by the
// attention layer's projections and the Transformer layer's feed-forward
// network. Internal to the kernel.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "bf16_gemm.hpp"
#include "direct_gemm.hpp"
#include "mha/base/large_array.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/kernel/transformer.hpp"
#include "mha/kernel/weights.hpp"

namespace mha::detail {

// Below this many multiply-adds a GEMM runs as one piece: splitting it costs
// more in wake-ups than it saves.
constexpr std::size_t kParallelGemmWork = std::size_t{1} << 18;
// Larger GEMMs are cut into this many pieces (fewer when a piece would have
// under 16 rows or columns), whatever the thread count: a GEMM's rounding can
// depend on its shape (OpenBLAS picks kernels by it), so pieces that followed
// the threads would make the output differ between thread counts. Eight
// balances 1, 2, 4 and 8 threads.
constexpr std::size_t kGemmPieces = 8;

// Up to this inner dimension a float32 projection runs through the direct
// GEMM (direct_gemm.hpp), whose strips of W (k x 64) then stay in L2: one
// Zen 4 core, 512 x 768 by 768 x 768: 112 vs 104 GFLOP/s for OpenBLAS, and
// 64-row pieces 113 vs 95. The FFN's second GEMM (k = 3072) too: on a Zen 5
// core with OpenBLAS's Haswell kernels (OPENBLAS_CORETYPE=Haswell), a GPT-2
// small forward over 512 tokens took 0.80-0.90 s of CPU instead of 0.91-0.95
// (`mha run --model`, one thread, bench/model_forward.py's checkpoint).
constexpr std::size_t kDirectMaxK = 4096;

// An uninitialized array: the GEMMs write every element, and zeroing first
// would only add a pass over memory the process touches for the first time
// (page faults are a large part of a one-shot run's cost; large arrays get
// huge pages, large_array.hpp).
template <class T>
struct Buffer {
  struct Free {
    void operator()(T* p) const noexcept { free_array(p); }
  };
  std::unique_ptr<T[], Free> data;
  explicit Buffer(std::size_t n = 0)
      : data(n ? static_cast<T*>(allocate_array(n * sizeof(T))) : nullptr) {}
  T* get() const { return data.get(); }
};

// C (m, n; ldc) = A (m, k; lda) B (k, n; ldb), or C += A B when `accumulate`:
// a block product (the attention's, or a projection's), through the direct GEMM (no packing;
// direct_gemm.hpp) for float32 where the CPU has one, else through gemm().
template <class T>
void block_product(std::size_t m, std::size_t n, std::size_t k, const T* A, std::size_t lda,
                   const T* B, std::size_t ldb, T* C, std::size_t ldc, bool accumulate, bool bf16) {
  if constexpr (std::is_same_v<T, float>)
    if (!bf16 && detail::direct_gemm(m, n, k, A, lda, B, ldb, C, ldc, accumulate)) return;
  gemm<T>(false, false, m, n, k, T(1), A, lda, B, ldb, accumulate ? T(1) : T(0), C, ldc, bf16);
}

// One linear map of a call to project(): columns [col, col + n) of Y get
// X W + b, W (k, n; ld n), b (n) or null.
// Wp: W packed for the native bfloat16 GEMM (bf16_gemm.hpp; pack_weights),
// or null.
template <class T>
struct Projection {
  const T* W;
  std::size_t n;
  const T* b;
  std::size_t col;
  const std::uint32_t* Wp = nullptr;
};

// Y[:, col + c0 : col + c1] (rows; ldy) = X (rows, k; ldx) W[:, c0:c1] + b[c0:c1],
// in one GEMM.
// Xp: X rounded for the native bfloat16 GEMM (bf16_round_rows, ld
// bf16_pairs(k) words), used with pr.Wp, or null.
template <class T>
void project_block(const T* X, std::size_t ldx, std::size_t rows, std::size_t k,
                   const Projection<T>& pr, std::size_t c0, std::size_t c1, T* Y, std::size_t ldy,
                   bool bf16, const std::uint32_t* Xp = nullptr) {
  if (rows == 0 || c1 == c0) return;
  T* y = Y + pr.col + c0;
  const T* bias = pr.b ? pr.b + c0 : nullptr;
  // The vector kernels start each element's chain from its bias.
  if constexpr (std::is_same_v<T, float>) {
    if (bf16 && pr.Wp && Xp)
      return bf16_gemm_rounded(rows, c1 - c0, k, 1.f, Xp, bf16_pairs(k), pr.Wp + c0, pr.n, y, ldy,
                               false, bias);
    if (bf16 && pr.Wp)
      return bf16_gemm(rows, c1 - c0, k, 1.f, false, X, ldx, pr.Wp + c0, pr.n, y, ldy, false, bias);
    if (!bf16 && k <= kDirectMaxK &&
        direct_gemm(rows, c1 - c0, k, X, ldx, pr.W + c0, pr.n, y, ldy, false, bias))
      return;
  }
  // OpenBLAS: the bias broadcast into Y first, so that the GEMM with beta = 1
  // adds the product.
  T beta = 0;
  if (bias) {
    for (std::size_t r = 0; r < rows; ++r) std::copy(bias, bias + (c1 - c0), y + r * ldy);
    beta = 1;
  }
  gemm<T>(false, false, rows, c1 - c0, k, T(1), X, ldx, pr.W + c0, pr.n, beta, y, ldy, bf16);
}

// All columns of one projection for `rows` rows: one GEMM.
template <class T>
void project_rows(const T* X, std::size_t ldx, std::size_t rows, std::size_t k,
                  const Projection<T>& pr, T* Y, std::size_t ldy, bool bf16) {
  project_block(X, ldx, rows, k, pr, 0, pr.n, Y, ldy, bf16);
}

// The projection of W (k, n) with bias b (n, or null) into columns [col, col
// + n): with W's words packed at load (packed_weights.hpp) when bfloat16
// GEMMs run natively and `packed` was packed from this W (or stands alone,
// W empty).
template <class T>
Projection<T> projection_of(const Tensor<T, 2>& W, const PackedBf16& packed, const T* b,
                            std::size_t col, bool bf16) {
  const bool has_w = W.size() > 0;
  Projection<T> pr{has_w ? W.data() : nullptr, has_w ? W.shape()[1] : packed.n, b, col};
  if constexpr (std::is_same_v<T, float>)
    if (bf16 && !packed.empty() && packed.of == pr.W && bf16_native()) pr.Wp = packed.words.get();
  return pr;
}

// The projections (W_j: k x n_j) with the weights not packed at load packed
// for the native bfloat16 GEMM into `storage` when bf16 GEMMs run natively, so
// that every piece of a projection reads one packed copy; unchanged
// otherwise. The packing is spread over the pool by pairs of W's rows.
template <class T>
std::vector<Projection<T>> pack_weights(std::vector<Projection<T>> projections, std::size_t k,
                                        bool bf16, int threads, Buffer<std::uint32_t>& storage) {
  if constexpr (std::is_same_v<T, float>) {
    if (!bf16 || !bf16_native() || k == 0) return projections;
    const std::size_t P = bf16_pairs(k);
    std::vector<std::size_t> unpacked;  // the projections to pack now
    std::size_t words = 0;
    for (std::size_t j = 0; j < projections.size(); ++j)
      if (!projections[j].Wp) {
        unpacked.push_back(j);
        words += P * projections[j].n;
      }
    if (unpacked.empty()) return projections;
    storage = Buffer<std::uint32_t>(words);
    std::vector<std::uint32_t*> to;  // unpacked[i]'s words: P x n, one after another
    std::uint32_t* next = storage.get();
    for (std::size_t j : unpacked) {
      to.push_back(next);
      projections[j].Wp = next;
      next += P * projections[j].n;
    }
    constexpr std::size_t kPairsPerTask = 64;
    const std::size_t chunks = (P + kPairsPerTask - 1) / kPairsPerTask;
    parallel_for(unpacked.size() * chunks, threads, [&](std::size_t task, int) {
      const std::size_t i = task / chunks;
      const Projection<T>& pr = projections[unpacked[i]];
      const std::size_t p0 = task % chunks * kPairsPerTask;
      const std::size_t p1 = std::min(P, p0 + kPairsPerTask);
      bf16_pack_b(false, std::min(k, 2 * p1) - 2 * p0, pr.n, pr.W + 2 * p0 * pr.n, pr.n,
                  to[i] + p0 * pr.n, pr.n);
    });
  }
  return projections;
}

// Y[:, col_j : col_j + n_j] (rows, n_j; ldy) = act(X (rows, k; ldx) W_j + b_j)
// for every projection j, in pieces spread over the pool. Each weight matrix
// is used in place. A projection wider than it is tall is cut into column
// pieces, a taller one into row pieces: every piece then packs the smaller of
// X and W_j again, and its GEMM stays large enough for OpenBLAS's kernels
// (BERT-base's 512 x 768 by 768 x 768: 22.0 -> 19.3 ms for Q, K and V on one
// thread; 4096 x 512 by 512 x 512 in column pieces would be 1.45x slower).
// Pieces follow the shape only.
template <class T>
void project(const T* X, std::size_t ldx, std::size_t rows, std::size_t k,
             const std::vector<Projection<T>>& unpacked, T* Y, std::size_t ldy, int threads,
             bool bf16, const Activation* act = nullptr) {
  Buffer<std::uint32_t> packed, rounded;
  const std::vector<Projection<T>> projections = pack_weights(unpacked, k, bf16, threads, packed);
  // Natively, X is rounded once for every piece of every projection.
  const bool native = bf16 && !projections.empty() && projections[0].Wp;
  if constexpr (std::is_same_v<T, float>)
    if (native) {
      const std::size_t P = bf16_pairs(k), chunk = 64, chunks = (rows + chunk - 1) / chunk;
      rounded = Buffer<std::uint32_t>(rows * P);
      parallel_for(chunks, threads, [&](std::size_t c, int) {
        const std::size_t r0 = c * chunk, r1 = std::min(rows, r0 + chunk);
        bf16_round_rows(r1 - r0, k, X + r0 * ldx, ldx, rounded.get() + r0 * P, P);
      });
    }
  struct Piece {
    std::size_t j, begin, end;  // projection j, rows or columns [begin, end)
  };
  std::vector<Piece> pieces;
  for (std::size_t j = 0; j < projections.size(); ++j) {
    const std::size_t n = projections[j].n;
    const std::size_t extent = n > rows ? n : rows;
    // Column pieces are cut at multiples of the GEMM kernels' 64-column
    // strips, so that no piece has a narrow strip of its own.
    const std::size_t unit = n > rows ? 64 : 1, units = (extent + unit - 1) / unit;
    const std::size_t parts = rows * n * k < kParallelGemmWork
                                  ? 1
                                  : std::min<std::size_t>({kGemmPieces, (extent + 15) / 16, units});
    for (std::size_t p = 0; p < parts; ++p)
      pieces.push_back({j, std::min(extent, units * p / parts * unit),
                        std::min(extent, units * (p + 1) / parts * unit)});
  }
  parallel_for(pieces.size(), threads, [&](std::size_t task, int) {
    const Piece& piece = pieces[task];
    const Projection<T>& pr = projections[piece.j];
    std::size_t r0 = 0, r1 = rows, c0 = 0, c1 = pr.n;
    if (pr.n > rows)
      c0 = piece.begin, c1 = piece.end;
    else
      r0 = piece.begin, r1 = piece.end;
    project_block(X + r0 * ldx, ldx, r1 - r0, k, pr, c0, c1, Y + r0 * ldy, ldy, bf16,
                  native ? rounded.get() + r0 * bf16_pairs(k) : nullptr);
    if (act && r1 > r0 && c1 > c0)
      for (std::size_t r = r0; r < r1; ++r) activate(Y + r * ldy + pr.col + c0, c1 - c0, *act);
  });
}

}  // namespace mha::detail
