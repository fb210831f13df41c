#include "mha/blas.hpp"

#include <cblas.h>

namespace mha {

template <>
void gemm<float>(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                 const float* A, std::size_t lda, const float* B, std::size_t ldb, float beta,
                 float* C, std::size_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
              static_cast<blasint>(ldc));
}

template <>
void gemm<double>(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, double alpha,
                  const double* A, std::size_t lda, const double* B, std::size_t ldb, double beta,
                  double* C, std::size_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
              static_cast<blasint>(ldc));
}

void blas_single_threaded() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

}  // namespace mha
