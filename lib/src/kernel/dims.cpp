#include "mha/kernel/dims.hpp"

namespace mha {

std::uint64_t Dims::flops() const {
  const std::uint64_t bt = B * T, bs = B * S;
  std::uint64_t f = 0;
  f += 2 * bt * d_model * h * d_k;  // Q = X_q W_q
  f += 2 * bs * kdim * kv() * d_k;  // K = X_k W_k
  f += 2 * bs * vdim * kv() * d_v;  // V = X_v W_v
  f += 2 * B * h * T * S * d_k;     // Q_i K_i^T
  f += 2 * B * h * T * S * d_v;     // A_i V_i
  f += 2 * bt * h * d_v * d_out;    // concat W_o
  return f;
}

}  // namespace mha
