// ggml's tensor types (the `ggml_type` enum of ggml's include/ggml.h, as GGUF
// files store them) and their dequantization to float32.
//
// A quantized type packs `block_elements` consecutive values of a row into a
// block of `block_bytes` bytes (ggml's src/ggml-common.h: block_q4_0 and so
// on); a row is a whole number of blocks. mha dequantizes F32, F16, BF16,
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the k-quants Q2_K..Q8_K; the other types
// (IQ*, TQ*, MXFP4, integers, ...) have their sizes here, so that a file
// holding them can be checked and listed, but are not dequantized.
//
//   std::vector<float> row(512);
//   mha::dequantize(mha::GgmlType::Q4_K, bytes, 512, row.data());  // 2 blocks of 144 bytes
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mha {

// The numbers are ggml's (and the file's); 4, 5, 31-33 and 36-38 were types
// once and are no longer.
enum class GgmlType : std::uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
  Q2_0 = 42,
};

struct GgmlTypeInfo {
  const char* name;            // as ggml.h spells the enum: "Q4_K", "IQ2_XXS"
  std::size_t block_elements;  // values per block (1 for F32, F16, ...)
  std::size_t block_bytes;     // bytes per block
  bool dequantized;            // whether dequantize() reads it
};

// The type numbered `number`, or null when ggml defines no such type (today
// or any more).
const GgmlTypeInfo* ggml_type_info(std::uint32_t number);
const GgmlTypeInfo& ggml_type_info(GgmlType type);

// "IQ2_XXS (16)"; a number that is no type: "31 (Q4_0_4_4, removed from
// ggml)" or "99 (not a ggml type)".
std::string ggml_type_label(std::uint32_t number);

// out[0, n) = the n values held by the blocks at `blocks` (n / block_elements
// blocks of block_bytes bytes each), as ggml's reference dequantize_row_*
// (src/ggml-quants.c) computes them, bit for bit: plain scalar code, the same
// float32 operations in the same order. Whether a compiler fuses `a * q - m`
// into an FMA does not change a bit: every product that meets an addition is
// a float16 scale times integers of at most 6 + 5 bits, exact in float32.
// Throws mha::Error (invalid_input) for a type not dequantized or an n that
// is not a whole number of blocks; callers check both first to name the tensor.
void dequantize(GgmlType type, const void* blocks, std::size_t n, float* out);

}  // namespace mha
