// A plain main() for the fuzz targets, so that the committed corpora can be
// replayed by any compiler (CI builds fuzz_*_replay with GCC) without
// libFuzzer:
//
//   fuzz_npy_replay DIR_OR_FILE...
//
// runs LLVMFuzzerTestOneInput once on every regular file under the given
// directories (recursively, in sorted order) and on every file named directly.
// Fails (non-zero exit) on no inputs at all, an unreadable input, or a target
// that does not return 0; a crash, an abort from a failed invariant or an
// uncaught exception names the input it happened on. Without AddressSanitizer,
// a single operator new of more than MHA_FUZZ_MALLOC_LIMIT_MB (default 2048,
// libFuzzer's default -malloc_limit_mb with -rss_limit_mb=2048) aborts too,
// so a header that makes a reader allocate hugely fails here as it would
// under the fuzzer.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <string>
#include <typeinfo>
#include <vector>

#include <cxxabi.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MHA_REPLAY_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define MHA_REPLAY_ASAN 1
#endif
#ifdef MHA_REPLAY_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace {

// The input being run, for the crash handlers (async-signal-safe to read).
char g_current[4096] = "(none)";

void write_stderr(const char* s) {
  ssize_t unused = write(STDERR_FILENO, s, std::strlen(s));
  (void)unused;
}

void on_fatal_signal(int sig) {
  write_stderr("\nfuzz replay: fatal signal ");
  write_stderr(sig == SIGSEGV   ? "SIGSEGV"
               : sig == SIGABRT ? "SIGABRT"
               : sig == SIGFPE  ? "SIGFPE"
               : sig == SIGBUS  ? "SIGBUS"
               : sig == SIGILL  ? "SIGILL"
                                : "?");
  write_stderr(" while running input: ");
  write_stderr(g_current);
  write_stderr("\n");
  raise(sig);  // SA_RESETHAND restored the default action
}

[[maybe_unused]] void on_death() {
  write_stderr("\nfuzz replay: sanitizer error while running input: ");
  write_stderr(g_current);
  write_stderr("\n");
}

// On an alternate stack, so that a stack overflow is reported too.
void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
#ifdef MHA_REPLAY_ASAN
  // ASan reports SEGV (stack overflows included), BUS, FPE and ILL itself,
  // better than we could, on its own alternate stack; it just has to name
  // the input too.
  __sanitizer_set_death_callback(+[] { on_death(); });
  sigaction(SIGABRT, &sa, nullptr);
#else
  static std::vector<char> alt_stack(1 << 16);
  stack_t ss{};
  ss.ss_sp = alt_stack.data();
  ss.ss_size = alt_stack.size();
  sigaltstack(&ss, nullptr);
  for (int sig : {SIGSEGV, SIGABRT, SIGFPE, SIGBUS, SIGILL}) sigaction(sig, &sa, nullptr);
#endif
}

void on_terminate() {
  std::fprintf(stderr, "\nfuzz replay: uncaught exception while running input: %s\n", g_current);
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      int status = 0;
      char* type = abi::__cxa_demangle(typeid(x).name(), nullptr, nullptr, &status);
      std::fprintf(stderr, "  %s: %s\n", type ? type : typeid(x).name(), x.what());
      std::free(type);
    } catch (...) {
      std::fprintf(stderr, "  (not a std::exception)\n");
    }
  }
  std::abort();
}

bool collect(const std::filesystem::path& arg, std::vector<std::filesystem::path>& files) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(arg, ec)) {
    files.push_back(arg);
    return true;
  }
  if (!std::filesystem::is_directory(arg, ec)) {
    std::fprintf(stderr, "fuzz replay: %s: not a file or directory\n", arg.c_str());
    return false;
  }
  std::vector<std::filesystem::path> found;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(arg, ec))
    if (entry.is_regular_file()) found.push_back(entry.path());
  if (ec) {
    std::fprintf(stderr, "fuzz replay: %s: %s\n", arg.c_str(), ec.message().c_str());
    return false;
  }
  std::sort(found.begin(), found.end());
  files.insert(files.end(), found.begin(), found.end());
  return true;
}

}  // namespace

#ifndef MHA_REPLAY_ASAN
// Without ASan nothing else bounds a single allocation; libFuzzer's
// -malloc_limit_mb does under the fuzzer.
namespace {
std::size_t malloc_limit() {
  static const std::size_t limit = [] {
    const char* env = std::getenv("MHA_FUZZ_MALLOC_LIMIT_MB");
    const unsigned long long mb = env && *env ? std::strtoull(env, nullptr, 10) : 2048;
    return static_cast<std::size_t>(mb) << 20;
  }();
  return limit;
}

void* checked_alloc(std::size_t size, std::size_t align) {
  if (size > malloc_limit()) {
    char msg[128];
    std::snprintf(msg, sizeof msg, "\nfuzz replay: operator new of %zu bytes exceeds the limit\n",
                  size);
    write_stderr(msg);
    std::abort();  // the SIGABRT handler names the input
  }
  void* p =
      align <= alignof(std::max_align_t)
          ? std::malloc(size ? size : 1)
          : std::aligned_alloc(align, (std::max<std::size_t>(size, 1) + align - 1) / align * align);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

// libstdc++'s operator delete (all forms) calls free(), which matches.
void* operator new(std::size_t size) {
  return checked_alloc(size, 0);
}
void* operator new[](std::size_t size) {
  return checked_alloc(size, 0);
}
void* operator new(std::size_t size, std::align_val_t al) {
  return checked_alloc(size, static_cast<std::size_t>(al));
}
void* operator new[](std::size_t size, std::align_val_t al) {
  return checked_alloc(size, static_cast<std::size_t>(al));
}
#else
// Under ASan, its allocator enforces the same limit.
extern "C" const char* __asan_default_options() {
  return "max_allocation_size_mb=2048:allocator_may_return_null=0";
}
#endif

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  std::set_terminate(on_terminate);
  install_signal_handlers();

  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i)
    if (!collect(argv[i], files)) return 1;
  if (files.empty()) {
    std::fprintf(stderr, "fuzz replay: no inputs found\n");
    return 1;
  }

  const auto start = std::chrono::steady_clock::now();
  std::size_t total_bytes = 0;
  for (const auto& file : files) {
    std::snprintf(g_current, sizeof g_current, "%s", file.c_str());
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) {
      std::fprintf(stderr, "fuzz replay: %s: cannot read\n", file.c_str());
      return 1;
    }
    total_bytes += bytes.size();
    const int rc =
        LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    if (rc != 0) {
      std::fprintf(stderr, "fuzz replay: %s: target returned %d\n", file.c_str(), rc);
      return 1;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("fuzz replay: %zu inputs, %zu bytes, %.2f s, all passed\n", files.size(), total_bytes,
              seconds);
  return 0;
}
