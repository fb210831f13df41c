#include "libzip.hpp"

#include "mha/base/shared_library.hpp"

#ifndef MHA_LIBZIP_SONAME
#define MHA_LIBZIP_SONAME "libzip.so.4"
#endif

namespace mha::detail {

namespace {

Libzip load() {
  const SharedLibrary library(MHA_LIBZIP_SONAME, "libzip",
                              ".npz files need Debian's libzip4 (scripts/setup.sh installs it)");
  Libzip z;
#define MHA_LIBZIP_BIND(name) library.bind(z.name, #name);
  MHA_LIBZIP_FUNCTIONS(MHA_LIBZIP_BIND)
#undef MHA_LIBZIP_BIND
  return z;
}

}  // namespace

const Libzip& libzip() {
  static const Libzip z = load();
  return z;
}

}  // namespace mha::detail
