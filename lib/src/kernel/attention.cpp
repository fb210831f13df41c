#include "mha/kernel/attention.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <type_traits>
#include <vector>

#include "direct_gemm.hpp"
#include "linear.hpp"
#include "mha/base/error.hpp"
#include "mha/base/large_array.hpp"
#include "mha/base/progress.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/kernel/vexp.hpp"

namespace mha {
namespace {

template <class T>
constexpr T kNegInf = -std::numeric_limits<T>::infinity();

// max(x[0..n)), NaN skipped, -inf for n = 0 (vexp.hpp).
template <class T>
T row_max(const T* x, std::size_t n) {
  return max_of(x, n);
}

// A row whose maximum is -inf is either fully masked or holds NaN (which
// row_max skips); NaN must stay NaN, not become the masked-row policy.
template <class T>
bool has_nan(const T* x, std::size_t n) {
  for (std::size_t s = 0; s < n; ++s)
    if (std::isnan(x[s])) return true;
  return false;
}

using detail::block_product;
using detail::Buffer;
// large_array.hpp's allocator whose resize() leaves new elements
// uninitialized: the tasks' scratch is written before it is read, and zeroing
// it would be one more pass over up to a few MiB per call.
template <class T>
struct ScratchAllocator : ArrayAllocator<T> {
  ScratchAllocator() = default;
  template <class U>
  ScratchAllocator(const ScratchAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
};
// A growable array in large_array.hpp's memory (scratch of the tasks).
template <class T>
using Array = std::vector<T, ScratchAllocator<T>>;
using detail::kGemmPieces;
using detail::project;
using detail::project_rows;
using detail::Projection;

// The projected Q (B*T rows), K and V (B*S rows), each addressed by pointer
// and leading dimension into one or more shared buffers.
template <class T>
struct Projections {
  Buffer<T> qkv, kv, k, v;
  const T *Q = nullptr, *K = nullptr, *V = nullptr;
  std::size_t ldq = 0, ldk = 0, ldv = 0;
};

template <class T>
Projections<T> project_inputs(const Dims& d, const T* X_q, const T* X_k, const T* X_v,
                              const Weights<T>& w, int threads, bool bf16) {
  // Q has h heads; K and V have kv_heads (= h unless grouped-query).
  const std::size_t hdk = d.h * d.d_k, BT = d.B * d.T, BS = d.B * d.S;
  const std::size_t kdk = d.kv() * d.d_k, kdv = d.kv() * d.d_v;
  const bool bias = w.has_bias();
  auto proj = [&](const Tensor<T, 2>& W, const PackedBf16& packed, const Tensor<T, 1>& b,
                  std::size_t col) {
    return detail::projection_of(W, packed, bias ? b.data() : nullptr, col, bf16);
  };
  Projections<T> p;
  // Sharing is read off the pointers, so a caller passing one tensor three
  // times gets the fused GEMM whatever its Dims flags say.
  if (X_k == X_q && X_v == X_q) {
    // Self-attention: rows [Q | K | V] of width (h + kv_heads)*d_k + kv_heads*d_v.
    const std::size_t width = hdk + kdk + kdv;
    p.qkv = Buffer<T>(BT * width);
    project(X_q, d.d_model, BT, d.d_model,
            {proj(w.W_q, w.packed_q, w.b_q, 0), proj(w.W_k, w.packed_k, w.b_k, hdk),
             proj(w.W_v, w.packed_v, w.b_v, hdk + kdk)},
            p.qkv.get(), width, threads, bf16);
    p.Q = p.qkv.get(), p.K = p.Q + hdk, p.V = p.K + kdk;
    p.ldq = p.ldk = p.ldv = width;
    return p;
  }
  p.qkv = Buffer<T>(BT * hdk);
  project(X_q, d.d_model, BT, d.d_model, {proj(w.W_q, w.packed_q, w.b_q, 0)}, p.qkv.get(), hdk,
          threads, bf16);
  p.Q = p.qkv.get(), p.ldq = hdk;
  if (X_v == X_k) {
    // Key = value input: rows [K | V].
    const std::size_t width = kdk + kdv;
    p.kv = Buffer<T>(BS * width);
    project(X_k, d.kdim, BS, d.kdim,
            {proj(w.W_k, w.packed_k, w.b_k, 0), proj(w.W_v, w.packed_v, w.b_v, kdk)}, p.kv.get(),
            width, threads, bf16);
    p.K = p.kv.get(), p.V = p.K + kdk, p.ldk = p.ldv = width;
    return p;
  }
  p.k = Buffer<T>(BS * kdk);
  p.v = Buffer<T>(BS * kdv);
  project(X_k, d.kdim, BS, d.kdim, {proj(w.W_k, w.packed_k, w.b_k, 0)}, p.k.get(), kdk, threads,
          bf16);
  project(X_v, d.vdim, BS, d.vdim, {proj(w.W_v, w.packed_v, w.b_v, 0)}, p.v.get(), kdv, threads,
          bf16);
  p.K = p.k.get(), p.V = p.v.get(), p.ldk = kdk, p.ldv = kdv;
  return p;
}

// RoPE (attention.hpp) in place on `rows` rows of `heads` heads of width
// d_k at X + r * ld + head * d_k, the row of batch b position t being r =
// b * L + t. cos and sin come from a table of L x dim/2 angles, computed in
// double: O(L d_k), never (B, L, d_k).
template <class T>
void rotate(T* X, std::size_t ld, std::size_t B, std::size_t L, std::size_t heads, std::size_t d_k,
            const Rope& rope, std::size_t offset, int threads) {
  const std::size_t dim = rope.dim ? rope.dim : d_k, half = dim / 2;
  std::vector<T> cos_t(L * half), sin_t(L * half);
  for (std::size_t t = 0; t < L; ++t)
    for (std::size_t i = 0; i < half; ++i) {
      const double pos = static_cast<double>(offset + t) / rope.scaling;
      const double angle =
          pos * std::pow(rope.theta, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
      cos_t[t * half + i] = static_cast<T>(std::cos(angle));
      sin_t[t * half + i] = static_cast<T>(std::sin(angle));
    }
  const bool interleaved = rope.layout == RopeLayout::interleaved;
  constexpr std::size_t kRows = 64;  // rows per task, fixed by the shape
  parallel_for((B * L + kRows - 1) / kRows, threads, [&](std::size_t task, int) {
    const std::size_t r1 = std::min(B * L, (task + 1) * kRows);
    for (std::size_t r = task * kRows; r < r1; ++r) {
      const T* c = &cos_t[(r % L) * half];
      const T* sn = &sin_t[(r % L) * half];
      for (std::size_t head = 0; head < heads; ++head) {
        T* x = X + r * ld + head * d_k;
        for (std::size_t i = 0; i < half; ++i) {
          const std::size_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
          const T x0 = x[a], x1 = x[b];
          x[a] = x0 * c[i] - x1 * sn[i];
          x[b] = x1 * c[i] + x0 * sn[i];
        }
      }
    }
  });
}

// QK-norm in place: each head's d_k features x <- x / sqrt(mean(x^2) + eps) * g,
// the mean in double, on `rows` rows of `heads` heads at X + r * ld.
template <class T>
void rms_norm_heads(T* X, std::size_t ld, std::size_t rows, std::size_t heads, std::size_t d_k,
                    const Tensor<T, 1>& g, T eps, int threads) {
  constexpr std::size_t kRows = 64;
  parallel_for((rows + kRows - 1) / kRows, threads, [&](std::size_t task, int) {
    const std::size_t r1 = std::min(rows, (task + 1) * kRows);
    for (std::size_t r = task * kRows; r < r1; ++r)
      for (std::size_t head = 0; head < heads; ++head) {
        T* x = X + r * ld + head * d_k;
        double sq = 0;
        for (std::size_t i = 0; i < d_k; ++i) sq += static_cast<double>(x[i]) * x[i];
        const T inv = static_cast<T>(1 / std::sqrt(sq / static_cast<double>(d_k) + eps));
        for (std::size_t i = 0; i < d_k; ++i) x[i] = x[i] * inv * g(i);
      }
  });
}

// The projected K of `p`, writable (p owns it): its own buffer, K of [K | V],
// or K of [Q | K | V]. Q is always at p.qkv.
template <class T>
T* writable_K(const Dims& d, Projections<T>& p) {
  return p.kv.data ? p.kv.get() : p.k.data ? p.k.get() : p.qkv.get() + d.h * d.d_k;
}

// QK-norm (Weights::q_norm, k_norm) on the projected Q and K, before the
// rotary positions.
template <class T>
void normalize_qk(const Dims& d, Projections<T>& p, const Weights<T>& w, T eps, int threads) {
  rms_norm_heads(p.qkv.get(), p.ldq, d.B * d.T, d.h, d.d_k, w.q_norm, eps, threads);
  rms_norm_heads(writable_K(d, p), p.ldk, d.B * d.S, d.kv(), d.d_k, w.k_norm, eps, threads);
}

// RoPE on the projected Q and K.
template <class T>
void apply_rope(const Dims& d, Projections<T>& p, const Rope& rope, int threads) {
  const std::size_t dim = rope.dim ? rope.dim : d.d_k;
  if (dim % 2 || dim > d.d_k)
    fail_input("rope_dim: " + std::to_string(dim) +
               " must be even and at most d_k = " + std::to_string(d.d_k));
  rotate(p.qkv.get(), p.ldq, d.B, d.T, d.h, d.d_k, rope, rope.offset, threads);
  rotate(writable_K(d, p), p.ldk, d.B, d.S, d.kv(), d.d_k, rope, 0, threads);
}

// What one head-block computation needs, shared read-only by all tasks.
template <class T>
struct Job {
  const Dims& d;
  const Mask<T>& mask;
  const LayerOptions<T>& opt;
  const Projections<T>& p;
  std::size_t block_q, block_k;
  T* context;                   // (B*T, h*d_v): head i's output in columns [i*d_v, (i+1)*d_v)
  std::atomic<bool>* overflow;  // set when a row's logits overflowed T (see all_masked)
  // The batch element p and context start at: 0, or a piece's first (pieced_layer).
  std::size_t b0 = 0;
  // With native bfloat16 GEMMs (bf16_gemm.hpp), K and V packed once for every
  // query block (pack_keys_values), or null: per (b, key/value head), K^T
  // (bf16_pairs(d_k), S) and V (bf16_pairs(S), d_v).
  const std::uint32_t* Kp = nullptr;
  const std::uint32_t* Vp = nullptr;
  // The scores and pattern sites the hook wants (LayerOptions::hook), or null.
  const Site* scores = nullptr;
  const Site* pattern = nullptr;

  // Query blocks of Bq = min(block_q, T) rows, the last one possibly shorter.
  std::size_t Bq() const { return std::min(block_q, d.T); }
  std::size_t q_blocks() const { return (d.T + Bq() - 1) / Bq(); }
  std::size_t rows_of(std::size_t qb) const { return std::min(Bq(), d.T - qb * Bq()); }

  const T* Q(std::size_t b, std::size_t head, std::size_t t0) const {
    return p.Q + ((b - b0) * d.T + t0) * p.ldq + head * d.d_k;
  }
  // Query head `head` reads key/value head head / group (grouped-query attention).
  const T* K(std::size_t b, std::size_t head) const {
    return p.K + (b - b0) * d.S * p.ldk + head / d.group() * d.d_k;
  }
  const T* V(std::size_t b, std::size_t head) const {
    return p.V + (b - b0) * d.S * p.ldv + head / d.group() * d.d_v;
  }
  const std::uint32_t* packed_K(std::size_t b, std::size_t head) const {
    return Kp + ((b - b0) * d.kv() + head / d.group()) * detail::bf16_pairs(d.d_k) * d.S;
  }
  const std::uint32_t* packed_V(std::size_t b, std::size_t head) const {
    return Vp + ((b - b0) * d.kv() + head / d.group()) * detail::bf16_pairs(d.S) * d.d_v;
  }
  T* ctx(std::size_t b, std::size_t head, std::size_t t0) const {
    return context + ((b - b0) * d.T + t0) * d.h * d.d_v + head * d.d_v;
  }
  // Keys at or beyond this index are masked for all of rows [t0, t0 + rows).
  std::size_t key_end(std::size_t b, std::size_t t0, std::size_t rows) const {
    return mask.empty() ? d.S : std::min(d.S, mask.key_end(d, b, t0 + rows - 1));
  }
  T policy_fill() const {
    return opt.masked_rows == MaskedRows::zero      ? T(0)
           : opt.masked_rows == MaskedRows::uniform ? T(1) / static_cast<T>(d.S)
                                                    : std::numeric_limits<T>::quiet_NaN();
  }
};

// Soft-capping (Gemma 2, ONNX Attention): x <- c tanh(x / c) on rows of n
// logits at P + r * ld, before any mask or bias. tanh(y) = sign(y) (1 - e) /
// (1 + e) with e = exp(-2|y|) from the vectorized exp; below |y| = 1/4, where
// that form cancels, an odd Taylor polynomial (error < 2e-8 relative there,
// below float32's rounding). float64 calls std::tanh. `scratch` holds n values.
template <class T>
void softcap_rows(T* P, std::size_t rows, std::size_t n, std::size_t ld, T c, T* scratch) {
  if constexpr (sizeof(T) == 8) {
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t s = 0; s < n; ++s) P[r * ld + s] = c * std::tanh(P[r * ld + s] / c);
    return;
  }
  const T inv_c = T(1) / c;
  for (std::size_t r = 0; r < rows; ++r) {
    T* x = P + r * ld;
    for (std::size_t s = 0; s < n; ++s) scratch[s] = T(-2) * std::abs(x[s] * inv_c);
    exp_shifted_sum(scratch, n, T(0));  // scratch = exp(-2|y|)
    for (std::size_t s = 0; s < n; ++s) {
      const T y = x[s] * inv_c, a = std::abs(y), y2 = y * y;
      const T far = (T(1) - scratch[s]) / (T(1) + scratch[s]);
      // tanh(y) = y - y^3/3 + 2y^5/15 - 17y^7/315 + 62y^9/2835 - ...
      const T near =
          a *
          (T(1) + y2 * (T(-1) / 3 + y2 * (T(2) / 15 + y2 * (T(-17) / 315 + y2 * (T(62) / 2835)))));
      const T t = a < T(0.25) ? near : far;
      x[s] = c * (y < 0 ? -t : t);
    }
  }
}

// True when the mask itself hides every key from query row t. A row whose
// logits are all -inf although the mask leaves some key visible has
// overflowed T (|scale q.k| beyond 3.4e38 in float32): that is not a masked
// row, so it gets NaN and the job's overflow flag instead of the policy.
// Costs O(S), only on rows with no visible key.
template <class T>
bool all_masked(const Job<T>& job, std::size_t b, std::size_t head, std::size_t t) {
  const auto& d = job.d;
  if (job.mask.empty()) return false;
  std::vector<T> row(d.S, T(0));
  job.mask.apply(d, b, head, t, t + 1, 0, d.S, row.data(), d.S);
  return row_max(row.data(), d.S) == kNegInf<T>;
}

// The head output of a query row whose keys are all masked: 0, NaN, or under
// "uniform" the mean of V_i over all S keys.
template <class T>
void masked_row_output(const Job<T>& job, std::size_t b, std::size_t head, T* out) {
  const auto& d = job.d;
  if (job.opt.masked_rows != MaskedRows::uniform) {
    std::fill(out, out + d.d_v, job.policy_fill());
    return;
  }
  std::fill(out, out + d.d_v, T(0));
  const T* V = job.V(b, head);
  for (std::size_t s = 0; s < d.S; ++s)
    for (std::size_t c = 0; c < d.d_v; ++c) out[c] += V[s * job.p.ldv + c];
  for (std::size_t c = 0; c < d.d_v; ++c) out[c] /= static_cast<T>(d.S);
}

// Y (cols, rows; ldy) = scale * X (rows, cols; ldx)^T, in 16 x 16 tiles
// (each tile's reads and writes stay within a few cache lines).
template <class T>
void transpose_scaled(const T* X, std::size_t ldx, std::size_t rows, std::size_t cols, T scale,
                      T* Y, std::size_t ldy) {
  constexpr std::size_t kTile = 16;
  for (std::size_t r0 = 0; r0 < rows; r0 += kTile)
    for (std::size_t c0 = 0; c0 < cols; c0 += kTile) {
      const std::size_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (std::size_t c = c0; c < c1; ++c)
        for (std::size_t r = r0; r < r1; ++r) Y[c * ldy + r] = scale * X[r * ldx + c];
    }
}

// Query rows from which flash_block computes Q_i K_i^T by the direct GEMM.
constexpr std::size_t kDirectScoreRows = 256;
// The same for exact_block, whose query blocks are 128 rows by default.
constexpr std::size_t kDirectExactRows = 64;

// Elements of flash_block's scratch for query blocks of Bq rows and key
// blocks of Bk: P (Bq, Bk), O (Bq, d_v), m and l (Bq), X (Bk), and K_i's block
// transposed (d_k, Bk) when Bq allows the direct score product.
inline std::size_t flash_scratch(const Dims& d, std::size_t Bq, std::size_t Bk) {
  return Bq * Bk + Bq * d.d_v + 2 * Bq + Bk + (Bq >= kDirectScoreRows ? d.d_k * Bk : 0);
}

// flash_block's products through the native bfloat16 GEMM (bf16_gemm.hpp):
// Q_i rounded once for all key blocks, K_i's and V_i's key blocks read from
// the job's packed copies (pack_keys_values) or packed here, and each row of
// P rounded as the softmax finishes it, while it is still in L1. Per-thread
// scratch; float32 only (bfloat16 GEMMs are refused in float64 before any
// task runs, so the double build's members do nothing).
template <class T>
class NativeBlock {
 public:
  void start(const Job<T>& job, std::size_t b, std::size_t head, const T* Q, std::size_t rows) {
    job_ = &job, b_ = b, head_ = head;
    const auto& d = job.d;
    pk_ = detail::bf16_pairs(d.d_k), pn_ = detail::bf16_pairs(job.block_k);
    auto& s = scratch();
    s.q.resize(rows * pk_);
    s.p.resize(rows * pn_);
    s.kv.resize(std::max(pk_ * job.block_k, pn_ * d.d_v));
    if constexpr (std::is_same_v<T, float>)
      detail::bf16_round_rows(rows, d.d_k, Q, job.p.ldq, s.q.data(), pk_);
    rows_ = rows;
  }
  // P (rows, n; ldp) = scale * Q_i K_i[s0:s0+n]^T
  void scores(std::size_t s0, std::size_t n, T* P, std::size_t ldp) {
    if constexpr (std::is_same_v<T, float>) {
      const auto& job = *job_;
      const auto& d = job.d;
      auto& s = scratch();
      const std::uint32_t* Kp = job.Kp ? job.packed_K(b_, head_) + s0 : s.kv.data();
      const std::size_t ld = job.Kp ? d.S : n;
      if (!job.Kp)
        detail::bf16_pack_b(true, d.d_k, n, job.K(b_, head_) + s0 * job.p.ldk, job.p.ldk,
                            s.kv.data(), n);
      detail::bf16_gemm_rounded(rows_, n, d.d_k, job.opt.scale, s.q.data(), pk_, Kp, ld, P, ldp,
                                false);
    }
  }
  // Row r of P (n values, the softmax's output) rounded for accumulate().
  void round_row(std::size_t r, const T* p, std::size_t n) {
    if constexpr (std::is_same_v<T, float>)
      detail::bf16_round_rows(1, n, p, n, scratch().p.data() + r * pn_, pn_);
  }
  // O (rows, d_v) += P V_i[s0:s0+n], P as round_row left it.
  void accumulate(std::size_t s0, std::size_t n, T* O) {
    if constexpr (std::is_same_v<T, float>) {
      const auto& job = *job_;
      const auto& d = job.d;
      auto& s = scratch();
      // The packed V's pairs of keys fit this block when it starts on an even
      // key and ends on one or at S (whose pair is padded with 0).
      const bool fits = job.Vp && s0 % 2 == 0 && (n % 2 == 0 || s0 + n == d.S);
      if (!fits)
        detail::bf16_pack_b(false, n, d.d_v, job.V(b_, head_) + s0 * job.p.ldv, job.p.ldv,
                            s.kv.data(), d.d_v);
      const std::uint32_t* Vp = fits ? job.packed_V(b_, head_) + s0 / 2 * d.d_v : s.kv.data();
      detail::bf16_gemm_rounded(rows_, d.d_v, n, 1.f, s.p.data(), pn_, Vp, d.d_v, O, d.d_v, true);
    }
  }

 private:
  struct Scratch {
    std::vector<std::uint32_t> q, p, kv;
  };
  static Scratch& scratch() {
    thread_local Scratch s;
    return s;
  }
  const Job<T>* job_ = nullptr;
  std::size_t b_ = 0, head_ = 0, rows_ = 0, pk_ = 0, pn_ = 0;
};

// Fused attention of rows [t0, t0 + rows) of one head over keys [s_begin,
// s_end), with online softmax (Milakov & Gimelshein 2018; Dao et al. 2022):
// per row the running max m, running sum l and unnormalized output O
// (rows, d_v), rescaled by exp(m_old - m_new) as each key block arrives.
// P (rows, block_k) and X (the rest of flash_scratch) are scratch.
template <class T>
void flash_block(const Job<T>& job, std::size_t b, std::size_t head, std::size_t t0,
                 std::size_t rows, std::size_t s_begin, std::size_t s_end, T* P, T* O, T* m, T* l,
                 T* X) {
  const auto& d = job.d;
  const std::size_t Bk = job.block_k;
  std::fill(m, m + rows, kNegInf<T>);
  std::fill(l, l + rows, T(0));
  std::fill(O, O + rows * d.d_v, T(0));
  const T* Q = job.Q(b, head, t0);
  const T* K = job.K(b, head);
  const T* V = job.V(b, head);
  const std::size_t end = std::min(s_end, job.key_end(b, t0, rows));
  // A window hides the keys before key_begin of the block's first row.
  const std::size_t begin = std::max(s_begin, job.mask.key_begin(d, t0));
  // Q_i K_i^T through the direct GEMM needs K_i's block transposed: worth it
  // once enough query rows share the copy (not for decoding's single row).
  const bool direct = std::is_same_v<T, float> && !job.opt.bf16_gemm && rows >= kDirectScoreRows &&
                      std::string_view(direct_gemm_isa()) != "blas";
  // bfloat16 GEMMs run natively (bf16_gemm.hpp): see NativeBlock.
  const bool native = std::is_same_v<T, float> && job.opt.bf16_gemm && detail::bf16_native();
  NativeBlock<T> bf16;
  if (native) bf16.start(job, b, head, Q, rows);
  T* KT = X + Bk;
  for (std::size_t s0 = begin; s0 < end; s0 += Bk) {
    const std::size_t n = std::min(Bk, end - s0);
    // P (rows, n) = scale * Q_i K_i[s0:s0+n]^T
    if (native) {
      bf16.scores(s0, n, P, Bk);
    } else if (direct) {
      // KT (d_k, n; ld Bk) = scale * K_i[s0:s0+n]^T, then P = Q_i KT.
      transpose_scaled(K + s0 * job.p.ldk, job.p.ldk, n, d.d_k, job.opt.scale, KT, Bk);
      block_product(rows, n, d.d_k, Q, job.p.ldq, KT, Bk, P, Bk, false, false);
    } else {
      gemm<T>(false, true, rows, n, d.d_k, job.opt.scale, Q, job.p.ldq, K + s0 * job.p.ldk,
              job.p.ldk, T(0), P, Bk, job.opt.bf16_gemm);
    }
    if (job.opt.softcap > 0) softcap_rows(P, rows, n, Bk, job.opt.softcap, X);
    if (!job.mask.empty()) job.mask.apply(d, b, head, t0, t0 + rows, s0, s0 + n, P, Bk);
    for (std::size_t r = 0; r < rows; ++r) {
      T* p = P + r * Bk;
      const T m_new = std::max(m[r], row_max(p, n));
      if (m_new == kNegInf<T>) {  // every key so far masked: contributes nothing
        if (has_nan(p, n)) l[r] = std::numeric_limits<T>::quiet_NaN();  // NaN in, NaN out
        std::fill(p, p + n, T(0));
      } else {
        const T alpha = m[r] == kNegInf<T> ? T(0) : std::exp(m[r] - m_new);
        l[r] = l[r] * alpha + exp_shifted_sum(p, n, m_new);
        if (alpha != T(1)) {
          T* o = O + r * d.d_v;
          for (std::size_t c = 0; c < d.d_v; ++c) o[c] *= alpha;
        }
        m[r] = m_new;
      }
      if (native) bf16.round_row(r, p, n);
    }
    // O (rows, d_v) += P V_i[s0:s0+n]
    if (native)
      bf16.accumulate(s0, n, O);
    else
      block_product(rows, d.d_v, n, P, Bk, V + s0 * job.p.ldv, job.p.ldv, O, d.d_v, true,
                    job.opt.bf16_gemm);
  }
}

// O / l into the context, or the masked-row policy where l = 0.
template <class T>
void finish_rows(const Job<T>& job, std::size_t b, std::size_t head, std::size_t t0,
                 std::size_t rows, const T* O, const T* l) {
  const auto& d = job.d;
  for (std::size_t r = 0; r < rows; ++r) {
    T* out = job.ctx(b, head, t0 + r);
    if (l[r] == T(0)) {
      if (all_masked(job, b, head, t0 + r)) {
        masked_row_output(job, b, head, out);
      } else {
        job.overflow->store(true, std::memory_order_relaxed);
        std::fill(out, out + d.d_v, std::numeric_limits<T>::quiet_NaN());
      }
      continue;
    }
    const T inv = T(1) / l[r];
    for (std::size_t c = 0; c < d.d_v; ++c) out[c] = O[r * d.d_v + c] * inv;
  }
}

// Exact attention of rows [t0, t0 + rows) of one head: A (rows, S; ld S) is
// the softmax itself, written in full; the head output goes to the context.
template <class T>
void exact_block(const Job<T>& job, std::size_t b, std::size_t head, std::size_t t0,
                 std::size_t rows, T* A) {
  const auto& d = job.d;
  const std::size_t S = d.S, end = job.key_end(b, t0, rows);
  // A (rows, end) = scale * Q_i K_i^T: through the direct GEMM on K_i
  // transposed once enough rows share the copy, as in flash_block.
  const bool direct = std::is_same_v<T, float> && !job.opt.bf16_gemm && rows >= kDirectExactRows &&
                      std::string_view(direct_gemm_isa()) != "blas";
  if (end > 0 && direct) {
    thread_local Array<T> KT;
    KT.resize(d.d_k * end);
    transpose_scaled(job.K(b, head), job.p.ldk, end, d.d_k, job.opt.scale, KT.data(), end);
    block_product(rows, end, d.d_k, job.Q(b, head, t0), job.p.ldq, KT.data(), end, A, S, false,
                  false);
  } else if (end > 0) {
    gemm<T>(false, true, rows, end, d.d_k, job.opt.scale, job.Q(b, head, t0), job.p.ldq,
            job.K(b, head), job.p.ldk, T(0), A, S, job.opt.bf16_gemm);
  }
  if (job.opt.softcap > 0 && end > 0) {
    std::vector<T> scratch(end);
    softcap_rows(A, rows, end, S, job.opt.softcap, scratch.data());
  }
  if (!job.mask.empty() && end > 0) job.mask.apply(d, b, head, t0, t0 + rows, 0, end, A, S);
  if (job.scores) {  // the keys past `end` are masked for every row here
    for (std::size_t r = 0; r < rows; ++r) std::fill(A + r * S + end, A + (r + 1) * S, kNegInf<T>);
    job.opt.hook->block(*job.scores, b, head, t0, rows, A, S);
  }
  std::size_t used = end;  // keys with nonzero weight in some row
  for (std::size_t r = 0; r < rows; ++r) {
    T* a = A + r * S;
    const T a_max = row_max(a, end);
    if (a_max == kNegInf<T>) {
      bool nan = has_nan(a, end);
      if (!nan && !all_masked(job, b, head, t0 + r)) {
        job.overflow->store(true, std::memory_order_relaxed);
        nan = true;
      }
      std::fill(a, a + S, nan ? std::numeric_limits<T>::quiet_NaN() : job.policy_fill());
      used = S;
      continue;
    }
    const T inv = T(1) / exp_shifted_sum(a, end, a_max);
    for (std::size_t s = 0; s < end; ++s) a[s] *= inv;
    std::fill(a + end, a + S, T(0));
  }
  if (job.pattern) {  // an edit may give weight to any key
    job.opt.hook->block(*job.pattern, b, head, t0, rows, A, S);
    used = S;
  }
  // context (rows, d_v) = A V_i, over the keys that carry weight
  if (used > 0)
    block_product(rows, d.d_v, used, A, S, job.V(b, head), job.p.ldv, job.ctx(b, head, t0),
                  d.h * d.d_v, false, job.opt.bf16_gemm);
  else
    for (std::size_t r = 0; r < rows; ++r) std::fill_n(job.ctx(b, head, t0 + r), d.d_v, T(0));
}

// Logits beyond T's range in some row, where no policy asked for NaN.
template <class T>
[[noreturn]] void fail_overflow() {
  fail_input(std::string("the attention logits overflow ") +
             (sizeof(T) == 4 ? "float32" : "float64") +
             " (|scale * q.k| beyond its range) for some query rows; " +
             (sizeof(T) == 4 ? "use dtype float64 or smaller inputs or weights"
                             : "use smaller inputs or weights") +
             " (allow_nonfinite writes NaN for those rows instead)");
}

// The fused path splits keys until it has this many tasks: enough for the
// pools this tool runs on, fixed so that results do not follow the threads.
constexpr std::size_t kMinTasks = 8;

// Self-attention whose sequences fit one query block, with no RoPE or
// QK-norm, and at least kGemmPieces batch elements (any attention output):
// it runs in kGemmPieces
// batch pieces, each task projecting its piece's rows into its thread's
// scratch, attending, and projecting the context into the output. The
// (B*T, width) projections and the (B*T, h*d_v) context are never held
// whole, so a one-shot run page-faults a few hundred KiB of scratch instead
// of several MiB (the tutorial shape: 3.2 MiB). Pieces depend on B alone,
// never on the threads.
template <class T>
bool can_run_in_pieces(const Dims& d, const T* X_q, const T* X_k, const T* X_v, const Weights<T>& w,
                       const LayerOptions<T>& opt, std::size_t block_q, bool sites) {
  return X_k == X_q && X_v == X_q && d.T == d.S && d.T <= block_q && d.B >= kGemmPieces &&
         !w.q_norm.size() && opt.rope.layout == RopeLayout::none && !sites;
}

template <class T>
void pieced_layer(const Dims& d, const T* X, const Weights<T>& w, const Mask<T>& mask,
                  const LayerOptions<T>& opt, std::size_t block_q, std::size_t block_k, int threads,
                  T* output) {
  const std::size_t hdk = d.h * d.d_k, kdk = d.kv() * d.d_k, kdv = d.kv() * d.d_v;
  const std::size_t width = hdk + kdk + kdv, hdv = d.h * d.d_v, T_ = d.T;
  const bool bias = w.has_bias();
  auto proj = [&](const Tensor<T, 2>& W, const PackedBf16& packed, const Tensor<T, 1>& b,
                  std::size_t col) {
    return detail::projection_of(W, packed, bias ? b.data() : nullptr, col, opt.bf16_gemm);
  };
  // Weights packed once for every piece when bfloat16 GEMMs run natively.
  Buffer<std::uint32_t> packed_qkv, packed_out;
  const std::vector<Projection<T>> qkv = detail::pack_weights<T>(
      {proj(w.W_q, w.packed_q, w.b_q, 0), proj(w.W_k, w.packed_k, w.b_k, hdk),
       proj(w.W_v, w.packed_v, w.b_v, hdk + kdk)},
      d.d_model, opt.bf16_gemm, threads, packed_qkv);
  const Projection<T> out = detail::pack_weights<T>({proj(w.W_o, w.packed_o, w.b_o, 0)}, hdv,
                                                    opt.bf16_gemm, threads, packed_out)[0];
  const bool fused = opt.attention == AttentionOutput::none;
  const bool mean = opt.attention == AttentionOutput::mean_over_heads;
  const T inv_h = T(1) / static_cast<T>(d.h);
  struct Scratch {
    Array<T> qkv, context, work, mean;
  };
  std::vector<Scratch> scratch(threads);
  std::atomic<bool> overflow{false};
  if (opt.progress) opt.progress->begin("compute", mean ? d.B : d.B * d.h);
  parallel_for(kGemmPieces, threads, [&](std::size_t piece, int thread) {
    const std::size_t b0 = d.B * piece / kGemmPieces, b1 = d.B * (piece + 1) / kGemmPieces;
    const std::size_t rows = (b1 - b0) * T_;
    Scratch& s = scratch[thread];
    s.qkv.resize(rows * width);
    s.context.resize(rows * hdv);
    // qkv (rows, width) = X[b0 T : b1 T] [W_q | W_k | W_v] + b, one GEMM per projection.
    for (const auto& pr : qkv)
      project_rows(X + b0 * T_ * d.d_model, d.d_model, rows, d.d_model, pr, s.qkv.data(), width,
                   opt.bf16_gemm);
    Projections<T> p;
    p.Q = s.qkv.data(), p.K = p.Q + hdk, p.V = p.K + kdk;
    p.ldq = p.ldk = p.ldv = width;
    Job<T> job{d, mask, opt, p, block_q, block_k, s.context.data(), &overflow};
    job.b0 = b0;
    for (std::size_t b = b0; b < b1; ++b) {
      // The mean over heads (B, T, S), accumulated head by head as the
      // whole-batch path does.
      T* mean_b = nullptr;
      if (mean) {
        if (opt.attention_buffer) {
          mean_b = opt.attention_buffer + b * T_ * d.S;
        } else {
          s.mean.resize(T_ * d.S);
          mean_b = s.mean.data();
        }
        std::fill(mean_b, mean_b + T_ * d.S, T(0));
      }
      for (std::size_t head = 0; head < d.h; ++head) {
        if (fused) {
          s.work.resize(flash_scratch(d, T_, block_k));
          T *P = s.work.data(), *O = P + T_ * block_k, *m = O + T_ * d.d_v, *l = m + T_;
          flash_block(job, b, head, 0, T_, 0, d.S, P, O, m, l, l + T_);
          finish_rows(job, b, head, 0, T_, O, l);
        } else if (mean) {
          s.work.resize(T_ * d.S);
          T* A = s.work.data();
          exact_block(job, b, head, 0, T_, A);
          for (std::size_t i = 0; i < T_ * d.S; ++i) mean_b[i] += A[i] * inv_h;
        } else {
          T* A;
          if (opt.attention_buffer) {
            A = opt.attention_buffer + (b * d.h + head) * T_ * d.S;
          } else {
            s.work.resize(T_ * d.S);
            A = s.work.data();
          }
          exact_block(job, b, head, 0, T_, A);
          if (!opt.attention_buffer && opt.sink) opt.sink(b, head, 0, T_, A);
        }
        if (opt.progress && !mean) opt.progress->add();
      }
      if (mean && !opt.attention_buffer && opt.sink) opt.sink(b, 0, 0, T_, mean_b);
      if (opt.progress && mean) opt.progress->add();
    }
    // output[b0 T : b1 T] (rows, d_out) = context W_o + b_o
    project_rows(s.context.data(), hdv, rows, hdv, out, output + b0 * T_ * d.d_out, d.d_out,
                 opt.bf16_gemm);
  });
  if (overflow && !opt.allow_nonfinite) fail_overflow<T>();
}

// The checks of a bfloat16-GEMM call, made before any task runs.
template <class T>
void check_bf16_gemm(const LayerOptions<T>& opt) {
  if (!opt.bf16_gemm) return;
  if (sizeof(T) != 4) fail_input("bfloat16 GEMMs are a float32 option (dtype bfloat16)");
  bf16_gemm_backend();  // reads MHA_BF16_GEMM, which may throw
}

struct Blocks {
  std::size_t q, k;
};

// Default blocks, measured with `mha bench --block_q --block_k` on Zen 4:
// the fused kernel is fastest with large square blocks (fewer BLAS packing
// passes per FLOP); the exact path keeps its (block_q, S) slabs small.
template <class T>
Blocks choose_blocks(const Dims& d, const LayerOptions<T>& opt) {
  const bool fused = opt.attention == AttentionOutput::none;
  const std::size_t block_q = opt.block_q ? opt.block_q : fused ? 512 : 128;
  // Key blocks never longer than the keys: the scratch blocks follow them.
  const std::size_t block_k =
      std::min<std::size_t>(opt.block_k ? opt.block_k : 512, std::max<std::size_t>(d.S, 1));
  return {block_q, block_k};
}

// Merges the fused path's key splits of every head block into the context:
// each split's O, m and l (part_O (Bq, d_v), part_m and part_l (Bq) per task
// hb * splits + split) rescaled to the common max, then summed.
template <class T>
void merge_key_splits(const Job<T>& job, std::size_t head_blocks, std::size_t splits,
                      const std::vector<T>& part_O, const std::vector<T>& part_m,
                      const std::vector<T>& part_l) {
  const auto& d = job.d;
  const std::size_t Bq = job.Bq(), q_blocks = job.q_blocks();
  std::vector<T> O(Bq * d.d_v), l(Bq);
  for (std::size_t hb = 0; hb < head_blocks; ++hb) {
    const std::size_t qb = hb % q_blocks, head = (hb / q_blocks) % d.h, b = hb / (q_blocks * d.h),
                      rows = job.rows_of(qb);
    std::fill(O.begin(), O.end(), T(0));
    std::fill(l.begin(), l.end(), T(0));
    for (std::size_t r = 0; r < rows; ++r) {
      T m = kNegInf<T>;
      for (std::size_t sp = 0; sp < splits; ++sp)
        m = std::max(m, part_m[(hb * splits + sp) * Bq + r]);
      if (m == kNegInf<T>) continue;  // l stays 0: masked-row policy
      for (std::size_t sp = 0; sp < splits; ++sp) {
        const std::size_t i = (hb * splits + sp) * Bq + r;
        if (part_m[i] == kNegInf<T>) continue;
        const T f = std::exp(part_m[i] - m);
        l[r] += part_l[i] * f;
        for (std::size_t c = 0; c < d.d_v; ++c) O[r * d.d_v + c] += part_O[i * d.d_v + c] * f;
      }
    }
    finish_rows(job, b, head, qb * Bq, rows, O.data(), l.data());
  }
}

// With native bfloat16 GEMMs, K and V of every (b, key/value head) packed
// once (Job's Kp and Vp) into `storage`, over the pool, for every query block
// and key split to read; nothing otherwise.
template <class T>
void pack_keys_values(Job<T>& job, int threads, Buffer<std::uint32_t>& storage) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& d = job.d;
    if (!job.opt.bf16_gemm || !detail::bf16_native() || d.S == 0) return;
    const std::size_t heads = d.B * d.kv();
    const std::size_t k_words = detail::bf16_pairs(d.d_k) * d.S;
    const std::size_t v_words = detail::bf16_pairs(d.S) * d.d_v;
    storage = Buffer<std::uint32_t>(heads * (k_words + v_words));
    std::uint32_t* Kp = storage.get();
    std::uint32_t* Vp = Kp + heads * k_words;
    // Tasks of kKeys keys (an even number) of one head, K and V.
    constexpr std::size_t kKeys = 256;
    const std::size_t chunks = (d.S + kKeys - 1) / kKeys;
    parallel_for(heads * chunks, threads, [&](std::size_t task, int) {
      const std::size_t hd = task / chunks, s0 = task % chunks * kKeys;
      const std::size_t n = std::min(kKeys, d.S - s0);
      const std::size_t b = job.b0 + hd / d.kv(), head = hd % d.kv() * d.group();
      detail::bf16_pack_b(true, d.d_k, n, job.K(b, head) + s0 * job.p.ldk, job.p.ldk,
                          Kp + hd * k_words + s0, d.S);
      detail::bf16_pack_b(false, n, d.d_v, job.V(b, head) + s0 * job.p.ldv, job.p.ldv,
                          Vp + hd * v_words + s0 / 2 * d.d_v, d.d_v);
    });
    job.Kp = Kp;
    job.Vp = Vp;
  }
}

// Attention not requested: the fused kernel over tasks (b, head, query
// block, key split) into the context. Keys are split only when there are
// fewer than kMinTasks head blocks (decode-shaped work). The split depends
// on the shape alone, never on the threads, so the sums (and so the bits of
// the output) are the same for any thread count.
template <class T>
void fused_attention(Job<T>& job, int threads) {
  const auto& d = job.d;
  Buffer<std::uint32_t> packed;
  pack_keys_values(job, threads, packed);
  const auto& opt = job.opt;
  const std::size_t Bq = job.Bq(), q_blocks = job.q_blocks();
  const std::size_t head_blocks = d.B * d.h * q_blocks;
  std::size_t splits = 1;
  if (head_blocks < kMinTasks && d.S >= 2 * job.block_k)
    splits = std::min<std::size_t>((kMinTasks + head_blocks - 1) / head_blocks, d.S / job.block_k);
  const std::size_t span = (d.S + splits - 1) / splits;
  std::vector<Array<T>> scratch(threads);
  // Per split: unnormalized O (Bq, d_v), m and l (Bq), merged afterwards.
  std::vector<T> part_O(splits > 1 ? head_blocks * splits * Bq * d.d_v : 0);
  std::vector<T> part_m(splits > 1 ? head_blocks * splits * Bq : 0), part_l(part_m.size());
  if (opt.progress) opt.progress->begin("compute", head_blocks * splits);
  parallel_for(head_blocks * splits, threads, [&](std::size_t task, int thread) {
    const std::size_t split = task % splits, hb = task / splits;
    const std::size_t qb = hb % q_blocks, head = (hb / q_blocks) % d.h, b = hb / (q_blocks * d.h);
    const std::size_t t0 = qb * Bq, rows = job.rows_of(qb);
    auto& s = scratch[thread];
    s.resize(flash_scratch(d, Bq, job.block_k));
    T *P = s.data(), *O = P + Bq * job.block_k, *m = O + Bq * d.d_v, *l = m + Bq;
    T* X = l + Bq;  // the rest of flash_scratch
    if (splits > 1) {
      O = part_O.data() + task * Bq * d.d_v;
      m = part_m.data() + task * Bq;
      l = part_l.data() + task * Bq;
    }
    flash_block(job, b, head, t0, rows, split * span, std::min(d.S, (split + 1) * span), P, O, m, l,
                X);
    if (splits == 1) finish_rows(job, b, head, t0, rows, O, l);
    if (opt.progress) opt.progress->add();
  });
  if (splits > 1) merge_key_splits(job, head_blocks, splits, part_O, part_m, part_l);
}

// Attention per head: the exact path over tasks (b, head, query block), each
// slab of A_i into the caller's buffer or through the sink.
template <class T>
void per_head_attention(const Job<T>& job, int threads) {
  const auto& d = job.d;
  const auto& opt = job.opt;
  const std::size_t Bq = job.Bq(), q_blocks = job.q_blocks();
  std::vector<Array<T>> scratch(threads);
  if (opt.progress) opt.progress->begin("compute", d.B * d.h * q_blocks);
  parallel_for(d.B * d.h * q_blocks, threads, [&](std::size_t task, int thread) {
    const std::size_t qb = task % q_blocks, head = (task / q_blocks) % d.h,
                      b = task / (q_blocks * d.h);
    const std::size_t t0 = qb * Bq, rows = job.rows_of(qb);
    T* A;
    if (opt.attention_buffer) {
      A = opt.attention_buffer + ((b * d.h + head) * d.T + t0) * d.S;
    } else {
      scratch[thread].resize(Bq * d.S);
      A = scratch[thread].data();
    }
    exact_block(job, b, head, t0, rows, A);
    if (!opt.attention_buffer && opt.sink) opt.sink(b, head, t0, rows, A);
    if (opt.progress) opt.progress->add();
  });
}

// The mean of attention over heads: one task per (b, query block)
// accumulates all heads, in head order.
template <class T>
void mean_attention(const Job<T>& job, int threads) {
  const auto& d = job.d;
  const auto& opt = job.opt;
  const std::size_t Bq = job.Bq(), q_blocks = job.q_blocks();
  std::vector<Array<T>> scratch(threads);
  const T inv_h = T(1) / static_cast<T>(d.h);
  if (opt.progress) opt.progress->begin("compute", d.B * q_blocks);
  parallel_for(d.B * q_blocks, threads, [&](std::size_t task, int thread) {
    const std::size_t qb = task % q_blocks, b = task / q_blocks;
    const std::size_t t0 = qb * Bq, rows = job.rows_of(qb);
    auto& s = scratch[thread];
    s.resize((opt.attention_buffer ? 1 : 2) * Bq * d.S);
    T* A = s.data();
    T* mean =
        opt.attention_buffer ? opt.attention_buffer + (b * d.T + t0) * d.S : s.data() + Bq * d.S;
    std::fill(mean, mean + rows * d.S, T(0));
    for (std::size_t head = 0; head < d.h; ++head) {
      exact_block(job, b, head, t0, rows, A);
      for (std::size_t i = 0; i < rows * d.S; ++i) mean[i] += A[i] * inv_h;
    }
    if (!opt.attention_buffer && opt.sink) opt.sink(b, 0, t0, rows, mean);
    if (opt.progress) opt.progress->add();
  });
}

}  // namespace

// project -> QK-norm -> RoPE -> attention into the context -> output
// projection; or all of it per batch piece (pieced_layer) when the shape allows.
template <class T>
void attention_layer(const Dims& d, const T* X_q, const T* X_k, const T* X_v, const Weights<T>& w,
                     const Mask<T>& mask, const LayerOptions<T>& opt, T* output) {
  blas_load();
  check_bf16_gemm(opt);
  const int threads = resolve_threads(opt.threads);
  const Blocks blocks = choose_blocks(d, opt);
  // The sites the hook wants in this layer (none without a hook).
  auto wanted = [&](SiteKind self, SiteKind cross) -> std::optional<Site> {
    if (!opt.hook) return std::nullopt;
    Site site = opt.site;
    site.kind = opt.cross ? cross : self;
    if (!opt.hook->wants(site)) return std::nullopt;
    return site;
  };
  const std::optional<Site> q_site = wanted(SiteKind::q, SiteKind::cross_q),
                            k_site = wanted(SiteKind::k, SiteKind::cross_k),
                            v_site = wanted(SiteKind::v, SiteKind::cross_v),
                            z_site = wanted(SiteKind::z, SiteKind::cross_z),
                            scores = wanted(SiteKind::scores, SiteKind::cross_scores),
                            pattern = wanted(SiteKind::pattern, SiteKind::cross_pattern);
  const bool sites = q_site || k_site || v_site || z_site || scores || pattern;
  if (can_run_in_pieces(d, X_q, X_k, X_v, w, opt, blocks.q, sites))
    return pieced_layer(d, X_q, w, mask, opt, blocks.q, blocks.k, threads, output);
  Projections<T> p = project_inputs(d, X_q, X_k, X_v, w, threads, opt.bf16_gemm);
  if (w.q_norm.size()) normalize_qk(d, p, w, opt.qk_norm_eps, threads);
  if (opt.rope.layout != RopeLayout::none) apply_rope(d, p, opt.rope, threads);
  // q (B*T, h*d_k), k (B*S, kv*d_k), v (B*S, kv*d_v), each with its row stride, in
  // the buffers p owns (const only for the kernels that read them)
  if (q_site) opt.hook->tensor(*q_site, const_cast<T*>(p.Q), d.B * d.T, d.h * d.d_k, p.ldq);
  if (k_site) opt.hook->tensor(*k_site, const_cast<T*>(p.K), d.B * d.S, d.kv() * d.d_k, p.ldk);
  if (v_site) opt.hook->tensor(*v_site, const_cast<T*>(p.V), d.B * d.S, d.kv() * d.d_v, p.ldv);
  Buffer<T> context(d.B * d.T * d.h * d.d_v);
  std::atomic<bool> overflow{false};
  Job<T> job{d, mask, opt, p, blocks.q, blocks.k, context.get(), &overflow};
  job.scores = scores ? &*scores : nullptr;
  job.pattern = pattern ? &*pattern : nullptr;
  if (opt.attention == AttentionOutput::mean_over_heads && !scores && !pattern)
    mean_attention(job, threads);
  else if (opt.attention != AttentionOutput::none || scores || pattern)
    per_head_attention(job, threads);
  else
    fused_attention(job, threads);
  if (overflow && !opt.allow_nonfinite) fail_overflow<T>();
  // z (B*T, h*d_v)
  if (z_site) opt.hook->tensor(*z_site, context.get(), d.B * d.T, d.h * d.d_v, d.h * d.d_v);
  // output (B*T, d_out) = context W_o + b_o
  const std::size_t hdv = d.h * d.d_v;
  const Projection<T> out = detail::projection_of(
      w.W_o, w.packed_o, w.has_bias() ? w.b_o.data() : nullptr, 0, opt.bf16_gemm);
  project(context.get(), hdv, d.B * d.T, hdv, {out}, output, d.d_out, threads, opt.bf16_gemm);
}

template <class T>
void multi_head_attention(const Dims& d, const T* X_q, const T* X_k, const T* X_v,
                          const Weights<T>& w, const Mask<T>& mask, T scale, MaskedRows policy,
                          T* output, T* attention, T* attention_mean) {
  LayerOptions<T> opt;
  opt.scale = scale;
  opt.masked_rows = policy;
  if (attention) {
    opt.attention = AttentionOutput::per_head;
    opt.attention_buffer = attention;
  } else if (attention_mean) {
    opt.attention = AttentionOutput::mean_over_heads;
    opt.attention_buffer = attention_mean;
  }
  attention_layer(d, X_q, X_k, X_v, w, mask, opt, output);
  if (attention && attention_mean) {
    // Both asked for: the mean from the per-head weights just written.
    const std::size_t TS = d.T * d.S;
    const T inv_h = T(1) / static_cast<T>(d.h);
    std::fill(attention_mean, attention_mean + d.B * TS, T(0));
    for (std::size_t b = 0; b < d.B; ++b)
      for (std::size_t head = 0; head < d.h; ++head)
        for (std::size_t i = 0; i < TS; ++i)
          attention_mean[b * TS + i] += attention[(b * d.h + head) * TS + i] * inv_h;
  }
}

template <class T>
void softmax_rows(T* x, std::size_t rows, std::size_t cols, std::size_t ld, MaskedRows policy) {
  for (std::size_t r = 0; r < rows; ++r) {
    T* row = x + r * ld;
    const T max = row_max(row, cols);
    if (max == kNegInf<T>) {
      // Every key masked: softmax is 0/0 here, so the policy decides.
      T fill = policy == MaskedRows::zero      ? T(0)
               : policy == MaskedRows::uniform ? T(1) / static_cast<T>(cols)
                                               : std::numeric_limits<T>::quiet_NaN();
      std::fill(row, row + cols, fill);
      continue;
    }
    const T inv = T(1) / exp_shifted_sum(row, cols, max);
    for (std::size_t c = 0; c < cols; ++c) row[c] *= inv;
  }
}

#define MHA_INSTANTIATE(T)                                                                        \
  template void attention_layer<T>(const Dims&, const T*, const T*, const T*, const Weights<T>&,  \
                                   const Mask<T>&, const LayerOptions<T>&, T*);                   \
  template void multi_head_attention<T>(const Dims&, const T*, const T*, const T*,                \
                                        const Weights<T>&, const Mask<T>&, T, MaskedRows, T*, T*, \
                                        T*);                                                      \
  template void softmax_rows<T>(T*, std::size_t, std::size_t, std::size_t, MaskedRows);
MHA_INSTANTIATE(float)
MHA_INSTANTIATE(double)
#undef MHA_INSTANTIATE

}  // namespace mha
