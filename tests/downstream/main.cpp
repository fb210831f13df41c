// Uses the installed library as a downstream project would: the kernel on its
// own tensors, and the error type. Exits 0 when every check holds.
#include <cmath>
#include <cstdio>
#include <vector>

#include <mha/mha.hpp>

int main() {
  mha::Dims d;
  d.B = 2, d.T = d.S = 6, d.h = 2, d.d_model = d.kdim = d.vdim = d.d_out = 8;
  d.d_k = d.d_v = 4;
  const auto w = mha::random_weights<float>(d, /*use_bias=*/true, /*seed=*/1);
  std::vector<float> x(d.B * d.T * d.d_model), out(d.B * d.T * d.d_out),
      attention(d.B * d.h * d.T * d.S);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
  mha::multi_head_attention<float>(d, x.data(), x.data(), x.data(), w, mha::Mask<float>{}, 0.5f,
                                   mha::MaskedRows::zero, out.data(), attention.data(), nullptr);
  for (std::size_t row = 0; row < d.B * d.h * d.T; ++row) {
    double sum = 0;
    for (std::size_t s = 0; s < d.S; ++s) sum += attention[row * d.S + s];
    if (std::abs(sum - 1) > 1e-5) {
      std::printf("attention row %zu sums to %g\n", row, sum);
      return 1;
    }
  }
  try {
    mha::Config c;
    c.apply_flag("h", "zero");
    std::printf("a bad flag was accepted\n");
    return 1;
  } catch (const mha::Error& e) {
    std::printf("mha %s: output[0] = %g; error as expected: %s\n", MHA_VERSION, out[0], e.what());
  }
  return 0;
}
