// Progress: the text of its lines, rates and time left on an injected clock, terminal and plain-line output.
#include "runtime/progress/progress.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "tests/testing.h"

namespace tandem {
namespace {

// A clock the test sets by hand and a sink that keeps every write; no ticker thread, so nothing is timed.
struct Screen {
  double t = 0;
  std::vector<std::string> writes;

  ProgressSettings settings(bool terminal) {
    ProgressSettings s;
    s.terminal = terminal;
    s.ticker = false;
    s.announce_after = 0;
    s.clock = [this] { return t; };
    s.write = [this](const std::string& text) { writes.push_back(text); };
    return s;
  }

  // Plain output that announces its estimate after the first three steps, with no periodic line in between.
  ProgressSettings announcing() {
    ProgressSettings s = settings(false);
    s.announce_after = 3;
    s.plain_every_s = 1e9;
    return s;
  }

  // One step of p ending at each of the given times.
  void steps_ending_at(Progress& p, std::initializer_list<double> times) {
    for (double end : times) {
      t = end;
      p.step();
    }
  }
};

ProgressTask task(int64_t total, int64_t items, const std::string& label = "train") {
  ProgressTask k;
  k.label = label;
  k.total = total;
  k.items_per_step = items;
  return k;
}

TEST(ProgressFormat, DurationsReadAsMinutesAndSecondsOrHours) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(59.4), "0:59");
  EXPECT_EQ(format_duration(59.6), "1:00");
  EXPECT_EQ(format_duration(61), "1:01");
  EXPECT_EQ(format_duration(3599.4), "59:59");
  EXPECT_EQ(format_duration(3600), "1:00:00");
  EXPECT_EQ(format_duration(3725), "1:02:05");
  EXPECT_EQ(format_duration(100 * 3600 + 7), "100:00:07");
  EXPECT_EQ(format_duration(-5), "0:00");
  EXPECT_EQ(format_duration(std::nan("")), "0:00");
}

TEST(ProgressRates, BeforeTheFirstStepItSaysItIsWarmingUp) {
  Screen s;
  Progress p(task(100, 8), s.settings(false));
  EXPECT_EQ(p.status(), "train: step 0/100 (0.0%), warming up, 0:00 elapsed");
  s.t = 3;
  EXPECT_EQ(p.status(), "train: step 0/100 (0.0%), warming up, 0:03 elapsed");
}

TEST(ProgressRates, TheWarmUpStepIsLeftOutOnceASecondStepEnded) {
  Screen s;
  Progress p(task(100, 8), s.settings(false));
  s.t = 10;
  p.step();
  // One step says nothing of the rate: it is the warm-up (no rate, no time left).
  EXPECT_EQ(p.status(), "train: step 1/100 (1.0%), warming up (first step 10.00 s), 0:10 elapsed");
  s.t = 11;
  EXPECT_EQ(p.status(), "train: step 1/100 (1.0%), warming up (first step 10.00 s), 0:11 elapsed");
  s.steps_ending_at(p, {12.0, 14.0, 16.0, 18.0});
  // Steps 2-5: 4 steps in 8 s, 0.5 steps/s; 95 left take 190 s.
  EXPECT_EQ(p.status(), "train: step 5/100 (5.0%), 4.0 img/s, 2.00 s/step, 0:18 elapsed, ~3:10 left");
  s.t = 19;  // a second into step 6: a second less to go
  EXPECT_EQ(p.status(), "train: step 5/100 (5.0%), 4.0 img/s, 2.00 s/step, 0:19 elapsed, ~3:09 left");
}

TEST(ProgressRates, FastStepsReadAsStepsPerSecondInTheirUnit) {
  Screen s;
  ProgressTask k = task(1000, 0, "pack");
  k.unit = "record";
  Progress p(k, s.settings(false));
  s.t = 1;
  p.step();
  for (int i = 1; i <= 9; ++i) {
    s.t = 1 + 0.1 * i;
    p.step();
  }
  // 9 records in 0.9 s after the first: 10 per second, 990 left take 99 s.
  EXPECT_EQ(p.status(), "pack: record 10/1000 (1.0%), 10.0 records/s, 0:02 elapsed, ~1:39 left");
}

TEST(ProgressRates, UnitsEndingInAHissTakeEs) {
  Screen s;
  ProgressTask k = task(100, 0, "test");
  k.unit = "batch";
  Progress p(k, s.settings(false));
  s.t = 1;
  p.step();
  s.t = 1.5;
  p.step(2);
  EXPECT_EQ(p.status(), "test: batch 3/100 (3.0%), 4.0 batches/s, 0:02 elapsed, ~0:24 left");
}

TEST(ProgressRates, AFirstCallOfManyStepsIsTheWarmUpAsAWhole) {
  Screen s;
  ProgressTask k = task(300, 64, "cdp-v1");
  k.unit = "round";
  Progress p(k, s.settings(false));
  s.t = 100;
  p.step(50);
  EXPECT_EQ(p.status(), "cdp-v1: round 50/300 (16.7%), warming up (first 50 rounds 100.00 s), 1:40 elapsed");
  s.t = 150;
  p.step(50);
  // The second call: 50 rounds in 50 s; 200 left take 200 s.
  EXPECT_EQ(p.status(), "cdp-v1: round 100/300 (33.3%), 64.0 img/s, 1.00 s/round, 2:30 elapsed, ~3:20 left");
}

TEST(ProgressRates, RandomStepTimesGiveTheMeanRateAfterTheFirst) {
  std::mt19937_64 rng(testing::fresh_seed());
  std::uniform_real_distribution<double> seconds(0.05, 5.0);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 30);
    const int64_t total = n + 1 + static_cast<int64_t>(rng() % 500), items = 1 + static_cast<int64_t>(rng() % 256);
    Screen s;
    Progress p(task(total, items), s.settings(false));
    double first_end = 0;
    for (int i = 0; i < n; ++i) {
      s.t += seconds(rng);
      if (i == 0) first_end = s.t;
      p.step();
    }
    const double rate = (n - 1) / (s.t - first_end);
    char images[64];
    std::snprintf(images, sizeof images, ", %.1f img/s, ", rate * static_cast<double>(items));
    const std::string line = p.status(), left = ", ~" + format_duration((total - n) / rate) + " left";
    EXPECT_NE(line.find(images), std::string::npos) << line << " (want" << images << ")";
    EXPECT_EQ(line.substr(line.size() - left.size()), left) << line;
  }
}

TEST(ProgressAnnounce, TheWholeIsEstimatedOnceAfterTheFirstSteps) {
  Screen s;
  Progress p(task(100, 8), s.announcing());
  s.steps_ending_at(p, {10.0, 12.0, 14.0});
  // 14 s so far, then 97 steps at 0.5 steps/s: 208 s.
  ASSERT_EQ(s.writes.size(), 1u);
  EXPECT_EQ(s.writes[0], "train: about 3:28 for 100 steps (4.0 img/s, 2.00 s/step)\n");
  s.t = 16;
  p.step();
  EXPECT_EQ(s.writes.size(), 1u);
}

TEST(ProgressAnnounce, AResumedRunEstimatesItsOwnSteps) {
  Screen s;
  ProgressTask k = task(100, 8);
  k.done = 40;
  Progress p(k, s.announcing());
  EXPECT_EQ(p.status(), "train: step 40/100 (40.0%), warming up, 0:00 elapsed");
  s.steps_ending_at(p, {10.0, 12.0, 14.0});
  // This run's 60 steps: 14 s, then 57 at 0.5 steps/s.
  ASSERT_EQ(s.writes.size(), 1u);
  EXPECT_EQ(s.writes[0], "train: about 2:08 for 60 steps (4.0 img/s, 2.00 s/step)\n");
}

TEST(ProgressAnnounce, FastStepsWaitForTheTimeToo) {
  Screen s;
  ProgressSettings settings = s.announcing();
  settings.announce_after_s = 2;
  Progress p(task(1000, 0), settings);
  for (int i = 1; i <= 19; ++i) {
    s.t = 0.1 * i;
    p.step();
  }
  EXPECT_TRUE(s.writes.empty()) << s.writes[0];
  s.t = 2;
  p.step();
  // 19 steps in 1.9 s after the first: 10 per second; 2 s, then 980 steps.
  ASSERT_EQ(s.writes.size(), 1u);
  EXPECT_EQ(s.writes[0], "train: about 1:40 for 1000 steps (10.0 steps/s)\n");
}

TEST(ProgressAnnounce, ARunNoLongerThanTheFirstStepsSaysNothing) {
  Screen s;
  Progress p(task(3, 8), s.announcing());
  s.steps_ending_at(p, {1.0, 2.0, 3.0});
  EXPECT_TRUE(s.writes.empty());
}

TEST(ProgressTerminal, OneLineRewrittenInPlaceAboutEverySecond) {
  Screen s;
  {
    Progress p(task(100, 8), s.settings(true));
    // At once, so that a slow first step still shows a sign of life.
    ASSERT_EQ(s.writes.size(), 1u);
    EXPECT_EQ(s.writes[0], "\rtrain: step 0/100 (0.0%), warming up, 0:00 elapsed\033[K");
    s.t = 0.5;
    p.poll();
    EXPECT_EQ(s.writes.size(), 1u);
    s.t = 1.0;
    p.poll();
    ASSERT_EQ(s.writes.size(), 2u);
    EXPECT_EQ(s.writes[1], "\rtrain: step 0/100 (0.0%), warming up, 0:01 elapsed\033[K");
    s.t = 1.2;
    p.step();  // not yet due
    EXPECT_EQ(s.writes.size(), 2u);
    s.t = 2.0;
    p.poll();
    ASSERT_EQ(s.writes.size(), 3u);
    EXPECT_EQ(s.writes[2].rfind("\rtrain: step 1/100 (1.0%), ", 0), 0u) << s.writes[2];
    // The caller's own lines: the live line is erased, they are written, and it comes back below them.
    s.t = 2.1;
    p.print_above([&] { s.writes.push_back("epoch 1 step 1/100\n"); });
    ASSERT_EQ(s.writes.size(), 6u);
    EXPECT_EQ(s.writes[3], "\r\033[K");
    EXPECT_EQ(s.writes[4], "epoch 1 step 1/100\n");
    EXPECT_EQ(s.writes[5].rfind("\rtrain: step 1/100 (1.0%), ", 0), 0u) << s.writes[5];
    s.t = 3;
    p.poll();  // drawn at 2.1: not due yet
    EXPECT_EQ(s.writes.size(), 6u);
  }
  // The line is erased when the display ends; the live line never ends a line.
  EXPECT_EQ(s.writes.back(), "\r\033[K");
  for (const std::string& w : s.writes) {
    if (w[0] == '\r') {
      EXPECT_EQ(w.find('\n'), std::string::npos) << w;
    }
  }
}

TEST(ProgressTerminal, TheEstimateGoesAboveTheLiveLine) {
  Screen s;
  ProgressSettings settings = s.settings(true);
  settings.announce_after = 3;
  Progress p(task(100, 8), settings);
  s.steps_ending_at(p, {10.0, 12.0, 14.0});
  const size_t n = s.writes.size();
  ASSERT_GE(n, 3u);
  EXPECT_EQ(s.writes[n - 3], "\r\033[K");
  EXPECT_EQ(s.writes[n - 2], "train: about 3:28 for 100 steps (4.0 img/s, 2.00 s/step)\n");
  EXPECT_EQ(s.writes[n - 1], "\rtrain: step 3/100 (3.0%), 4.0 img/s, 2.00 s/step, 0:14 elapsed, ~3:14 left\033[K");
}

TEST(ProgressTerminal, TheLineIsCutToTheWidth) {
  Screen s;
  ProgressSettings settings = s.settings(true);
  settings.columns = 20;
  Progress p(task(100, 8), settings);
  ASSERT_EQ(s.writes.size(), 1u);
  // 19 columns: a line filling all 20 would wrap and "\r" would not bring it back.
  EXPECT_EQ(s.writes[0], "\rtrain: step 0/100 (\033[K");
}

TEST(ProgressPlain, APlainLineEveryPeriodAndNoControlCharacters) {
  Screen s;
  {
    ProgressSettings settings = s.settings(false);
    settings.plain_every_s = 20;
    Progress p(task(100, 8), settings);
    EXPECT_TRUE(s.writes.empty());
    s.t = 19.9;
    p.poll();
    EXPECT_TRUE(s.writes.empty());
    s.t = 20;
    p.poll();
    ASSERT_EQ(s.writes.size(), 1u);
    EXPECT_EQ(s.writes[0], "train: step 0/100 (0.0%), warming up, 0:20 elapsed\n");
    s.t = 25;
    p.step();
    p.print_above([&] { s.writes.push_back("own line\n"); });
    ASSERT_EQ(s.writes.size(), 2u);
    EXPECT_EQ(s.writes[1], "own line\n");
    s.t = 40;
    p.poll();
    ASSERT_EQ(s.writes.size(), 3u);
    EXPECT_EQ(s.writes[2], "train: step 1/100 (1.0%), warming up (first step 25.00 s), 0:40 elapsed\n");
    s.t = 27;
    p.step();
    s.t = 60;
    p.poll();
    ASSERT_EQ(s.writes.size(), 4u);
    // One step of 2 s after the warm-up: 98 left take 196 s, 33 s of which have passed.
    EXPECT_EQ(s.writes[3], "train: step 2/100 (2.0%), 4.0 img/s, 2.00 s/step, 1:00 elapsed, ~2:43 left\n");
  }
  EXPECT_EQ(s.writes.size(), 4u);
  for (const std::string& w : s.writes) {
    EXPECT_EQ(w.find('\r'), std::string::npos) << w;
    EXPECT_EQ(w.find('\033'), std::string::npos) << w;
  }
}

TEST(ProgressSettings, OffWritesNothing) {
  Screen s;
  {
    ProgressSettings settings = s.settings(true);
    settings.enabled = false;
    settings.announce_after = 1;
    Progress p(task(10, 8), settings);
    for (int i = 1; i <= 5; ++i) {
      s.t = i * 30.0;
      p.step();
      p.poll();
    }
    p.print_above([] {});
  }
  EXPECT_TRUE(s.writes.empty());
}

TEST(ProgressSettings, TandemProgressZeroTurnsTheDisplayOff) {
  const char* saved = std::getenv("TANDEM_PROGRESS");
  const std::string keep = saved ? saved : "";
  ::setenv("TANDEM_PROGRESS", "0", 1);
  EXPECT_FALSE(ProgressSettings::for_stderr().enabled);
  ::setenv("TANDEM_PROGRESS", "1", 1);
  EXPECT_TRUE(ProgressSettings::for_stderr().enabled);
  ::unsetenv("TANDEM_PROGRESS");
  EXPECT_TRUE(ProgressSettings::for_stderr().enabled);
  if (saved) ::setenv("TANDEM_PROGRESS", keep.c_str(), 1);
}

TEST(ProgressErrors, CountsOutsideTheTotalOrNegativeAreRefused) {
  Screen s;
  ProgressTask k = task(10, 8);
  k.done = 11;
  EXPECT_THROW(Progress(k, s.settings(false)), ValueError);
  k = task(10, -1);
  EXPECT_THROW(Progress(k, s.settings(false)), ValueError);
  Progress p(task(10, 8), s.settings(false));
  try {
    p.step(-1);
    ADD_FAILURE() << "step(-1) was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(e.message().find("a step count must be >= 0, got -1"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace tandem
