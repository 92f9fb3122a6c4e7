// expect_resume_repeats_run: a training run interrupted after one epoch and resumed against the straight run.
#include "tests/models/resume_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <vector>

namespace tandem {
namespace testing {
namespace {

std::vector<double> all_losses(const std::vector<train::EpochResult>& r) {
  std::vector<double> out;
  for (const auto& e : r) out.insert(out.end(), e.step_losses.begin(), e.step_losses.end());
  return out;
}

}  // namespace

void expect_resume_repeats_run(const train::TrainOptions& o, const std::string& checkpoint, size_t steps,
                               const std::function<void()>& after_first_epoch) {
  std::ostringstream log;
  const std::vector<double> straight = all_losses(train::Trainer(o, log).run());
  ASSERT_EQ(straight.size(), steps);

  train::TrainOptions part = o;
  part.checkpoint = checkpoint;
  part.stop_after = 1;
  std::vector<double> resumed = all_losses(train::Trainer(part, log).run());
  if (after_first_epoch) after_first_epoch();
  part.stop_after = 0;
  part.resume = checkpoint;
  part.checkpoint.clear();
  train::Trainer second(part, log);
  EXPECT_EQ(second.first_epoch(), 1);
  const std::vector<double> rest = all_losses(second.run());
  resumed.insert(resumed.end(), rest.begin(), rest.end());
  ASSERT_EQ(resumed.size(), straight.size());
  for (size_t i = 0; i < straight.size(); ++i) EXPECT_EQ(resumed[i], straight[i]) << "step " << i;
  for (double l : straight) EXPECT_TRUE(std::isfinite(l)) << "the run diverged: the comparison means nothing";
}

}  // namespace testing
}  // namespace tandem
