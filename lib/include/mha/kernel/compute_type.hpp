// The precision a run computes in, one enum from the flag (`--dtype`) to the
// kernel: the single-layer Config (config/config.hpp) and a whole checkpoint
// (checkpoint/checkpoint.hpp) hold it as it was parsed, once.
#pragma once

namespace mha {

// float32 and float64: every operation in that type. bfloat16: the GEMMs take
// bfloat16 operands (natively with AVX512_BF16, else OpenBLAS sbgemm) and sum
// in float32; norms, softmax and residuals stay float32. A whole model runs
// in float32 or bfloat16 (its forward is float32).
enum class ComputeType { float32, float64, bfloat16 };

}  // namespace mha
