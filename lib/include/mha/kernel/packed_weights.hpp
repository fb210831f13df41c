// Weight matrices packed once, at load, for the native bfloat16 GEMM
// (weights.hpp's PackedBf16), so that a layer called many times, or a model's
// layer held for several passes, does not pack them in every call:
//
//   mha::Weights<float> w = ...;          // final: packing reads W now
//   mha::pack_bf16(w, threads);           // where gemm(..., bf16) runs natively
//   attention_layer(d, X, X, X, w, mask, options /* bf16_gemm */, out);
//
// Packing does nothing where bfloat16 GEMMs do not run natively (blas.hpp's
// bf16_gemm_backend() is "sbgemm" or "sgemm"): those round W in each call.
// The packed words are the ones the call would pack, so the bits of the
// output do not change. A W changed after packing must be packed again.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mha/kernel/weights.hpp"

namespace mha {

// Whether bfloat16 GEMMs run natively in this process, so that packing serves.
bool bf16_packing();

// W (k, n; ld n) packed, spread over `threads`; `of` records W. Needs
// bf16_packing().
PackedBf16 pack_bf16(const float* W, std::size_t k, std::size_t n, int threads);

// Makes `packed` a W (k, n) to be filled by pack_bf16_columns: its words are
// reused when it already has that size and nothing else holds them (a
// model's layers, read one after another into the same memory).
void reserve_bf16(PackedBf16& packed, std::size_t k, std::size_t n);

// Columns [col, col + count) of `packed` (W (k, n)) from float32 values:
// src (count, k; ld) holding them as rows (nn.Linear's (out, in)) when
// `rows`, else src (k, count; ld) (Conv1D's (in, out)). Needs bf16_packing().
void pack_bf16_columns(PackedBf16& packed, std::size_t col, std::size_t count, const float* src,
                       std::size_t ld, bool rows, int threads);

// The same from bfloat16 values (a BF16 file's bits), with no float32 copy:
// the words their float32 values would pack to.
void pack_bf16_columns(PackedBf16& packed, std::size_t col, std::size_t count,
                       const std::uint16_t* src, std::size_t ld, bool rows, int threads);

// W (k, n) back in float32: the bfloat16 values a packed W holds, exactly.
Tensor<float, 2> unpack_bf16(const PackedBf16& packed);

// Every matrix of `w` (and of a layer's attentions and feed-forward) packed,
// where bf16_packing(); nothing otherwise.
void pack_bf16(Weights<float>& w, int threads);
void pack_bf16(TransformerLayer<float>& L, int threads);

}  // namespace mha
