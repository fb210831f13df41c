#include "run_progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "progress.hpp"

namespace mha::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::chrono::milliseconds show_after() {
  if (const char* env = std::getenv("MHA_PROGRESS_AFTER_MS")) {
    char* end = nullptr;
    const long ms = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && ms >= 0) return std::chrono::milliseconds(ms);
  }
  return std::chrono::milliseconds(2000);
}

}  // namespace

RunProgressLine::RunProgressLine(const StageProgress& progress, bool enabled)
    : progress_(progress), start_(Clock::now()), after_(show_after()) {
  if (enabled) thread_ = std::thread([this] { loop(); });
}

RunProgressLine::~RunProgressLine() {
  stop();
}

void RunProgressLine::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  clear_for_message();
}

void RunProgressLine::clear_for_message() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!drawn_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

std::string RunProgressLine::format(const char* stage, std::uint64_t done, std::uint64_t total,
                                    double seconds, double stage_seconds) {
  std::string line = std::string("mha run: ") + stage;
  if (total > 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "  %llu/%llu blocks (%d%%)",
                  static_cast<unsigned long long>(done), static_cast<unsigned long long>(total),
                  static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total)));
    line += buf;
  }
  line += "  " + format_duration(seconds) + " elapsed";
  if (total > 0 && done > 0 && done <= total)
    line += "  ETA " + format_duration(stage_seconds / static_cast<double>(done) *
                                       static_cast<double>(total - done));
  return line;
}

void RunProgressLine::loop() {
  const char* stage = nullptr;
  Clock::time_point stage_start = start_;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(200));
    if (stop_) break;
    const Clock::time_point now = Clock::now();
    const char* s = progress_.stage.load(std::memory_order_acquire);
    if (s != stage) {
      stage = s;
      stage_start = now;
    }
    if (now - start_ < after_ || std::strcmp(s, "done") == 0) continue;
    const std::string line =
        format(s, progress_.done.load(std::memory_order_relaxed),
               progress_.total.load(std::memory_order_relaxed), seconds_between(start_, now),
               seconds_between(stage_start, now));
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }
}

}  // namespace mha::cli
