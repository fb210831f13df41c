// The choice of OpenBLAS kernel set: SkylakeX only where the CPU (and the OS)
// has every AVX-512 subset its kernels use, never over the user's own
// OPENBLAS_CORETYPE; the AVX2 fallback is what a CPU without them gets.
#include <catch2/catch.hpp>

#include <string>

#include "mha/kernel/blas.hpp"

namespace {

mha::CpuFeatures avx512_cpu() {
  mha::CpuFeatures f;
  f.avx512f = f.avx512cd = f.avx512bw = f.avx512dq = f.avx512vl = f.os_avx512 = true;
  return f;
}

}  // namespace

TEST_CASE("AVX-512 CPUs get the SkylakeX kernels", "[blas]") {
  const auto chosen = mha::auto_coretype(nullptr, avx512_cpu());
  REQUIRE(chosen);
  CHECK(*chosen == "SkylakeX");
  CHECK(mha::auto_coretype("", avx512_cpu()) == chosen);  // empty counts as unset
}

TEST_CASE("a CPU missing any AVX-512 subset, or OS support, is left to OpenBLAS", "[blas]") {
  CHECK_FALSE(mha::auto_coretype(nullptr, mha::CpuFeatures{}));  // AVX2-only (Zen 3)
  for (int missing = 0; missing < 6; ++missing) {
    mha::CpuFeatures f = avx512_cpu();
    bool* flags[] = {&f.avx512f, &f.avx512cd, &f.avx512bw, &f.avx512dq, &f.avx512vl, &f.os_avx512};
    *flags[missing] = false;
    INFO("missing feature " << missing);
    CHECK_FALSE(mha::auto_coretype(nullptr, f));
  }
}

TEST_CASE("the user's OPENBLAS_CORETYPE always wins", "[blas]") {
  CHECK_FALSE(mha::auto_coretype("Haswell", avx512_cpu()));
  CHECK_FALSE(mha::auto_coretype("SkylakeX", mha::CpuFeatures{}));
}

TEST_CASE("the loaded OpenBLAS is described", "[blas]") {
  const mha::BlasInfo& info = mha::blas_load();
  CHECK(info.library.find("libopenblas") != std::string::npos);
  CHECK(!info.core.empty());
  CHECK(info.threading == "pthreads");
  const bool has_avx512 = static_cast<bool>(mha::auto_coretype(nullptr, mha::cpu_features()));
  INFO("core " << info.core << ", coretype " << info.coretype << " from " << info.coretype_source);
  if (info.coretype_source == "user") {
    CHECK(info.core == info.coretype);
  } else if (has_avx512) {
    CHECK(info.coretype_source == "mha");
    CHECK(info.core == "SkylakeX");
  } else {
    CHECK(info.coretype_source == "openblas");
  }
}
