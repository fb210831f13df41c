// libzip, loaded with dlopen the first time a .npz or a .keras is read or
// written instead of being linked. Linking it costs every mha process about
// 1.5 ms at start (libzip pulls in libcrypto, bzip2 and their relocations), a
// tenth of a small `mha run` that never touches an archive. Internal to io/
// (npz.cpp, zip_member.cpp).
#pragma once

#include <zip.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

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

struct ZipDiscard {
  void operator()(zip_t* za) const { libzip().zip_discard(za); }
};
using ZipPtr = std::unique_ptr<zip_t, ZipDiscard>;

struct ZipFileClose {
  void operator()(zip_file_t* f) const { libzip().zip_fclose(f); }
};
using ZipFilePtr = std::unique_ptr<zip_file_t, ZipFileClose>;

// The bytes of member `index` of `za`, whose directory entry declares
// `declared` bytes uncompressed. Memory grows as data arrives rather than as
// the entry declares (and never past it), reading stops as soon as the member
// yields more, and a member that yields more or fewer bytes (or fails its CRC)
// is refused; errors (mha::Error, invalid_input) start with `what`.
// `check_head`, when given, is called on the member's first `head_bytes`
// bytes (all of it, when shorter) as soon as they are inflated and before
// anything more is: a signature it refuses costs no more than those bytes.
std::string read_member_bytes(zip_t* za, zip_uint64_t index, std::uint64_t declared,
                              const std::string& what, std::size_t head_bytes = 0,
                              const std::function<void(const std::string& head)>& check_head = {});

}  // namespace mha::detail
