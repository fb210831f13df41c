#include "mha/io/file_kind.hpp"

#include <filesystem>
#include <fstream>

#include "mha/io/hdf5.hpp"
#include "mha/io/safetensors.hpp"
#include "mha/io/stream_input.hpp"

namespace mha {
namespace {

// The first bytes of a file or stream: as many as the checks below look at.
std::string head_of(const std::string& path) {
  constexpr std::size_t kHead = 9;  // safetensors: 8 bytes of header length, then '{'
  if (is_stream_input(path)) return stream_input_bytes(path).substr(0, kHead);
  std::string head(kHead, '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(head.data(), static_cast<std::streamsize>(kHead));
  head.resize(in ? kHead : static_cast<std::size_t>(in.gcount()));
  return head;
}

// A zip archive starts with a local file header, "PK\3\4", or when it holds
// no member with its end record, "PK\5\6".
bool looks_like_zip(const std::string& head) {
  return head.size() >= 4 && head.compare(0, 2, "PK") == 0 &&
         ((head[2] == 3 && head[3] == 4) || (head[2] == 5 && head[3] == 6));
}

}  // namespace

std::optional<FileKind> kind_from_name(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".safetensors") return FileKind::safetensors;
  if (ext == ".npz") return FileKind::npz;
  if (ext == ".npy") return FileKind::npy;
  if (ext == ".h5" || ext == ".hdf5") return FileKind::hdf5;
  if (ext == ".keras") return FileKind::keras;
  return std::nullopt;
}

FileKind file_kind(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return FileKind::npy_directory;
  const std::optional<FileKind> named = kind_from_name(path);
  if (named == FileKind::safetensors) return FileKind::safetensors;
  const std::string head = head_of(path);
  if (looks_like_safetensors(head)) return FileKind::safetensors;
  if (named) return *named;
  if (looks_like_hdf5(head)) return FileKind::hdf5;
  return looks_like_zip(head) ? FileKind::npz : FileKind::npy;
}

}  // namespace mha
