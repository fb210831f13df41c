#include "mha/io/output_set.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <type_traits>

#include "mha/base/error.hpp"
#include "mha/io/float16.hpp"
#include "mha/io/npz.hpp"

namespace fs = std::filesystem;

namespace mha {

namespace {

// Temporaries alive in this process, readable from a signal handler: fixed
// slots, lock-free atomics, no allocation. A path that does not fit is simply
// not cleaned up by a signal (it still is by the destructor).
constexpr int kTempSlots = 256;
constexpr std::size_t kTempPathMax = 4096;
char g_temp_paths[kTempSlots][kTempPathMax];
std::atomic<int> g_temp_state[kTempSlots];  // 0 free, 1 being written, 2 live

// A slot's file identity (st_dev, st_ino), when the handler is to remove the
// path only while it still names that file; 0, 0 for any file.
std::atomic<unsigned long long> g_temp_dev[kTempSlots], g_temp_ino[kTempSlots];

void register_temp(const std::string& path, unsigned long long dev = 0,
                   unsigned long long ino = 0) {
  if (path.size() >= kTempPathMax) return;
  for (int i = 0; i < kTempSlots; ++i) {
    int expected = 0;
    if (g_temp_state[i].compare_exchange_strong(expected, 1)) {
      std::memcpy(g_temp_paths[i], path.c_str(), path.size() + 1);
      g_temp_dev[i].store(dev, std::memory_order_relaxed);
      g_temp_ino[i].store(ino, std::memory_order_relaxed);
      g_temp_state[i].store(2, std::memory_order_release);
      return;
    }
  }
}

void unregister_temp(const std::string& path) {
  for (int i = 0; i < kTempSlots; ++i)
    if (g_temp_state[i].load(std::memory_order_acquire) == 2 &&
        std::strcmp(g_temp_paths[i], path.c_str()) == 0) {
      g_temp_state[i].store(0, std::memory_order_release);
      return;
    }
}

extern "C" void remove_temporaries_and_die(int sig) {
  for (int i = 0; i < kTempSlots; ++i)
    if (g_temp_state[i].load(std::memory_order_acquire) == 2) {
      const unsigned long long dev = g_temp_dev[i].load(std::memory_order_relaxed),
                               ino = g_temp_ino[i].load(std::memory_order_relaxed);
      struct stat st {};  // lstat and unlink are async-signal-safe
      if (ino == 0 || (::lstat(g_temp_paths[i], &st) == 0 && st.st_dev == dev && st.st_ino == ino))
        ::unlink(g_temp_paths[i]);
    }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// Passes everything written on to `dst` and keeps its crc32 and length.
class ChecksumBuf : public std::streambuf {
 public:
  explicit ChecksumBuf(std::streambuf* dst) : dst_(dst) {}
  const FileChecksum& sum() const { return sum_; }

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const std::streamsize done = dst_->sputn(s, n);
    if (done > 0) add(s, static_cast<std::size_t>(done));
    return done;
  }
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    return xsputn(&ch, 1) == 1 ? c : traits_type::eof();
  }
  int sync() override { return dst_->pubsync(); }

 private:
  void add(const char* s, std::size_t n) {
    sum_.crc32 = crc32_update(sum_.crc32, s, n);
    sum_.bytes += n;
  }
  std::streambuf* dst_;
  FileChecksum sum_;
};

std::string errno_str(int err) {
  return err ? std::strerror(err) : "unknown error";
}

// Without this a crash right after commit() could leave renamed but empty
// files behind on some filesystems. Returns errno, or 0.
int sync_path(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return errno;
  const int err = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

void remove_quietly(const std::string& path) noexcept {
  unregister_temp(path);
  std::error_code ec;
  fs::remove(path, ec);
}

// Writing one name twice would silently drop the first version.
template <class StagedList>
void check_not_staged(const StagedList& staged, const std::vector<std::string>& committed,
                      const std::string& final_path) {
  const bool dup = std::any_of(staged.begin(), staged.end(),
                               [&](auto& s) { return s.final_path == final_path; }) ||
                   std::find(committed.begin(), committed.end(), final_path) != committed.end();
  if (dup) fail_runtime(final_path + ": staged more than once in the same output set");
}

}  // namespace

OutputSet::OutputSet(std::string dir) : dir_(dir.empty() ? "." : std::move(dir)) {
  std::error_code ec;
  const auto status = fs::status(dir_, ec);
  if (fs::exists(status) && !fs::is_directory(status))
    fail_runtime(dir_ + ": output directory exists but is not a directory");
  if (!fs::exists(status)) {
    fs::create_directories(dir_, ec);
    if (ec) fail_runtime(dir_ + ": cannot create output directory: " + ec.message());
  }
  if (::access(dir_.c_str(), W_OK | X_OK) != 0)
    fail_runtime(dir_ + ": output directory is not writable: " + errno_str(errno));
  remove_dead_temporaries();
}

// A process killed by SIGKILL cannot remove its temporaries; the next set in
// the directory does. A temporary is known by its name (temp_path's
// ".NAME.tmp.PID.N") and by its process being gone: a live one's files, or a
// pid reused since, are left alone.
void OutputSet::remove_dead_temporaries() const {
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const auto tmp = name.rfind(".tmp.");
    if (name.size() < 2 || name[0] != '.' || tmp == std::string::npos || tmp == 0) continue;
    const std::string rest = name.substr(tmp + 5);  // "PID.N"
    const auto dot = rest.find('.');
    const auto digits = [](const std::string& t) {
      return !t.empty() && t.size() <= 10 &&
             std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (dot == std::string::npos || !digits(rest.substr(0, dot)) || !digits(rest.substr(dot + 1)))
      continue;
    const long pid = std::stol(rest.substr(0, dot));
    if (pid <= 0 || pid == ::getpid() || pid > std::numeric_limits<pid_t>::max()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode))
      remove_quietly(it->path().string());
  }
}

OutputSet::~OutputSet() {
  for (const auto& s : staged_) {
    if (s.stream && s.stream->fd_ >= 0) {
      s.stream->finish_sync();
      ::close(s.stream->fd_);
    }
    remove_quietly(s.tmp);
  }
}

const OutputSet::NpyStream& OutputSet::stage_npy_stream(const std::string& filename, DType dtype,
                                                        const std::vector<std::size_t>& shape) {
  const std::string final_path = path(filename);
  check_not_staged(staged_, committed_, final_path);
  const std::string header = npy_header(dtype, shape);
  std::size_t bytes = itemsize(dtype);
  for (std::size_t d : shape) {
    if (d != 0 && bytes > std::numeric_limits<std::size_t>::max() / d)
      fail_runtime(final_path + ": array of shape " + shape_str(shape) + " is too large");
    bytes *= d;
  }
  staged_.reserve(staged_.size() + 1);
  auto stream = std::make_shared<NpyStream>();
  const std::string tmp = temp_path(filename);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) fail_runtime(final_path + ": cannot create " + tmp + ": " + errno_str(errno));
  auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    remove_quietly(tmp);
    fail_runtime(final_path + ": " + what + ": " + errno_str(err));
  };
  if (::pwrite(fd, header.data(), header.size(), 0) != static_cast<ssize_t>(header.size()))
    fail("write failed", errno ? errno : ENOSPC);
  const off_t total = static_cast<off_t>(header.size() + bytes);
  // Reserve the blocks now; filesystems without fallocate get a sized file.
  int err = ::posix_fallocate(fd, 0, total);
  if (err == EOPNOTSUPP || err == EINVAL) err = ::ftruncate(fd, total) == 0 ? 0 : errno;
  if (err) fail("cannot reserve " + std::to_string(total) + " bytes", err);
  stream->fd_ = fd;
  stream->data_start_ = header.size();
  stream->itemsize_ = itemsize(dtype);
  stream->name_ = final_path;
  staged_.push_back({tmp, final_path, stream, {}, header});
  return *stream;
}

template <class T>
void OutputSet::NpyStream::write_elements(std::size_t offset, const T* data,
                                          std::size_t count) const {
  const char* p = reinterpret_cast<const char*>(data);
  std::size_t left = count * sizeof(T);
  off_t at = static_cast<off_t>(data_start_ + offset * itemsize_);
  // The block is hot in cache here: its checksum costs little now and saves
  // reading the file back at the end.
  const Block block{static_cast<std::uint64_t>(at), left, crc32_update(0, p, left)};
  {
    std::lock_guard<std::mutex> lock(blocks_mutex_);
    blocks_.push_back(block);
  }
  while (left > 0) {
    const ssize_t n = ::pwrite(fd_, p, left, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_runtime(name_ + ": write failed: " + errno_str(n < 0 ? errno : ENOSPC));
    p += n, at += n, left -= static_cast<std::size_t>(n);
  }
}

FileChecksum OutputSet::NpyStream::checksum(const std::string& header) const {
  std::vector<Block> blocks;
  {
    std::lock_guard<std::mutex> lock(blocks_mutex_);
    blocks = blocks_;
  }
  std::sort(blocks.begin(), blocks.end(),
            [](const Block& a, const Block& b) { return a.at < b.at; });
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail_runtime(name_ + ": cannot stat it: " + errno_str(errno));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  FileChecksum sum{header.size(), crc32_update(0, header.data(), header.size())};
  for (const Block& b : blocks) {
    if (b.at != sum.bytes) return fd_checksum(fd_, name_);  // a gap or an overlap
    sum.crc32 = crc32_combine(sum.crc32, b.crc32, b.bytes);
    sum.bytes += b.bytes;
  }
  return sum.bytes == size ? sum : fd_checksum(fd_, name_);
}

void OutputSet::NpyStream::start_writeback(std::size_t offset, std::size_t count) const {
  // Advice only: commit()'s fdatasync still decides.
  (void)::sync_file_range(fd_, static_cast<off_t>(data_start_ + offset * itemsize_),
                          static_cast<off_t>(count * itemsize_), SYNC_FILE_RANGE_WRITE);
  if (syncing_.load()) return;  // the next call, or commit(), covers this range
  if (syncer_.joinable()) syncer_.join();
  syncing_.store(true);
  try {
    syncer_ = std::thread([this] {
      // A failure is kept for commit(): the kernel reports a write error to
      // one fdatasync only, and this may be the one.
      if (::fdatasync(fd_) != 0 && errno != EINVAL && !sync_error_) sync_error_ = errno;
      syncing_.store(false);
    });
  } catch (const std::system_error&) {
    syncing_.store(false);  // no thread: commit()'s fdatasync does it all
  }
}

int OutputSet::NpyStream::finish_sync() const {
  if (syncer_.joinable()) syncer_.join();
  return sync_error_;
}

template void OutputSet::NpyStream::write_elements<float>(std::size_t, const float*,
                                                          std::size_t) const;
template void OutputSet::NpyStream::write_elements<double>(std::size_t, const double*,
                                                           std::size_t) const;
template void OutputSet::NpyStream::write_elements<float16>(std::size_t, const float16*,
                                                            std::size_t) const;

std::string OutputSet::path(const std::string& filename) const {
  return (fs::path(dir_) / filename).string();
}

std::string OutputSet::temp_path(const std::string& filename) {
  // Shared by all instances so two sets staging the same name in one process
  // cannot collide; the pid separates concurrent processes.
  static std::atomic<unsigned long> counter{0};
  const fs::path final_path = fs::path(path(filename));
  const std::string base = "." + final_path.filename().string() + ".tmp." +
                           std::to_string(::getpid()) + "." + std::to_string(counter++);
  std::string tmp = (final_path.parent_path() / base).string();
  register_temp(tmp);
  return tmp;
}

void OutputSet::stage(const std::string& filename,
                      const std::function<void(std::ostream&)>& write) {
  const std::string final_path = path(filename);
  check_not_staged(staged_, committed_, final_path);

  staged_.reserve(staged_.size() + 1);  // so that recording it below cannot throw
  const std::string tmp = temp_path(filename);
  // Temporary names are predictable, so create the file exclusively first:
  // in a shared directory nobody can have planted a symlink there for us to
  // follow, and with the sticky bit nobody can swap the file afterwards.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) fail_runtime(final_path + ": cannot create " + tmp + ": " + errno_str(errno));
  ::close(fd);
  FileChecksum sum;
  try {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail_runtime(final_path + ": cannot open " + tmp + ": " + errno_str(errno));
    errno = 0;
    ChecksumBuf counted(out.rdbuf());
    std::ostream counted_out(&counted);
    write(counted_out);
    counted_out.flush();
    if (!counted_out) out.setstate(std::ios::badbit);
    out.flush();
    if (!out) fail_runtime(final_path + ": write failed: " + errno_str(errno));
    sum = counted.sum();
    out.close();
    if (!out) fail_runtime(final_path + ": write failed: " + errno_str(errno));
    if (const int err = sync_path(tmp, O_RDONLY))
      fail_runtime(final_path + ": fsync failed: " + errno_str(err));
  } catch (...) {
    remove_quietly(tmp);
    throw;
  }
  staged_.push_back({tmp, final_path, nullptr, sum, {}});
}

void OutputSet::stage_bytes(const std::string& filename, const std::string& bytes) {
  stage(filename, [&](std::ostream& out) {
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  });
}

template <class T>
void OutputSet::stage_npy(const std::string& filename, const T* data,
                          const std::vector<std::size_t>& shape) {
  std::size_t n = 1;
  for (std::size_t d : shape) {
    if (d != 0 && n > std::numeric_limits<std::size_t>::max() / sizeof(T) / d)
      fail_runtime(path(filename) + ": array of shape " + shape_str(shape) + " is too large");
    n *= d;
  }
  const std::string header = npy_header(npy_dtype<T>(), shape);
  stage(filename, [&](std::ostream& out) {
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    if (n)
      out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n * sizeof(T)));
  });
}

template void OutputSet::stage_npy<float>(const std::string&, const float*,
                                          const std::vector<std::size_t>&);
template void OutputSet::stage_npy<double>(const std::string&, const double*,
                                           const std::vector<std::size_t>&);
template void OutputSet::stage_npy<float16>(const std::string&, const float16*,
                                            const std::vector<std::size_t>&);
template void OutputSet::stage_npy<std::uint8_t>(const std::string&, const std::uint8_t*,
                                                 const std::vector<std::size_t>&);

void OutputSet::stage_npz(const std::string& filename,
                          const std::vector<std::pair<std::string, NpyArray>>& members) {
  const std::string final_path = path(filename);
  check_not_staged(staged_, committed_, final_path);

  staged_.reserve(staged_.size() + 1);
  const std::string tmp = temp_path(filename);
  // Created exclusively first, as stage() does: nothing planted under the
  // temporary name is followed.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) fail_runtime(final_path + ": cannot create " + tmp + ": " + errno_str(errno));
  ::close(fd);
  FileChecksum sum;
  try {
    write_npz(tmp, members);
    if (const int err = sync_path(tmp, O_RDONLY))
      fail_runtime(final_path + ": fsync failed: " + errno_str(err));
    sum = file_checksum(tmp);
  } catch (const Error& e) {
    remove_quietly(tmp);
    // Report the file the user asked for, not our temporary name.
    std::string msg = e.what();
    if (msg.compare(0, tmp.size(), tmp) == 0) msg = final_path + msg.substr(tmp.size());
    throw Error(e.kind(), msg);
  } catch (...) {
    remove_quietly(tmp);
    throw;
  }
  staged_.push_back({tmp, final_path, nullptr, sum, {}});
}

FileChecksum OutputSet::checksum(const std::string& filename) const {
  const std::string final_path = path(filename);
  for (const Staged& s : staged_)
    if (s.final_path == final_path)
      return s.stream && s.stream->fd_ >= 0 ? s.stream->checksum(s.header) : s.sum;
  fail_runtime(final_path + ": not staged in this output set");
}

void OutputSet::remove_on_commit(std::vector<std::string> filenames) {
  remove_ = std::move(filenames);
}

void OutputSet::commit() {
  // The earlier run's files go first: were this process to die between the
  // two steps, the directory would hold no run.json rather than one that
  // describes a mixture.
  for (const std::string& name : remove_) {
    const std::string p = path(name);
    if (::unlink(p.c_str()) != 0 && errno != ENOENT)
      fail_runtime(p + ": cannot remove this output of an earlier run: " + errno_str(errno));
  }
  remove_.clear();
  while (!staged_.empty()) {
    const Staged s = staged_.front();
    if (s.stream && s.stream->fd_ >= 0) {
      const int fd = s.stream->fd_;
      const int earlier = s.stream->finish_sync();
      s.stream->fd_ = -1;
      const bool ok = (::fdatasync(fd) == 0 || errno == EINVAL) && !earlier;
      const int err = earlier ? earlier : errno;
      if (::close(fd) != 0 || !ok)
        fail_runtime(s.final_path + ": write failed: " + errno_str(ok ? errno : err));
    }
    std::error_code ec;
    fs::rename(s.tmp, s.final_path, ec);
    if (ec)
      fail_runtime(s.final_path + ": cannot move the finished file into place: " + ec.message());
    unregister_temp(s.tmp);
    staged_.erase(staged_.begin());
    committed_.push_back(s.final_path);
  }
  // Best effort: the files are already in place, and some filesystems
  // cannot sync a directory.
  sync_path(dir_, O_RDONLY | O_DIRECTORY);
}

void remove_on_signal(const std::string& path) {
  register_temp(path);
}

void remove_on_signal(const std::string& path, unsigned long long dev, unsigned long long ino) {
  register_temp(path, dev, ino);
}

void forget_on_signal(const std::string& path) {
  unregister_temp(path);
}

void remove_temporaries_on_signal() {
  struct sigaction action {};
  action.sa_handler = remove_temporaries_and_die;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &action, nullptr);
  // Past a file size limit (ulimit -f) a write then fails with EFBIG and is
  // reported, instead of the process dying with no word.
  ::signal(SIGXFSZ, SIG_IGN);
}

}  // namespace mha
