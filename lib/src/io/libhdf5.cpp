#include "libhdf5.hpp"

#include "mha/base/shared_library.hpp"

#ifndef MHA_HDF5_SONAME
#define MHA_HDF5_SONAME "libhdf5_serial.so.103"
#endif

// The symbol a name stands for once HDF5's version macros are applied.
#define MHA_HDF5_STRING(x) #x
#define MHA_HDF5_SYMBOL(x) MHA_HDF5_STRING(x)

namespace mha::detail {

namespace {

Libhdf5 load() {
  const char* hint = "Keras .h5/.keras files need Debian's libhdf5 (scripts/setup.sh installs it)";
  const SharedLibrary library(MHA_HDF5_SONAME, "libhdf5", hint);
  Libhdf5 h;
#define MHA_LIBHDF5_BIND(name) library.bind(h.name, MHA_HDF5_SYMBOL(name));
  MHA_LIBHDF5_FUNCTIONS(MHA_LIBHDF5_BIND)
#undef MHA_LIBHDF5_BIND
  h.H5open();
  // The identifiers exist once H5open has run.
#define MHA_LIBHDF5_READ(name) \
  {                            \
    hid_t* p = nullptr;        \
    library.bind(p, #name);    \
    h.name = *p;               \
  }
  MHA_LIBHDF5_VARIABLES(MHA_LIBHDF5_READ)
#undef MHA_LIBHDF5_READ
  // HDF5 prints a stack of messages to stderr on every failed call unless told
  // not to; a failure here is a single-line mha::Error.
  h.H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  return h;
}

}  // namespace

const Libhdf5& libhdf5() {
  static const Libhdf5 h = load();
  return h;
}

}  // namespace mha::detail
