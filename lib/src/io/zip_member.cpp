#include "mha/io/zip_member.hpp"

#include <algorithm>
#include <filesystem>
#include <memory>

#include "libzip.hpp"
#include "mha/base/error.hpp"
#include "mha/base/message.hpp"

namespace mha {

namespace {

const detail::Libzip& lz() {
  return detail::libzip();
}

using detail::ZipPtr;

ZipPtr open_zip(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    fail_input(path + (std::filesystem::exists(path, ec) ? ": not a regular file; expected a zip "
                                                           "archive (.keras)"
                                                         : ": no such file"));
  int code = 0;
  ZipPtr za(lz().zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code));
  if (!za) {
    zip_error_t error;
    lz().zip_error_init_with_code(&error, code);
    const std::string why = lz().zip_error_strerror(&error);
    lz().zip_error_fini(&error);
    fail_input(path + ": not a valid zip archive (.keras): " + why);
  }
  return za;
}

}  // namespace

std::vector<std::string> zip_member_names(const std::string& path) {
  ZipPtr za = open_zip(path);
  std::vector<std::string> names;
  const zip_int64_t count = lz().zip_get_num_entries(za.get(), 0);
  for (zip_int64_t i = 0; i < count; ++i) {
    const char* name = lz().zip_get_name(za.get(), static_cast<zip_uint64_t>(i), 0);
    if (!name) fail_input(path + ": cannot read the name of member " + std::to_string(i));
    names.emplace_back(name);
  }
  return names;
}

std::string read_zip_member(const std::string& path, const std::string& member,
                            std::uint64_t max_bytes, const std::string& limit,
                            std::size_t head_bytes,
                            const std::function<void(const std::string& head)>& check_head) {
  ZipPtr za = open_zip(path);
  const std::string what = path + ": member " + echo(member);
  zip_int64_t index = -1;
  const zip_int64_t count = lz().zip_get_num_entries(za.get(), 0);
  for (zip_int64_t i = 0; i < count && index < 0; ++i) {
    const char* name = lz().zip_get_name(za.get(), static_cast<zip_uint64_t>(i), 0);
    if (name && member == name) index = i;
  }
  if (index < 0) fail_input(what + ": not in the archive");
  zip_stat_t st;
  lz().zip_stat_init(&st);
  if (lz().zip_stat_index(za.get(), static_cast<zip_uint64_t>(index), 0, &st) != 0 ||
      !(st.valid & ZIP_STAT_SIZE))
    fail_input(what + ": cannot read its directory entry: " + lz().zip_strerror(za.get()));
  if (st.size > max_bytes)
    fail_input(what + ": declares " + std::to_string(st.size) + " bytes uncompressed, over " +
               limit);
  if ((st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE)
    fail_input(what + ": is encrypted");
  if ((st.valid & ZIP_STAT_COMP_METHOD) &&
      !lz().zip_compression_method_supported(st.comp_method, 0))
    fail_input(what + ": compression method " + std::to_string(st.comp_method) +
               " is not supported; expected stored or deflated");
  return detail::read_member_bytes(za.get(), static_cast<zip_uint64_t>(index), st.size, what,
                                   head_bytes, check_head);
}

}  // namespace mha
