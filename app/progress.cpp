#include "progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>

#include <spdlog/spdlog.h>

namespace mha::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::size_t terminal_width() {
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
  return 100;
}

}  // namespace

std::string format_duration(double seconds) {
  const long s = seconds < 0 ? 0 : static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%02ld:%02ld", s / 60, s % 60);
  return buf;
}

Progress::Progress(std::size_t total, std::size_t skipped)
    : tty_(::isatty(STDERR_FILENO) == 1),
      total_(total),
      skipped_(skipped),
      start_(Clock::now()),
      last_draw_(Clock::now()) {}

Progress::~Progress() {
  clear();
}

void Progress::started(const std::string& name) {
  current_ = name;
  if (tty_) draw();
}

void Progress::finished(const std::string& name, bool ok, const std::string& detail) {
  ++done_;
  if (!ok) ++failed_;
  const std::string line =
      "[" + std::to_string(done_) + "/" + std::to_string(total_) + "] " + name + ": " + detail;
  if (tty_) {
    // Successes only move the bar; failures stay on screen above it.
    if (!ok) message(line);
    draw();
  } else if (ok) {
    spdlog::info("{}", line);
  } else {
    spdlog::warn("{}", line);
  }
}

void Progress::message(const std::string& text) {
  clear();
  spdlog::warn("{}", text);
  if (tty_ && drawn_) draw();
}

void Progress::tick() {
  if (tty_ && seconds_since(last_draw_) >= 0.5) draw();
}

void Progress::done() {
  clear();
  tty_ = false;
}

std::string Progress::eta() const {
  if (done_ == 0) return "--:--";
  const double per_run = seconds_since(start_) / static_cast<double>(done_);
  return format_duration(per_run * static_cast<double>(total_ - done_));
}

void Progress::draw() {
  const std::size_t width = 20;
  const std::size_t filled = total_ ? done_ * width / total_ : width;
  std::string line = "[" + std::string(filled, '#') + std::string(width - filled, '-') + "] " +
                     std::to_string(done_) + "/" + std::to_string(total_);
  if (skipped_) line += " (+" + std::to_string(skipped_) + " done before)";
  if (failed_) line += "  " + std::to_string(failed_) + " failed";
  line += "  " + format_duration(seconds_since(start_)) + " elapsed  ETA " + eta();
  if (!current_.empty() && done_ < total_) line += "  " + current_;
  const std::size_t cols = terminal_width() - 1;
  if (line.size() > cols) line.resize(cols);
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
  last_draw_ = Clock::now();
}

void Progress::clear() {
  if (!tty_ || !drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

}  // namespace mha::cli
