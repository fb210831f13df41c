// <immintrin.h> for the kernel's vector code (vexp.cpp, direct_gemm.cpp).
// GCC 12 reports the deliberately undefined pass-through operands inside the
// AVX-512 intrinsics (__Y = _mm512_undefined_ps() etc.) as uninitialized once
// they are inlined at -O2 and above: a known false positive. The reported
// locations are in this header, so silencing it for the include is enough.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
