#include "mha/config/inputs.hpp"

#include "mha/config/rng.hpp"

namespace mha {

template <class T>
Tensor<T, 3> make_input(const std::optional<NpyArray>& file, const std::string& path,
                        const std::string& name, std::size_t B, std::size_t L, std::size_t F,
                        std::uint64_t seed, int threads) {
  Tensor<T, 3> x({B, L, F});
  if (file) {
    convert(*file, x.data(), path);  // (L, F) and (1, L, F) share one C-order layout
  } else {
    RandomStream(seed, name).fill_uniform<T>(x.data(), x.size(), T(0), T(1), threads);
  }
  return x;
}

template Tensor<float, 3> make_input<float>(const std::optional<NpyArray>&, const std::string&,
                                            const std::string&, std::size_t, std::size_t,
                                            std::size_t, std::uint64_t, int);
template Tensor<double, 3> make_input<double>(const std::optional<NpyArray>&, const std::string&,
                                              const std::string&, std::size_t, std::size_t,
                                              std::size_t, std::uint64_t, int);

}  // namespace mha
