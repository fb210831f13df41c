#include "mha/io/dir_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "mha/base/error.hpp"
#include "mha/io/output_set.hpp"

namespace fs = std::filesystem;

namespace mha {

namespace {

// The pid the holder wrote, or "" when it has not written it yet.
std::string holder_pid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "";
  std::string pid(buf, static_cast<std::size_t>(n));
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.find_first_not_of("0123456789") == std::string::npos ? pid : "";
}

}  // namespace

DirLock::DirLock(const std::string& dir, const std::string& name)
    : dir_(dir.empty() ? "." : dir), path_((fs::path(dir_) / name).string()) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir_, ec))) {
    created_dir_ = fs::create_directories(dir_, ec);
    if (ec) fail_runtime(dir_ + ": cannot create output directory: " + ec.message());
  }
  if (!fs::is_directory(dir_, ec))
    fail_runtime(dir_ + ": output directory exists but is not a directory");
  // The holder removes the file when it is done, so the file locked may have
  // been unlinked between open and flock: then open the new one.
  for (int attempt = 0; attempt < 100; ++attempt) {
    int fd = ::open(path_.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
      fd = make_lock_file();
      if (fd == -1) continue;  // another process made it first
      fd_ = fd;
      return;
    }
    if (fd < 0) {
      const int err = errno;
      if (err == ELOOP)
        fail_runtime(path_ + ": is a symbolic link; the lock file is never followed (remove it)");
      fail_runtime(path_ + ": cannot open the output directory's lock file: " + std::strerror(err));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err != EWOULDBLOCK) {
        ::close(fd);
        fail_runtime(path_ + ": cannot lock it: " + std::strerror(err));
      }
      // The holder writes its pid right after locking: give it a moment.
      std::string pid = holder_pid(fd);
      for (int i = 0; i < 20 && pid.empty(); ++i) {
        ::usleep(5000);
        pid = holder_pid(fd);
      }
      ::close(fd);
      fail_input(dir_ + ": in use by another mha process" +
                 (pid.empty() ? std::string() : " (pid " + pid + ")") +
                 " writing its outputs there; wait for it to finish or choose another out_dir");
    }
    // A lock file left by a process that died: ours now, if it is still the
    // one under the name and not a link to some other file.
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink > 1) {
      ::close(fd);
      fail_runtime(path_ + ": is not a plain file of its own; expected the lock file mha makes");
    }
    struct stat now {};
    if (::stat(path_.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev) {
      write_pid(fd);
      fd_ = fd;
      // A run stopped by SIGINT or SIGTERM leaves no lock file.
      remove_on_signal(path_, static_cast<unsigned long long>(st.st_dev),
                       static_cast<unsigned long long>(st.st_ino));
      return;
    }
    ::close(fd);  // unlinked by its last holder: try the current one
  }
  fail_runtime(path_ + ": the lock file keeps changing; is another process removing it?");
}

void DirLock::write_pid(int fd) const {
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    ::close(fd);
    fail_runtime(path_ + ": cannot write the lock file: " + std::strerror(err));
  }
}

int DirLock::make_lock_file() const {
  // Made whole (locked, pid written) under a temporary name that the signal
  // handler removes, then linked into place, so that a signal at any moment
  // leaves no lock file nobody removes. link() fails if the name exists.
  static std::atomic<unsigned long> counter{0};
  const std::string tmp =
      path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  remove_on_signal(tmp);
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    forget_on_signal(tmp);
    fail_runtime(path_ + ": cannot create the output directory's lock file: " + std::strerror(err));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {  // nobody else knows this file: cannot fail
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    forget_on_signal(tmp);
    fail_runtime(path_ + ": cannot lock it: " + std::strerror(err));
  }
  try {
    write_pid(fd);
  } catch (...) {
    ::unlink(tmp.c_str());
    forget_on_signal(tmp);
    throw;
  }
  // Registered before the link, for this file only: a signal between the two
  // removes the name if it is ours, and leaves another process's file alone.
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    forget_on_signal(tmp);
    fail_runtime(path_ + ": cannot stat the lock file: " + std::strerror(err));
  }
  remove_on_signal(path_, static_cast<unsigned long long>(st.st_dev),
                   static_cast<unsigned long long>(st.st_ino));
  const int linked = ::link(tmp.c_str(), path_.c_str());
  const int err = errno;
  if (linked != 0) forget_on_signal(path_);
  ::unlink(tmp.c_str());
  forget_on_signal(tmp);
  if (linked == 0) return fd;
  ::close(fd);
  if (err == EEXIST) return -1;
  if (err != EPERM && err != EOPNOTSUPP && err != ENOSYS)
    fail_runtime(path_ + ": cannot create the output directory's lock file: " + std::strerror(err));
  // A filesystem without hard links: made under its name (a signal in the
  // moment before it is registered leaves it, and a lock file left by a
  // dead process never blocks).
  const int direct =
      ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (direct < 0 && errno == EEXIST) return -1;
  if (direct < 0 || ::flock(direct, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (direct >= 0) ::close(direct);
    fail_runtime(path_ + ": cannot create the output directory's lock file: " + std::strerror(e));
  }
  struct stat made {};
  if (::fstat(direct, &made) == 0)
    remove_on_signal(path_, static_cast<unsigned long long>(made.st_dev),
                     static_cast<unsigned long long>(made.st_ino));
  write_pid(direct);
  return direct;
}

DirLock::~DirLock() {
  if (fd_ < 0) return;
  // Unlinked while still held: a process that opened it meanwhile finds the
  // inode gone from the directory after its flock and opens the new file.
  // The handler removes the name only while it is this file's, so a signal
  // between the two steps cannot remove a file another process made since.
  ::unlink(path_.c_str());
  forget_on_signal(path_);
  ::close(fd_);
  if (created_dir_) ::rmdir(dir_.c_str());  // only when empty
}

}  // namespace mha
