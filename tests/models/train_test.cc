// tools:train's trainer on the CPU: a ResNet-18 learns separable synthetic data, a run interrupted and resumed
// from its checkpoint reproduces the uninterrupted run's losses bit for bit, and the epoch's rate leaves out a
// slow first step.
#include <gtest/gtest.h>

#include <sstream>
#include <vector>

#include "runtime/base/error.h"
#include "tests/models/resume_check.h"
#include "tests/testing.h"
#include "tools/train/trainer.h"

namespace tandem {
namespace train {
namespace {

TEST(Train, ResNet18LearnsSyntheticData) {
  TrainOptions o;
  o.device = "cpu";  // the CPU path (cuda_test trains on a GPU, simulated or real)
  o.model = "resnet18:cifar,width=8";
  o.dataset = "synthetic:n=384,h=12,w=12,classes=4,noise=96";
  o.epochs = 1;
  o.batch = 16;
  o.lr = 0.05;
  o.seed = tandem::testing::fresh_seed() % 1000;
  o.log_every = 0;
  o.workers = 1;
  o.device = "cpu";  // the best device present would be the simulated GPU in that build
  std::ostringstream log;
  Trainer t(o, log);
  EXPECT_NE(log.str().find("176012 parameters"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("memory plan: parameters+buffers"), std::string::npos) << log.str();
  auto r = t.run();
  ASSERT_EQ(r.size(), 1u);
  const auto& l = r[0].step_losses;
  ASSERT_EQ(l.size(), 24u);
  double first = (l[0] + l[1] + l[2]) / 3, last = (l[21] + l[22] + l[23]) / 3;
  EXPECT_LT(last, 0.3 * first) << "the loss should fall: first steps " << first << ", last steps " << last;
  EXPECT_GT(r[0].test_accuracy, 0.9);
  EXPECT_GT(r[0].train_accuracy, 0.5);
  EXPECT_LE(r[0].train_accuracy, 1.0);
  EXPECT_NE(log.str().find("test acc"), std::string::npos);
}

TEST(Train, ResumeReproducesTheUninterruptedRunBitwise) {
  TrainOptions o;
  o.device = "cpu";
  // Dropout (MobileNetV2's classifier), augmentation, momentum and a warm-up + cosine schedule: every piece of
  // state a checkpoint must carry.
  o.model = "mobilenet_v2:cifar,width_mult=0.25";
  o.dataset = "synthetic:n=96,h=8,w=8,classes=3";
  o.transform = "random-crop:pad=2,flip";
  o.epochs = 3;
  o.batch = 16;
  o.lr = 0.05;
  o.schedule = "warmup:0.5+cosine";
  o.seed = 11;
  o.device = "cpu";
  o.log_every = 0;
  o.evaluate = false;
  const std::string checkpoint = ::testing::TempDir() + "train_resume.safetensors";
  ASSERT_NO_FATAL_FAILURE(tandem::testing::expect_resume_repeats_run(o, checkpoint, 18));

  // Resuming with other settings is refused.
  std::ostringstream log;
  TrainOptions resume = o;
  resume.resume = checkpoint;
  TrainOptions wrong = resume;
  wrong.optimizer = "adam";
  EXPECT_THROW(Trainer(wrong, log), ValueError);
  wrong = resume;
  wrong.batch = 8;
  EXPECT_THROW(Trainer(wrong, log), ValueError);
}

TEST(Train, ADivergingLossIsAClearError) {
  TrainOptions o;
  o.model = "resnet18:cifar,width=4";
  o.dataset = "synthetic:n=128,h=8,w=8,classes=3";
  o.batch = 16;
  o.lr = 1e30;
  o.momentum = 0;
  o.seed = tandem::testing::fresh_seed() % 1000;
  o.device = "cpu";
  o.log_every = 3;
  o.evaluate = false;
  std::ostringstream log;
  try {
    Trainer(o, log).run();
    ADD_FAILURE() << "a learning rate of 1e30 trained without error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("the loss became"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("learning rate too high"), std::string::npos) << e.what();
  }
}

// A slow first step (the warm-up a GPU run pays for cuDNN's choices and allocations) stays out of the epoch's
// images/s, and the line says so. The clock is the test's: the first step takes 100 s, the others 2 s each.
TEST(Train, TheEpochRateLeavesOutASlowFirstStep) {
  TrainOptions o;
  o.model = "resnet18:cifar,width=4";
  o.dataset = "synthetic:n=96,h=8,w=8,classes=3";
  o.batch = 16;
  o.seed = tandem::testing::fresh_seed() % 1000;
  o.device = "cpu";
  o.log_every = 1;
  o.evaluate = false;
  double now = 0;
  o.clock = [&now] { return now; };
  o.before_step = [&now](int64_t, int64_t step) { now += step == 0 ? 100 : 2; };
  std::ostringstream log;
  std::vector<EpochResult> r = Trainer(o, log).run();
  ASSERT_EQ(r.size(), 1u);
  // 6 steps: 100 s, then 5 of 2 s with 16 images each.
  EXPECT_EQ(r[0].first_step_seconds, 100);
  EXPECT_EQ(r[0].steady_images_per_second, 8);
  EXPECT_EQ(r[0].seconds, 110);
  EXPECT_NEAR(r[0].images_per_second, 96.0 / 110, 1e-12);
  const std::string text = log.str();
  EXPECT_NE(text.find(", 8 img/s after the first step (100.00 s, warm-up), 110.0 s\n"), std::string::npos) << text;
  // The step lines: the first one names the warm-up, the others the rate of their own step.
  EXPECT_NE(text.find("epoch 1 step 1/6  "), std::string::npos) << text;
  EXPECT_NE(text.find("first step 100.00 s (warm-up)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("epoch 1 step 2/6  "), std::string::npos) << text;
  EXPECT_EQ(text.find(" 1 img/s"), std::string::npos) << "a rate with the warm-up in it: " << text;
  EXPECT_EQ(text.find(" 0 img/s"), std::string::npos) << "a rate with the warm-up in it: " << text;

  // An epoch of a single step has no steady rate: the line says that its rate includes the warm-up.
  o.dataset = "synthetic:n=16,h=8,w=8,classes=3";
  now = 0;
  std::ostringstream one;
  r = Trainer(o, one).run();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].steady_images_per_second, 0);
  EXPECT_NE(one.str().find(" img/s (one step, warm-up included)"), std::string::npos) << one.str();
}

TEST(Train, RefusesBadOptions) {
  std::ostringstream log;
  TrainOptions o;
  o.dataset = "synthetic:n=64,h=8,w=8";
  o.model = "resnet99";
  EXPECT_THROW(Trainer(o, log), ValueError);
  o.model = "resnet18:cifar,width=4";
  o.optimizer = "lbfgs";
  EXPECT_THROW(Trainer(o, log), ValueError);
  o.optimizer = "sgd";
  o.schedule = "linear";
  EXPECT_THROW(Trainer(o, log), ValueError);
  o.schedule = "cosine";
  o.dataset = "nonsense:x";
  EXPECT_THROW(Trainer(o, log), ValueError);
  o.dataset = "synthetic:n=8,h=8,w=8";
  o.batch = 16;
  EXPECT_THROW(Trainer(o, log), ValueError);  // fewer images than one batch
}

}  // namespace
}  // namespace train
}  // namespace tandem
