// The native bfloat16 GEMM (bf16_gemm.hpp): register tiles of kRows rows of C
// by kRegs registers of 16 columns, as the direct GEMM's (direct_gemm.cpp),
// with one VDPBF16PS (32 multiply-adds) where the float32 tile has one FMA
// (16): for each pair of k, the tile loads kRegs registers of packed B and
// broadcasts one pair of A's row per row.
#include "bf16_gemm.hpp"

#include <cpuid.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "intrinsics.hpp"
#include "vexp_impl.hpp"

namespace mha::detail {

bool cpu_has_avx512_bf16() {
  static const bool has = [] {
    if (!cpu_has_avx512()) return false;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bw")) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    // Leaf 7's subleaf 1 exists when subleaf 0 reports it (EAX >= 1).
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || a < 1) return false;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    return ((a >> 5) & 1u) != 0;
  }();
  return has;
}

bool cpu_has_amx_bf16() {
  static const bool has = [] {
    if (!cpu_has_avx512_bf16()) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    // EDX bit 22: AMX-BF16, bit 24: AMX-TILE.
    if (!((d >> 22) & 1u) || !((d >> 24) & 1u)) return false;
    // Linux gives a process the tiles' state only when it asks
    // (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, 18).
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return ::syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return has;
}

namespace {
// -1: as the CPU and MHA_BF16_GEMM choose; 0 or 1: set by a test.
std::atomic<int> g_amx_for_tests{-1};
}  // namespace

bool bf16_amx() {
  const int forced = g_amx_for_tests.load(std::memory_order_relaxed);
  if (forced >= 0) return forced == 1 && cpu_has_amx_bf16();
  return bf16_amx_chosen();
}

void set_bf16_amx_for_tests(int on) {
  g_amx_for_tests.store(on, std::memory_order_relaxed);
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512bf16")
namespace {

constexpr std::size_t L = 16;  // float32 lanes, or bfloat16 pairs, per register

__mmask16 first(std::size_t count) {
  return static_cast<__mmask16>(count >= L ? 0xffffu : (1u << count) - 1u);
}

// out[0 : bf16_pairs(n)] = x[0 : n] rounded to bfloat16, in pairs (0 past n).
void round_row(const float* x, std::size_t n, std::uint32_t* out) {
  std::size_t c = 0;
  for (; c + 2 * L <= n; c += 2 * L) {
    const __m512 lo = _mm512_loadu_ps(x + c), hi = _mm512_loadu_ps(x + c + L);
    _mm512_storeu_si512(out + c / 2, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
  if (c == n) return;
  // The last < 32 values: two masked halves, zeros past n.
  const std::size_t rest = n - c;
  const __m512 lo = _mm512_maskz_loadu_ps(first(rest), x + c);
  const __m512 hi = _mm512_maskz_loadu_ps(first(rest > L ? rest - L : 0), x + c + L);
  const std::size_t words = (rest + 1) / 2;
  _mm512_mask_storeu_epi32(out + c / 2, first(words),
                           reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
}

// r (16 x 16 words, a row a register) transposed in place: for each bit s of
// an index, the words (i, j) with i's bit s clear and j's set trade places
// with (i + s, j - s); the four exchanges together move (i, j) to (j, i).
void transpose16(__m512i r[16]) {
  for (int s = 8; s >= 1; s /= 2) {
    alignas(64) int keep[16],
        take[16];  // the new rows i and i + s, from rows i (0-15), i + s (16-31)
    for (int j = 0; j < 16; ++j) {
      keep[j] = j & s ? 16 + j - s : j;
      take[j] = j & s ? 16 + j : j + s;
    }
    const __m512i vk = _mm512_load_si512(keep), vt = _mm512_load_si512(take);
    for (int i = 0; i < 16; ++i)
      if (!(i & s)) {
        const __m512i a = r[i], b = r[i + s];
        r[i] = _mm512_permutex2var_epi32(a, vk, b);
        r[i + s] = _mm512_permutex2var_epi32(a, vt, b);
      }
  }
}

// C[0:R, 0:J*L] (the last register limited by `last` when Tail) = C0 +
// alpha * A[0:R] (pairs; lda words) Bp[0:P, 0:J*L], where C0 (ld ldc0; 0
// repeats one row, a bias) is C itself to accumulate, or null for 0.
template <int R, int J, bool Tail>
void tile(std::size_t P, const std::uint32_t* A, std::size_t lda, const std::uint32_t* B,
          std::size_t ldb, float alpha, float* C, std::size_t ldc, const float* C0,
          std::size_t ldc0, __mmask16 last) {
  __m512 acc[R][J];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) acc[i][j] = _mm512_setzero_ps();
  for (std::size_t p = 0; p < P; ++p) {
    const std::uint32_t* b = B + p * ldb;
    __m512bh v[J];
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j)
      v[j] = reinterpret_cast<__m512bh>((Tail && j == J - 1)
                                            ? _mm512_maskz_loadu_epi32(last, b + j * L)
                                            : _mm512_loadu_si512(b + j * L));
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512bh a =
          reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(A[i * lda + p])));
#pragma GCC unroll 4
      for (int j = 0; j < J; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], a, v[j]);
    }
  }
  const __m512 s = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) {
      float* c = C + i * ldc + j * L;
      const float* c0 = C0 + i * ldc0 + j * L;
      const bool part = Tail && j == J - 1;
      const __m512 old = !C0    ? _mm512_setzero_ps()
                         : part ? _mm512_maskz_loadu_ps(last, c0)
                                : _mm512_loadu_ps(c0);
      const __m512 r = _mm512_fmadd_ps(s, acc[i][j], old);
      if (part)
        _mm512_mask_storeu_ps(c, last, r);
      else
        _mm512_storeu_ps(c, r);
    }
}

// 30 of the 32 zmm registers: 6 x 4 accumulators, 4 of B, 1 broadcast.
constexpr int kRows = 6, kRegs = 4;

// The last columns of R rows: `regs` registers (1 <= regs <= J), the last one
// partial when `tail`.
template <int R, int J>
void last_columns(std::size_t regs, bool tail, std::size_t P, const std::uint32_t* A,
                  std::size_t lda, const std::uint32_t* B, std::size_t ldb, float alpha, float* C,
                  std::size_t ldc, const float* C0, std::size_t ldc0, __mmask16 last) {
  if constexpr (J >= 1) {
    if (regs == J) {
      if (tail)
        tile<R, J, true>(P, A, lda, B, ldb, alpha, C, ldc, C0, ldc0, last);
      else
        tile<R, J, false>(P, A, lda, B, ldb, alpha, C, ldc, C0, ldc0, last);
      return;
    }
    last_columns<R, J - 1>(regs, tail, P, A, lda, B, ldb, alpha, C, ldc, C0, ldc0, last);
  }
}

// R rows of C, N <= kRegs * L columns.
template <int R>
void strip(std::size_t N, std::size_t P, const std::uint32_t* A, std::size_t lda,
           const std::uint32_t* B, std::size_t ldb, float alpha, float* C, std::size_t ldc,
           const float* C0, std::size_t ldc0) {
  if (N == kRegs * L)
    return tile<R, kRegs, false>(P, A, lda, B, ldb, alpha, C, ldc, C0, ldc0, first(L));
  const std::size_t regs = (N + L - 1) / L, in_last = N - (regs - 1) * L;
  last_columns<R, kRegs>(regs, in_last < L, P, A, lda, B, ldb, alpha, C, ldc, C0, ldc0,
                         first(in_last));
}

// The last `rows` (< kRows) rows of a strip.
template <int R>
void last_rows(std::size_t rows, std::size_t N, std::size_t P, const std::uint32_t* A,
               std::size_t lda, const std::uint32_t* B, std::size_t ldb, float alpha, float* C,
               std::size_t ldc, const float* C0, std::size_t ldc0) {
  if constexpr (R >= 1) {
    if (rows == R) return strip<R>(N, P, A, lda, B, ldb, alpha, C, ldc, C0, ldc0);
    last_rows<R - 1>(rows, N, P, A, lda, B, ldb, alpha, C, ldc, C0, ldc0);
  }
}

}  // namespace

void bf16_pack_b(bool trans, std::size_t K, std::size_t N, const float* B, std::size_t ldb,
                 std::uint32_t* out, std::size_t ldp) {
  const std::size_t P = bf16_pairs(K);
  if (trans) {
    // Row j of B is column j of op(B): its pairs are already adjacent. Sixteen
    // rows are rounded at a time (16 x P words), then transposed 16 x 16
    // words at a time into 16 pair-rows of 16 adjacent words.
    thread_local std::vector<std::uint32_t> rows;
    rows.resize(L * P);
    for (std::size_t j0 = 0; j0 < N; j0 += L) {
      const std::size_t cols = std::min(L, N - j0);
      for (std::size_t jj = 0; jj < cols; ++jj)
        round_row(B + (j0 + jj) * ldb, K, rows.data() + jj * P);
      const __mmask16 m = first(cols);
      for (std::size_t p0 = 0; p0 < P; p0 += L) {
        const std::size_t pairs = std::min(L, P - p0);
        __m512i r[L];
        for (std::size_t jj = 0; jj < L; ++jj)
          r[jj] = jj < cols ? _mm512_maskz_loadu_epi32(first(pairs), rows.data() + jj * P + p0)
                            : _mm512_setzero_si512();
        transpose16(r);
        for (std::size_t p = 0; p < pairs; ++p)
          _mm512_mask_storeu_epi32(out + (p0 + p) * ldp + j0, m, r[p]);
      }
    }
    return;
  }
  // Rows 2p and 2p + 1, 16 columns at a time: both rounded by one
  // VCVTNE2PS2BF16 (row 2p in the low 16 words), then interleaved into pairs
  // by one word permutation.
  const __m512i interleave =
      _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                       21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (std::size_t p = 0; p < P; ++p) {
    const float* lo = B + 2 * p * ldb;
    const float* hi = 2 * p + 1 < K ? lo + ldb : nullptr;
    std::uint32_t* o = out + p * ldp;
    for (std::size_t j = 0; j < N; j += L) {
      const __mmask16 m = first(N - j);
      const __m512 l = _mm512_maskz_loadu_ps(m, lo + j);
      const __m512 h = hi ? _mm512_maskz_loadu_ps(m, hi + j) : _mm512_setzero_ps();
      const __m512i words = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(h, l));
      _mm512_mask_storeu_epi32(o + j, m, _mm512_permutexvar_epi16(interleave, words));
    }
  }
}

// The bfloat16 words w (16-bit lanes) as rounding their float32 values would
// give them: subnormals to a zero of their sign, NaNs quiet.
static __m512i as_rounded(__m512i w) {
  const __m512i exponent = _mm512_set1_epi16(0x7f80), magnitude = _mm512_set1_epi16(0x7fff);
  const __mmask32 tiny =
      _mm512_cmpeq_epi16_mask(_mm512_and_si512(w, exponent), _mm512_setzero_si512());
  w = _mm512_mask_mov_epi16(w, tiny, _mm512_and_si512(w, _mm512_set1_epi16(-0x8000)));
  const __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(w, magnitude), exponent);
  return _mm512_mask_mov_epi16(w, nan, _mm512_or_si512(w, _mm512_set1_epi16(0x0040)));
}

void bf16_pack_b_bits(bool trans, std::size_t K, std::size_t N, const std::uint16_t* B,
                      std::size_t ldb, std::uint32_t* out, std::size_t ldp) {
  const std::size_t P = bf16_pairs(K);
  if (trans) {
    // Row j of B is column j of op(B), its pairs adjacent: 16 rows of 16 pairs
    // (32 values, the last pair's high half 0 past K) transposed at a time.
    for (std::size_t j0 = 0; j0 < N; j0 += L) {
      const std::size_t cols = std::min(L, N - j0);
      const __mmask16 m = first(cols);
      for (std::size_t p0 = 0; p0 < P; p0 += L) {
        const std::size_t pairs = std::min(L, P - p0), values = std::min(2 * L, K - 2 * p0);
        const __mmask32 in = values >= 32 ? ~__mmask32{0} : (__mmask32{1} << values) - 1;
        __m512i r[L];
        for (std::size_t jj = 0; jj < L; ++jj)
          r[jj] = jj < cols ? _mm512_maskz_loadu_epi16(in, B + (j0 + jj) * ldb + 2 * p0)
                            : _mm512_setzero_si512();
        transpose16(r);
        for (std::size_t p = 0; p < pairs; ++p)
          _mm512_mask_storeu_epi32(out + (p0 + p) * ldp + j0, m, as_rounded(r[p]));
      }
    }
    return;
  }
  // Rows 2p and 2p + 1, 16 columns at a time: each value widened to 32 bits,
  // row 2p + 1's shifted into the high half.
  for (std::size_t p = 0; p < P; ++p) {
    const std::uint16_t* lo = B + 2 * p * ldb;
    const std::uint16_t* hi = 2 * p + 1 < K ? lo + ldb : nullptr;
    std::uint32_t* o = out + p * ldp;
    for (std::size_t j = 0; j < N; j += L) {
      const __mmask16 m = first(N - j);
      const __m512i l =
          _mm512_cvtepu16_epi32(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(m, lo + j)));
      const __m512i h =
          hi ? _mm512_cvtepu16_epi32(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(m, hi + j)))
             : _mm512_setzero_si512();
      _mm512_mask_storeu_epi32(o + j, m, as_rounded(_mm512_or_si512(l, _mm512_slli_epi32(h, 16))));
    }
  }
}

void bf16_round_rows(std::size_t rows, std::size_t K, const float* A, std::size_t lda,
                     std::uint32_t* out, std::size_t ldo) {
  for (std::size_t r = 0; r < rows; ++r) round_row(A + r * lda, K, out + r * ldo);
}

// Rows in blocks of kRowBlock and, within a block, columns in strips of one
// tile's width, each strip in slices of kPairDepth pairs of k: a slice of Bp
// (128 KiB) stays in L2 while the block's row tiles pass over it, and the
// block's rows of Ap stay there while the strips go by. A later slice adds
// alpha times its sums to what the previous one stored. Slices of 512 pairs
// (only the FFN's second GEMM, k = 3072, has more) ran BERT-base's layer in
// 16.0-16.4 ms against 16.9-17.1 for 128 and 16.7-17.1 for none, bert-s512
// alike (`mha bench --dtype bfloat16`, 2 threads, three alternating runs).
// When several row tiles read a slice, it is first copied into contiguous
// rows, as the float32 direct GEMM does (direct_gemm_simd.inc): Bp's rows lie
// ldbp apart, and a stride of a multiple of 1 KiB maps them to a few of L1's
// sets. The same sums: the same bits.
constexpr std::size_t kRowBlock = 32 * kRows, kPairDepth = 512;

// p + offset, or null for null.
const float* at(const float* p, std::size_t offset) {
  return p ? p + offset : nullptr;
}

// The VDPBF16PS tiles; bf16_gemm_rounded (after the AMX section) picks it or AMX's.
void avx512_gemm_rounded(std::size_t rows, std::size_t N, std::size_t K, float alpha,
                         const std::uint32_t* Ap, std::size_t ldap, const std::uint32_t* Bp,
                         std::size_t ldbp, float* C, std::size_t ldc, bool accumulate,
                         const float* bias) {
  constexpr std::size_t W = kRegs * L;
  const std::size_t P = bf16_pairs(K);
  thread_local std::vector<std::uint32_t> panel;  // a slice of Bp, (pd, W) contiguous
  for (std::size_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    const std::size_t r1 = std::min(rows, r0 + kRowBlock);
    const bool pack = r1 - r0 > kRows && ldbp != W;
    if (pack) panel.resize(kPairDepth * W);
    for (std::size_t c0 = 0; c0 < N; c0 += W) {
      const std::size_t n = std::min(W, N - c0);
      for (std::size_t p0 = 0; p0 < P || p0 == 0; p0 += kPairDepth) {
        const std::size_t pd = std::min(kPairDepth, P - p0);
        // The first slice adds to the bias, C or 0; later ones to C.
        const bool from_c = p0 > 0 || (accumulate && !bias);
        const float* init = from_c ? C + r0 * ldc + c0 : bias ? bias + c0 : nullptr;
        const std::size_t ld0 = from_c ? ldc : 0;
        const std::uint32_t* a = Ap + p0;
        const std::uint32_t* b = Bp + p0 * ldbp + c0;
        std::size_t ldb = ldbp;
        if (pack) {  // only the slice's n columns: a partial strip's tiles mask the rest
          for (std::size_t p = 0; p < pd; ++p) std::copy_n(b + p * ldbp, n, panel.data() + p * W);
          b = panel.data();
          ldb = W;
        }
        std::size_t r = r0;
        for (; r + kRows <= r1; r += kRows)
          strip<kRows>(n, pd, a + r * ldap, ldap, b, ldb, alpha, C + r * ldc + c0, ldc,
                       at(init, (r - r0) * ld0), ld0);
        if (r < r1)
          last_rows<kRows - 1>(r1 - r, n, pd, a + r * ldap, ldap, b, ldb, alpha, C + r * ldc + c0,
                               ldc, at(init, (r - r0) * ld0), ld0);
      }
    }
  }
}

void bf16_gemm(std::size_t rows, std::size_t N, std::size_t K, float alpha, bool trans_a,
               const float* A, std::size_t lda, const std::uint32_t* Bp, std::size_t ldbp, float* C,
               std::size_t ldc, bool accumulate, const float* bias) {
  if (rows == 0 || N == 0) return;
  const std::size_t P = bf16_pairs(K);
  thread_local std::vector<std::uint32_t> a;
  thread_local std::vector<float> column;
  a.resize(std::min(rows, kRowBlock) * std::max<std::size_t>(P, 1));
  for (std::size_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    const std::size_t r1 = std::min(rows, r0 + kRowBlock);
    if (trans_a) {  // row r of op(A) is column r of A
      column.resize(K);
      for (std::size_t r = r0; r < r1; ++r) {
        for (std::size_t k = 0; k < K; ++k) column[k] = A[k * lda + r];
        round_row(column.data(), K, a.data() + (r - r0) * P);
      }
    } else {
      bf16_round_rows(r1 - r0, K, A + r0 * lda, lda, a.data(), P);
    }
    bf16_gemm_rounded(r1 - r0, N, K, alpha, a.data(), P, Bp, ldbp, C + r0 * ldc, ldc, accumulate,
                      bias);
  }
}

}  // namespace mha::detail
#pragma GCC pop_options

// AMX (Sapphire Rapids and later): TDPBF16PS multiplies a 16 x 32 bfloat16
// tile of A by a 32 x 16 tile of B (pairs of k per row, the layout
// bf16_pack_b writes) into a 16 x 16 float32 tile: 16 x 16 x 32 multiply-adds
// per instruction, where VDPBF16PS does 16 x 2. C is computed in blocks of
// 32 x 32 (four accumulator tiles, two of A, two of B), k in steps of 16
// pairs, slices of kPairDepth pairs as the AVX-512 path. Edges (rows, columns
// and pairs past the operands) are zero-padded copies, so every element of C
// takes the same steps wherever it lies: the bits do not depend on how a
// caller cuts rows or columns.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16")
namespace mha::detail {
namespace {

constexpr std::size_t kTile = 16;  // rows of a tile; pairs (A) or columns (B) in its 64 bytes

struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

// _tile_loadd names its tile in the instruction's text: one function per tile.
template <int Tile>
void tile_load(const void* p, std::size_t stride);
template <>
void tile_load<4>(const void* p, std::size_t stride) {
  _tile_loadd(4, p, stride);
}
template <>
void tile_load<5>(const void* p, std::size_t stride) {
  _tile_loadd(5, p, stride);
}
template <>
void tile_load<6>(const void* p, std::size_t stride) {
  _tile_loadd(6, p, stride);
}
template <>
void tile_load<7>(const void* p, std::size_t stride) {
  _tile_loadd(7, p, stride);
}

// Tile `Tile` <- the 16 x 16 words at src (ld words apart): in place when all
// of them lie inside the operand, else the first rows x cols of them copied
// into `pad` with zeros around them.
template <int Tile>
void load_tile(const std::uint32_t* src, std::size_t ld, std::size_t rows, std::size_t cols,
               std::uint32_t* pad) {
  if (rows == kTile && cols == kTile) {
    tile_load<Tile>(src, ld * 4);
    return;
  }
  std::fill(pad, pad + kTile * kTile, 0u);
  for (std::size_t r = 0; r < rows; ++r) std::copy_n(src + r * ld, cols, pad + r * kTile);
  tile_load<Tile>(pad, 64);
}

// Tiles 0-3: C (2 x 2 blocks of 16 x 16 float32); 4, 5: A; 6, 7: B.
void configure_tiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = kTile;
  }
  _tile_loadconfig(&config);
}

}  // namespace

void amx_gemm_rounded(std::size_t rows, std::size_t N, std::size_t K, float alpha,
                      const std::uint32_t* Ap, std::size_t ldap, const std::uint32_t* Bp,
                      std::size_t ldbp, float* C, std::size_t ldc, bool accumulate,
                      const float* bias) {
  constexpr std::size_t S = 2 * kTile;  // a block of C: S x S
  const std::size_t P = bf16_pairs(K);
  configure_tiles();
  alignas(64) std::uint32_t a_pad[2][kTile * kTile], b_pad[2][kTile * kTile];
  alignas(64) float acc[S * S];
  for (std::size_t c0 = 0; c0 < N; c0 += S) {
    const std::size_t nc = std::min(S, N - c0);
    for (std::size_t r0 = 0; r0 < rows; r0 += S) {
      const std::size_t nr = std::min(S, rows - r0);
      for (std::size_t p0 = 0; p0 < P || p0 == 0; p0 += kPairDepth) {
        const std::size_t pd = std::min(kPairDepth, P - p0);
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (std::size_t q = p0; q < p0 + pd; q += kTile) {
          const std::size_t nq = std::min(kTile, p0 + pd - q);
          // A: rows [r0 + 16 i, +16), pairs [q, q + 16); B: pairs [q, q + 16), columns
          // [c0 + 16 j, +16)
          const auto live = [](std::size_t at, std::size_t end) {
            return at < end ? std::min(kTile, end - at) : std::size_t{0};
          };
          load_tile<4>(Ap + r0 * ldap + q, ldap, live(r0, rows), nq, a_pad[0]);
          load_tile<5>(Ap + (r0 + kTile) * ldap + q, ldap, live(r0 + kTile, rows), nq, a_pad[1]);
          load_tile<6>(Bp + q * ldbp + c0, ldbp, nq, live(c0, N), b_pad[0]);
          load_tile<7>(Bp + q * ldbp + c0 + kTile, ldbp, nq, live(c0 + kTile, N), b_pad[1]);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, acc, S * 4);
        _tile_stored(1, acc + kTile, S * 4);
        _tile_stored(2, acc + kTile * S, S * 4);
        _tile_stored(3, acc + kTile * S + kTile, S * 4);
        // C = init + alpha * the slice's sums: the first slice from the bias, C or 0, later
        // ones from C (one rounding, as the AVX-512 path's fmadd).
        const bool from_c = p0 > 0 || (accumulate && !bias);
        for (std::size_t r = 0; r < nr; ++r) {
          float* c = C + (r0 + r) * ldc + c0;
          for (std::size_t j = 0; j < nc; ++j) {
            const float old = from_c ? c[j] : bias ? bias[c0 + j] : 0.0f;
            c[j] = std::fma(alpha, acc[r * S + j], old);
          }
        }
      }
    }
  }
  _tile_release();
}

}  // namespace mha::detail
#pragma GCC pop_options

namespace mha::detail {

void bf16_gemm_rounded(std::size_t rows, std::size_t N, std::size_t K, float alpha,
                       const std::uint32_t* Ap, std::size_t ldap, const std::uint32_t* Bp,
                       std::size_t ldbp, float* C, std::size_t ldc, bool accumulate,
                       const float* bias) {
  if (bf16_amx())
    amx_gemm_rounded(rows, N, K, alpha, Ap, ldap, Bp, ldbp, C, ldc, accumulate, bias);
  else
    avx512_gemm_rounded(rows, N, K, alpha, Ap, ldap, Bp, ldbp, C, ldc, accumulate, bias);
}

}  // namespace mha::detail
