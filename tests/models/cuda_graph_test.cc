// A whole training step (forward, backward, optimizer) captured as a CUDA graph: N eager steps against one eager
// warm-up and N-1 replays from the same start must give bitwise equal losses, parameters, buffers and optimizer
// state (SGD with momentum, Adam, a model with dropout, a learning rate that changes at every step); and what a
// capture forbids (a host read inside the step, no warm-up, a freed input) is a GraphCaptureError that says so.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "models/losses.h"
#include "models/registry.h"
#include "runtime/base/error.h"
#include "runtime/memory/cuda_graph.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/optim/optim.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace models {
namespace {

using tandem::testing::fresh_seed;

// Three steps: the eager warm-up, the capture and its first replay, and a second replay (new inputs, new
// learning rate).
constexpr int64_t kBatch = 4, kClasses = 10, kSteps = 3;

// One training run's setup on cuda:0: the model, its optimizer and schedule, static input tensors and the loss
// output (all made before any capture), and the batches (host tensors).
struct TrainingRun {
  std::shared_ptr<Network> model;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::LrScheduler> schedule;
  Tensor x, y, loss;
  std::vector<Tensor> xs, ys;

  TrainingRun(const std::string& spec, const std::string& optimizer, uint64_t seed, int64_t image) {
    ModelOptions defaults;
    defaults.num_classes = kClasses;
    defaults.in_channels = 3;
    defaults.seed = seed;
    auto parsed = parse_model_spec(spec, defaults);
    model = make_model(parsed.first, parsed.second);
    model->to(Device::cuda());
    model->train();
    opt = optim::make_optimizer({optimizer, optimizer == "sgd" ? 0.05 : 1e-3, 0.9, true, 1e-4},
                                model->named_parameters());
    schedule = std::make_unique<optim::LrScheduler>(*opt, optim::parse_lr_schedule("cosine", kSteps, kSteps));
    Generator data(seed + 1);
    for (int64_t i = 0; i < kSteps; ++i) {
      xs.push_back(randn({kBatch, 3, image, image}, data));
      std::vector<int64_t> labels;
      for (int64_t j = 0; j < kBatch; ++j) labels.push_back(static_cast<int64_t>(data.integer(kClasses)));
      ys.push_back(from_vector(labels, {kBatch}, Device::cpu()));
    }
    TensorOptions on_gpu = TensorOptions().with_device(Device::cuda());
    x = empty({kBatch, 3, image, image}, on_gpu);
    y = empty({kBatch}, on_gpu.with_dtype(DType::I64));
    loss = empty({}, on_gpu);
  }

  // The step a graph captures: gradients zeroed in place, the loss copied into the static output.
  void step() {
    opt->zero_grad(false);
    Tensor l = cross_entropy(model->forward(x), y);
    l.backward();
    opt->step();
    autograd::NoGradGuard ng;
    loss.copy_(l.detach());
  }

  // Runs kSteps steps: all eager, or the first eager and the others as replays of a graph captured after it.
  std::vector<Tensor> train(bool graph) {
    CudaGraph g;
    std::vector<Tensor> losses;
    for (int64_t i = 0; i < kSteps; ++i) {
      x.copy_(xs[static_cast<size_t>(i)]);
      y.copy_(ys[static_cast<size_t>(i)]);
      if (graph && i > 0) {
        if (!g.captured()) g.capture(current_stream(Device::cuda()), [&] { step(); });
        g.replay();
      } else {
        step();
      }
      schedule->step();
      losses.push_back(loss.clone());
    }
    return losses;
  }
};

std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.contiguous().to(Device::cpu());
  std::vector<uint8_t> b(c.nbytes());
  std::memcpy(b.data(), c.raw_data(), b.size());
  return b;
}

void expect_replays_equal_eager(const std::string& spec, const std::string& optimizer, int64_t image) {
  TD_REQUIRE_GPU();
  // Deterministic algorithms: the simulated cuDNN's others vary their summation order from call to call.
  tandem::testing::NumericsGuard deterministic(false, true);
  const uint64_t seed = fresh_seed();
  TrainingRun eager(spec, optimizer, seed, image), replayed(spec, optimizer, seed, image);
  std::vector<Tensor> le = eager.train(false), lr = replayed.train(true);
  for (size_t i = 0; i < le.size(); ++i) EXPECT_EQ(bytes_of(lr[i]), bytes_of(le[i])) << "loss of step " << i;
  EXPECT_NE(bytes_of(le[0]), bytes_of(le[kSteps - 1])) << "the steps did not train";
  auto pe = eager.model->named_parameters(), pr = replayed.model->named_parameters();
  ASSERT_EQ(pe.size(), pr.size());
  for (size_t i = 0; i < pe.size(); ++i) EXPECT_EQ(bytes_of(pr[i].second), bytes_of(pe[i].second)) << pe[i].first;
  auto be = eager.model->named_buffers(), br = replayed.model->named_buffers();
  for (size_t i = 0; i < be.size(); ++i) EXPECT_EQ(bytes_of(br[i].second), bytes_of(be[i].second)) << be[i].first;
  auto se = eager.opt->state_dict(), sr = replayed.opt->state_dict();
  ASSERT_EQ(se.size(), sr.size());
  for (size_t i = 0; i < se.size(); ++i) EXPECT_EQ(bytes_of(sr[i].second), bytes_of(se[i].second)) << se[i].first;
  EXPECT_EQ(replayed.opt->lr(0), eager.opt->lr(0));
}

TEST(CudaGraphStep, ReplaysOfAResNetStepWithSgdMomentumEqualEagerSteps) {
  expect_replays_equal_eager("resnet18:cifar,width=4", "sgd", 8);
}

TEST(CudaGraphStep, ReplaysOfAResNetStepWithAdamEqualEagerSteps) {
  expect_replays_equal_eager("resnet18:cifar,width=4", "adam", 8);
}

// VGG-16-BN (two dropouts) at width 1 rather than MobileNetV2: a fifth of its launches on the simulated GPU.
TEST(CudaGraphStep, ReplaysOfAStepWithDropoutEqualEagerSteps) {
  expect_replays_equal_eager("vgg16_bn:cifar,width=1", "adamw", 32);
}

// The message of the GraphCaptureError that capturing `step` on a warmed-up run throws.
std::string capture_error(const std::function<void()>& step) {
  try {
    CudaGraph g;
    g.capture(current_stream(Device::cuda()), step);
  } catch (const GraphCaptureError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CudaGraphStep, WhatACaptureForbidsIsAGraphCaptureErrorThatSaysWhatAndHowToFixIt) {
  TD_REQUIRE_GPU();
  {
    // Without a warm-up, the gradients and momentum buffers would be made inside the capture (graph memory that
    // never existed, since the graph is not launched: this run cannot go on).
    TrainingRun cold("resnet18:cifar,width=4", "sgd", fresh_seed(), 8);
    std::string e = capture_error([&] { cold.step(); });
    EXPECT_NE(e.find("outlive it"), std::string::npos) << e;
    EXPECT_NE(e.find("run the step once eagerly first"), std::string::npos) << e;
  }
  TrainingRun run("resnet18:cifar,width=4", "sgd", fresh_seed(), 8);
  run.x.copy_(run.xs[0]);
  run.y.copy_(run.ys[0]);
  run.step();
  std::string e;
  // A host read of the loss inside the step.
  e = capture_error([&] {
    run.step();
    (void)run.loss.item<float>();
  });
  EXPECT_NE(e.find("to the host (Tensor::item"), std::string::npos) << e;
  EXPECT_NE(e.find("read them after replay()"), std::string::npos) << e;
  // A synchronization.
  e = capture_error([&] {
    run.step();
    current_stream(Device::cuda()).synchronize();
  });
  EXPECT_NE(e.find("Stream::synchronize during the capture"), std::string::npos) << e;
  // A tensor the step uses, freed inside it (the replays would use freed memory).
  Tensor temporary = run.x.clone();
  e = capture_error([&] {
    run.x.copy_(temporary);
    temporary = Tensor();
    run.step();
  });
  EXPECT_NE(e.find("allocated before the capture were freed during it"), std::string::npos) << e;
  // A host scalar copied in (pageable memory the graph would read at every replay).
  e = capture_error([&] { run.x.copy_(run.xs[1]); });
  EXPECT_NE(e.find("a copy from pageable host memory"), std::string::npos) << e;
  // After each failure the stream and the run work eagerly, and a correct capture replays.
  run.step();
  CudaGraph g;
  g.capture(current_stream(Device::cuda()), [&] { run.step(); });
  EXPECT_GT(g.nodes(), 50u);
  g.replay();
  EXPECT_TRUE(std::isfinite(run.loss.item<float>()));
}

// Two threads capture at once, as two workers of a parallel run do: the second one's capture begins (it makes the
// graph's pinned staging, a call a capture forbids) while the first one is inside its step. In global mode that
// call is refused on the second thread and the first capture is invalidated; in thread-local mode each capture
// restricts its own thread only, both succeed, and each graph replays its own work.
std::string capture_two_at_once(CaptureMode mode) {
  std::mutex mu;
  std::condition_variable cv;
  bool first_inside = false, second_done = false;
  std::string errors;
  auto add_error = [&](const std::string& who, const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu);
    errors += who + ": " + e.what() + "\n";
  };
  auto run = [&](bool first) {
    Stream s = Stream::create(Device::cuda(0));
    StreamGuard current(s);
    Tensor x = full({64}, first ? 1.0 : 2.0, TensorOptions().with_device(Device::cuda(0)));
    CudaGraph g;
    try {
      if (!first) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return first_inside; });
      }
      g.capture(
          s,
          [&] {
            if (first) {
              std::unique_lock<std::mutex> lock(mu);
              first_inside = true;
              cv.notify_all();
              cv.wait(lock, [&] { return second_done; });
            }
            mul_(x, 3.0);
          },
          mode);
    } catch (const std::exception& e) {
      add_error(first ? "first" : "second", e);
    }
    if (!first) {
      std::lock_guard<std::mutex> lock(mu);
      second_done = true;
      cv.notify_all();
    }
    if (!g.captured()) return;
    g.replay();
    g.replay();
    const float want = (first ? 1.0f : 2.0f) * 9.0f;
    for (float v : x.to_vector<float>())
      if (v != want) {
        add_error(first ? "first" : "second", std::runtime_error("replayed value " + std::to_string(v)));
        break;
      }
  };
  std::thread second(run, false);
  run(true);
  second.join();
  return errors;
}

TEST(CudaGraphModes, ThreadLocalCapturesOnTwoThreadsAtOnceSucceedWhereGlobalOnesFail) {
  TD_REQUIRE_GPU();
  EXPECT_EQ(capture_two_at_once(CaptureMode::ThreadLocal), "");
  const std::string global = capture_two_at_once(CaptureMode::Global);
  EXPECT_NE(global.find("potentially unsafe during stream capture"), std::string::npos) << global;
}

// A thread frees memory ordered on a stream while another thread captures that stream (two workers of a parallel
// run share a message buffer; a comm lane drops a relayed activation): the free must not be queued on the capturing
// stream (it would be a node of the graph, freeing memory the graph does not own) nor order that stream after
// another one (a dependency from outside the capture). It waits for the capture's end, and then runs.
TEST(CudaGraphModes, AFreeByAnotherThreadOfMemoryOnTheCapturingStreamWaitsForTheCaptureToEnd) {
  TD_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  Stream s = Stream::create(gpu), other = Stream::create(gpu);
  Tensor on_stream, used_elsewhere, y;
  {
    StreamGuard current(s);
    on_stream = full({1024}, 1.0, TensorOptions().with_device(gpu));
    y = zeros({64}, TensorOptions().with_device(gpu));
  }
  {
    StreamGuard current(other);
    used_elsewhere = full({2048}, 2.0, TensorOptions().with_device(gpu));
  }
  used_elsewhere.storage().record_stream(s);
  on_stream.storage().record_stream(other);
  std::mutex mu;
  std::condition_variable cv;
  bool inside = false, dropped = false;
  std::thread dropper([&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return inside; });
    on_stream = Tensor();
    used_elsewhere = Tensor();
    dropped = true;
    cv.notify_all();
  });
  CudaGraph g;
  std::string error;
  try {
    g.capture(
        s,
        [&] {
          std::unique_lock<std::mutex> lock(mu);
          inside = true;
          cv.notify_all();
          cv.wait(lock, [&] { return dropped; });
          add_(y, full({64}, 1.0, TensorOptions().with_device(gpu)));
        },
        CaptureMode::ThreadLocal);
  } catch (const std::exception& e) {
    error = e.what();
  }
  dropper.join();
  ASSERT_EQ(error, "");
  ASSERT_TRUE(g.captured());
  g.replay();
  g.replay();
  s.synchronize();
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(64, 2.0f));
}

}  // namespace
}  // namespace models
}  // namespace tandem
