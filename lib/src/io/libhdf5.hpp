// Debian's libhdf5, loaded with dlopen the first time an HDF5 file is read or
// written instead of being linked: libhdf5 pulls
// in libcurl, GnuTLS, Kerberos and LDAP, about 4 ms at the start of every mha
// process (mha/base/shared_library.hpp). Internal to hdf5.cpp.
#pragma once

#include <hdf5.h>

namespace mha::detail {

// Every libhdf5 function hdf5.cpp calls. To call a new one, add it here.
// Names HDF5 maps to a version (H5Lget_info_by_idx is H5Lget_info_by_idx2
// from 1.12 on, with H5L_info_t mapped alike) are bound by the name the
// headers map them to, so the struct agrees with the library found at build time.
#define MHA_LIBHDF5_FUNCTIONS(X) \
  X(H5open)                      \
  X(H5Eset_auto2)                \
  X(H5free_memory)               \
  X(H5Fopen)                     \
  X(H5Fcreate)                   \
  X(H5Fclose)                    \
  X(H5Fflush)                    \
  X(H5Fget_file_image)           \
  X(H5Pcreate)                   \
  X(H5Pclose)                    \
  X(H5Pset_fapl_core)            \
  X(H5Pset_file_image)           \
  X(H5Pset_file_image_callbacks) \
  X(H5Pget_external_count)       \
  X(H5Pget_layout)               \
  X(H5Pget_nfilters)             \
  X(H5Pget_filter2)              \
  X(H5Pget_chunk)                \
  X(H5Gopen2)                    \
  X(H5Gcreate2)                  \
  X(H5Gclose)                    \
  X(H5Gget_info)                 \
  X(H5Lget_name_by_idx)          \
  X(H5Lget_info_by_idx)          \
  X(H5Lget_val_by_idx)           \
  X(H5Oopen)                     \
  X(H5Oclose)                    \
  X(H5Iget_type)                 \
  X(H5Dopen2)                    \
  X(H5Dclose)                    \
  X(H5Dget_type)                 \
  X(H5Dget_space)                \
  X(H5Dget_create_plist)         \
  X(H5Dget_storage_size)         \
  X(H5Dget_space_status)         \
  X(H5Dget_num_chunks)           \
  X(H5Dread)                     \
  X(H5Dcreate2)                  \
  X(H5Dwrite)                    \
  X(H5Screate)                   \
  X(H5Screate_simple)            \
  X(H5Sclose)                    \
  X(H5Sget_simple_extent_type)   \
  X(H5Sget_simple_extent_ndims)  \
  X(H5Sget_simple_extent_dims)   \
  X(H5Tcopy)                     \
  X(H5Tclose)                    \
  X(H5Tget_class)                \
  X(H5Tget_size)                 \
  X(H5Tget_order)                \
  X(H5Tget_sign)                 \
  X(H5Tget_fields)               \
  X(H5Tget_ebias)                \
  X(H5Tis_variable_str)          \
  X(H5Tset_order)                \
  X(H5Tset_size)                 \
  X(H5Tset_fields)               \
  X(H5Tset_ebias)                \
  X(H5Tset_cset)                 \
  X(H5Aexists)                   \
  X(H5Aopen)                     \
  X(H5Aclose)                    \
  X(H5Aget_type)                 \
  X(H5Aget_space)                \
  X(H5Aread)                     \
  X(H5Acreate2)                  \
  X(H5Awrite)

// The library's predefined type and property-list class identifiers
// (H5T_IEEE_F32LE is `(H5open(), H5T_IEEE_F32LE_g)` in the headers), read
// after H5open.
#define MHA_LIBHDF5_VARIABLES(X) \
  X(H5T_IEEE_F32LE_g)            \
  X(H5T_IEEE_F64LE_g)            \
  X(H5T_C_S1_g)                  \
  X(H5P_CLS_FILE_ACCESS_ID_g)

// The loaded functions and identifiers, with HDF5's own names and types.
struct Libhdf5 {
#define MHA_LIBHDF5_MEMBER(name) decltype(&::name) name = nullptr;
  MHA_LIBHDF5_FUNCTIONS(MHA_LIBHDF5_MEMBER)
#undef MHA_LIBHDF5_MEMBER
#define MHA_LIBHDF5_VALUE(name) hid_t name = -1;
  MHA_LIBHDF5_VARIABLES(MHA_LIBHDF5_VALUE)
#undef MHA_LIBHDF5_VALUE
};

// Loads the library on the first call (thread-safe), turns HDF5's own
// error printing off (every failure becomes an mha::Error instead) and
// returns the functions; throws mha::Error (runtime, exit code 1) naming the
// library and what to install if it cannot be loaded or lacks a function.
const Libhdf5& libhdf5();

}  // namespace mha::detail
