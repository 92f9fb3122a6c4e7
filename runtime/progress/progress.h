// Progress: the live progress display of long loops (step of total, images/s, elapsed, time left) on stderr.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/base/non_copyable.h"

namespace tandem {

// How and where a Progress shows itself. for_stderr() is what the programs use; tests inject a clock and a
// sink and drive poll() themselves.
struct ProgressSettings {
  bool enabled = true;
  // A terminal: one line rewritten in place ("\r", then erase to the end of the line). Otherwise plain lines.
  bool terminal = false;
  int columns = 0;              // terminal width the line is cut to (0: unknown, not cut)
  double refresh_s = 1.0;       // terminal: the line is redrawn this often
  double plain_every_s = 20.0;  // not a terminal: a plain line this often
  // After this many steps, and this many seconds (a rate over a few fast steps says little), the estimate
  // of the whole is said once, on a line of its own.
  int64_t announce_after = 3;
  double announce_after_s = 2.0;
  // A thread calls poll() twice a second, so that elapsed and time left move during slow steps.
  bool ticker = true;
  std::function<double()> clock;                  // seconds from any origin; empty: a steady clock
  std::function<void(const std::string&)> write;  // where the text goes; empty: stderr (unbuffered)

  // stderr: a terminal or not (isatty) and its width; TANDEM_PROGRESS=0 turns the display off.
  static ProgressSettings for_stderr();
};

// What is being counted.
struct ProgressTask {
  std::string label;           // prefixes every line: "epoch 2/10", "TR+DPU", "packing"
  int64_t total = 0;           // steps of the whole
  int64_t done = 0;            // steps done before this run (a resumed run): not counted in the rates
  int64_t items_per_step = 0;  // images per step, for images/s (0: no images/s)
  std::string unit = "step";   // what a step is called ("round", "record")
};

// "m:ss" under an hour, else "h:mm:ss" (rounded to the second; negative counts as 0).
std::string format_duration(double seconds);

// Counts the steps of a task and shows, refreshed every second or so, e.g.
//   epoch 1/1: step 12/469 (2.6%), 26.7 img/s, 4.80 s/step, 0:58 elapsed, ~36:40 left
// The first step of the run (warm-up: allocation, caches, cuDNN's algorithm choices) is left out of the rates:
// until a second step has ended the line says so instead of a rate and a time left,
//   epoch 1/1: step 1/469 (0.2%), warming up (first step 6.62 s), 0:07 elapsed
// Thread-safe: step() may come from any thread.
class Progress : NonCopyable {
 public:
  explicit Progress(ProgressTask task, ProgressSettings settings = ProgressSettings::for_stderr());
  ~Progress();  // erases the live line

  void step(int64_t n = 1);  // n more steps done
  // Runs `print` (which writes the caller's own lines and flushes them) with the live line erased, then
  // draws it again below them. `print` must not call this Progress.
  void print_above(const std::function<void()>& print);
  void poll();                 // shows the line if it is due (the ticker's call)
  std::string status() const;  // the line as it reads now, without control characters

 private:
  double now() const;
  std::string status_locked(double t) const;
  bool warming_up_locked() const;  // no step after the first has ended
  bool rate_locked(double* steps_per_s) const;
  std::string rates_text(double steps_per_s) const;
  void poll_locked();
  void draw_locked(double t);
  void erase_locked();
  void tick();

  ProgressTask task_;
  ProgressSettings s_;
  mutable std::mutex mu_;
  int64_t done_;
  double start_ = 0;            // when the task began
  double first_step_end_ = -1;  // when this run's first step() ended
  int64_t first_steps_ = 0;     // the steps it counted (the warm-up, left out of the rate)
  double last_step_end_ = -1;   // when its latest step ended
  double last_shown_ = 0;       // when a line was last drawn or printed
  bool drawn_ = false;          // a live line is on the terminal
  bool announced_ = false;
  bool stop_ = false;
  std::condition_variable wake_;
  std::thread ticker_;
};

}  // namespace tandem
