// The progress display: rates, time left, and the terminal and plain-line forms.
#include "runtime/progress/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/base/error.h"

namespace tandem {

namespace {

std::string plural(const std::string& unit) {
  const bool es =
      !unit.empty() &&
      (unit.back() == 's' || unit.back() == 'x' ||
       (unit.size() > 1 && unit.back() == 'h' && (unit[unit.size() - 2] == 'c' || unit[unit.size() - 2] == 's')));
  return unit + (es ? "es" : "s");
}

}  // namespace

ProgressSettings ProgressSettings::for_stderr() {
  ProgressSettings s;
  const char* env = std::getenv("TANDEM_PROGRESS");
  s.enabled = env == nullptr || std::strcmp(env, "0") != 0;
  const char* term = std::getenv("TERM");
  // A dumb terminal cannot erase a line: it gets the plain lines.
  s.terminal = ::isatty(STDERR_FILENO) == 1 && (term == nullptr || std::strcmp(term, "dumb") != 0);
  struct winsize ws;
  if (s.terminal && ::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0) s.columns = ws.ws_col;
  return s;
}

std::string format_duration(double seconds) {
  const long long total = std::isfinite(seconds) && seconds > 0 ? std::llround(seconds) : 0;
  const long long h = total / 3600, m = total / 60 % 60, sec = total % 60;
  char buf[48];
  if (h > 0)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", h, m, sec);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", m, sec);
  return buf;
}

Progress::Progress(ProgressTask task, ProgressSettings settings)
    : task_(std::move(task)), s_(std::move(settings)), done_(task_.done) {
  TD_CHECK(task_.total >= 0 && task_.done >= 0 && task_.done <= task_.total, "progress of '", task_.label,
           "': ", task_.done, " of ", task_.total, " steps done is not a count within the total");
  TD_CHECK(task_.items_per_step >= 0, "progress of '", task_.label, "': images per step must be >= 0, got ",
           task_.items_per_step);
  if (!s_.clock) {
    s_.clock = [] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    };
  }
  if (!s_.write) {
    s_.write = [](const std::string& text) {
      std::fputs(text.c_str(), stderr);
      std::fflush(stderr);
    };
  }
  start_ = last_shown_ = now();
  if (!s_.enabled) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    poll_locked();
  }
  if (s_.ticker) ticker_ = std::thread([this] { tick(); });
}

Progress::~Progress() {
  if (ticker_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    ticker_.join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  erase_locked();
}

double Progress::now() const { return s_.clock(); }

void Progress::step(int64_t n) {
  TD_CHECK(n >= 0, "progress of '", task_.label, "': a step count must be >= 0, got ", n);
  if (n == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  const double t = now();
  done_ += n;
  if (first_step_end_ < 0) {
    first_step_end_ = t;
    first_steps_ = n;
  }
  last_step_end_ = t;
  if (!s_.enabled) return;
  double rate = 0;
  const int64_t run_steps = done_ - task_.done, run_total = task_.total - task_.done;
  if (!announced_ && s_.announce_after > 0 && run_steps >= s_.announce_after && t - start_ >= s_.announce_after_s &&
      run_steps < run_total && rate_locked(&rate)) {
    announced_ = true;
    const double whole = (t - start_) + static_cast<double>(run_total - run_steps) / rate;
    erase_locked();
    s_.write(task_.label + ": about " + format_duration(whole) + " for " + std::to_string(run_total) + " " +
             plural(task_.unit) + " (" + rates_text(rate) + ")\n");
  }
  poll_locked();
}

void Progress::print_above(const std::function<void()>& print) {
  std::lock_guard<std::mutex> lock(mu_);
  erase_locked();
  print();
  poll_locked();
}

void Progress::poll() {
  std::lock_guard<std::mutex> lock(mu_);
  poll_locked();
}

std::string Progress::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_locked(now());
}

bool Progress::warming_up_locked() const { return last_step_end_ <= first_step_end_; }

bool Progress::rate_locked(double* steps_per_s) const {
  // The first step (warm-up) is left out: the rate is that of the steps after it.
  if (warming_up_locked()) return false;
  *steps_per_s = static_cast<double>(done_ - task_.done - first_steps_) / (last_step_end_ - first_step_end_);
  return true;
}

std::string Progress::rates_text(double steps_per_s) const {
  char buf[96];
  std::string text;
  if (task_.items_per_step > 0) {
    std::snprintf(buf, sizeof buf, "%.1f img/s, ", steps_per_s * static_cast<double>(task_.items_per_step));
    text += buf;
  }
  // Slow steps read better as seconds per step, fast ones as steps per second.
  if (steps_per_s <= 1)
    std::snprintf(buf, sizeof buf, "%.2f s/%s", 1 / steps_per_s, task_.unit.c_str());
  else
    std::snprintf(buf, sizeof buf, "%.1f %s/s", steps_per_s, plural(task_.unit).c_str());
  return text + buf;
}

std::string Progress::status_locked(double t) const {
  std::string line = task_.label + ": " + task_.unit + " " + std::to_string(done_) + "/" + std::to_string(task_.total);
  char buf[32];
  if (task_.total > 0) {
    std::snprintf(buf, sizeof buf, " (%.1f%%)", 100.0 * static_cast<double>(done_) / static_cast<double>(task_.total));
    line += buf;
  }
  double rate = 0;
  const bool known = rate_locked(&rate);
  if (known) {
    line += ", " + rates_text(rate);
  } else if (first_step_end_ < 0) {
    line += ", warming up";
  } else {
    const std::string first = first_steps_ == 1 ? task_.unit : std::to_string(first_steps_) + " " + plural(task_.unit);
    std::snprintf(buf, sizeof buf, " %.2f s)", first_step_end_ - start_);
    line += ", warming up (first " + first + buf;
  }
  line += ", " + format_duration(t - start_) + " elapsed";
  if (known && done_ < task_.total) {
    // Counted from the latest step's end, so that the time left goes down between slow steps.
    const double left = static_cast<double>(task_.total - done_) / rate - (t - last_step_end_);
    line += ", ~" + format_duration(left > 0 ? left : 0) + " left";
  }
  return line;
}

void Progress::poll_locked() {
  if (!s_.enabled) return;
  const double t = now();
  if (s_.terminal) {
    if (!drawn_ || t - last_shown_ >= s_.refresh_s) draw_locked(t);
  } else if (t - last_shown_ >= s_.plain_every_s) {
    s_.write(status_locked(t) + "\n");
    last_shown_ = t;
  }
}

void Progress::draw_locked(double t) {
  std::string line = status_locked(t);
  // One column short of the width: a line that fills it would wrap, and "\r" would not return to its start.
  if (s_.columns > 1 && line.size() > static_cast<size_t>(s_.columns - 1)) line.resize(s_.columns - 1);
  s_.write("\r" + line + "\033[K");
  drawn_ = true;
  last_shown_ = t;
}

void Progress::erase_locked() {
  if (!drawn_) return;
  s_.write("\r\033[K");
  drawn_ = false;
}

void Progress::tick() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_for(lock, std::chrono::milliseconds(500), [this] { return stop_; })) poll_locked();
}

}  // namespace tandem
