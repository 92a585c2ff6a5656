// The progress bar on stderr of the command-line tools.
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "verifier/cli_util.h"

namespace ptd::cli {

namespace {

std::string Amount(uint64_t n, ProgressBar::Unit unit) {
  if (unit == ProgressBar::kItems) return absl::StrCat(n);
  if (n >= (uint64_t{1} << 30)) return absl::StrFormat("%.2f GiB", n / 1073741824.0);
  if (n >= (uint64_t{1} << 20)) return absl::StrFormat("%.1f MiB", n / 1048576.0);
  return absl::StrFormat("%.0f KiB", n / 1024.0);
}

int TerminalColumns() {
  struct winsize ws {};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

}  // namespace

void ProgressBar::Start(std::string phase, Unit unit) {
  Erase();
  // PTD_PROGRESS_DELAY_MS: show the bar after this long (default 500), and
  // redraw at most every min(delay, 100) ms; 0 draws every update (tests).
  if (const char* env = std::getenv("PTD_PROGRESS_DELAY_MS"); env != nullptr) {
    int ms = 0;
    if (absl::SimpleAtoi(env, &ms) && ms >= 0) delay_ms_ = ms;
  }
  phase_ = std::move(phase);
  unit_ = unit;
  start_ = last_ = std::chrono::steady_clock::now();
}

std::string ProgressBar::Line(uint64_t done, uint64_t total, double seconds, int columns) const {
  const double rate = seconds > 0 ? done / seconds : 0;
  const std::string eta = rate > 0 && total >= done
                              ? absl::StrFormat("ETA %.0f s", (total - done) / rate)
                              : std::string("ETA -");
  const int pct = total ? static_cast<int>(100.0 * done / total) : 100;
  const std::string text =
      absl::StrFormat(" %3d%% %s/%s, %s/s, %s", pct, Amount(done, unit_), Amount(total, unit_),
                      Amount(static_cast<uint64_t>(rate), unit_), eta);
  std::string line = phase_;
  const int room = columns - 1 - static_cast<int>(phase_.size() + text.size()) - 3;
  if (room >= 10) {
    const int width = std::min(room, 40);
    const int filled = total ? static_cast<int>(width * std::min(done, total) / total) : width;
    absl::StrAppend(&line, " [", std::string(filled, '#'), std::string(width - filled, ' '), "]");
  }
  absl::StrAppend(&line, text);
  if (static_cast<int>(line.size()) > columns - 1) line.resize(std::max(columns - 1, 0));
  return line;
}

bool ProgressBar::Update(uint64_t done, uint64_t total) {
  if (done >= total) {
    Erase();
    return true;
  }
  const auto now = std::chrono::steady_clock::now();
  if (now - start_ < std::chrono::milliseconds(delay_ms_) ||
      (shown_ && now - last_ < std::chrono::milliseconds(std::min(delay_ms_, 100)))) {
    return true;
  }
  last_ = now;
  const double s = std::chrono::duration<double>(now - start_).count();
  std::fprintf(stderr, "\r\033[K%s", Line(done, total, s, TerminalColumns()).c_str());
  std::fflush(stderr);
  shown_ = true;
  return true;
}

void ProgressBar::Erase() {
  if (!shown_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace ptd::cli
