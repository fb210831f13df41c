// libzip, loaded with dlopen the first time a .npz is read or written instead
// of being linked. Linking it costs every mha process about 1.5 ms at start
// (libzip pulls in libcrypto, bzip2 and their relocations), a tenth of a small
// `mha run` that never touches an archive. Internal to npz.cpp.
#pragma once

#include <zip.h>

namespace mha::detail {

// Every libzip function npz.cpp calls. To call a new one, add it here.
#define MHA_LIBZIP_FUNCTIONS(X)       \
  X(zip_close)                        \
  X(zip_compression_method_supported) \
  X(zip_discard)                      \
  X(zip_error_code_zip)               \
  X(zip_error_fini)                   \
  X(zip_error_init)                   \
  X(zip_error_init_with_code)         \
  X(zip_error_set)                    \
  X(zip_error_strerror)               \
  X(zip_error_to_data)                \
  X(zip_fclose)                       \
  X(zip_file_add)                     \
  X(zip_file_strerror)                \
  X(zip_fopen_index)                  \
  X(zip_fread)                        \
  X(zip_get_name)                     \
  X(zip_get_num_entries)              \
  X(zip_open)                         \
  X(zip_open_from_source)             \
  X(zip_set_file_compression)         \
  X(zip_source_buffer_create)         \
  X(zip_source_free)                  \
  X(zip_source_function)              \
  X(zip_source_make_command_bitmap)   \
  X(zip_stat_index)                   \
  X(zip_stat_init)                    \
  X(zip_strerror)

// The loaded functions, with libzip's own names and types.
struct Libzip {
#define MHA_LIBZIP_MEMBER(name) decltype(&::name) name = nullptr;
  MHA_LIBZIP_FUNCTIONS(MHA_LIBZIP_MEMBER)
#undef MHA_LIBZIP_MEMBER
};

// Loads libzip on the first call (thread-safe) and returns its functions;
// throws mha::Error (runtime, exit code 1) naming the library and what to
// install if it cannot be loaded or lacks a function.
const Libzip& libzip();

}  // namespace mha::detail
