// tools/demo: the Pipe-BD demo — train (or reuse) a small Fashion-MNIST teacher, distill it into a
// depthwise-separable student with the five strategies on 4 workers, and compare their speed and accuracy.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "data/dataset.h"
#include "data/loader.h"
#include "models/checkpoint.h"
#include "models/registry.h"
#include "parallel/bd/session.h"
#include "parallel/worker.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/formats/safetensors.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/precision.h"
#include "tools/flags/flags.h"
#include "tools/train/trainer.h"

namespace tandem {
namespace {

struct Options {
  int64_t epochs = 2, teacher_epochs = 3, subset = 2048, test_subset = 2000, batch = 32;
  std::string workers = "best:4";
  std::string cache_dir;
  uint64_t seed = 0;
  Precision precision = Precision::F32;
};

Options parse(int argc, char** argv) {
  Options o;
  const char* home = std::getenv("HOME");
  o.cache_dir = std::string(home ? home : "/tmp") + "/.cache/tandem/pipe-bd-demo";
  flags::Parser p(
      "demo",
      "tools/tandem demo [--epochs N] [--teacher-epochs N] [--workers SPEC] [--subset N] [--test-subset N]\n"
      "                         [--batch N] [--cache-dir DIR] [--seed N] [--precision f32|bf16]",
      "Pipe-BD on Fashion-MNIST: trains a ResNet-18 teacher (CIFAR variant, width 8) on a subset of the training\n"
      "images (cached and reused on later runs), distills it block by block into a depthwise-separable student\n"
      "with DP, LS, TR, TR+DPU and TR+DPU+AHD on 4 workers (4 SM partitions of GPU 0 when a GPU is present, else 4\n"
      "CPU threads), and prints each strategy's time per epoch, speedup over DP and student accuracy next to the\n"
      "teacher's.");
  p.integer("--epochs", "N", &o.epochs, "distillation epochs per block (default 2)", 1);
  p.integer("--teacher-epochs", "N", &o.teacher_epochs, "teacher training epochs (default 3)", 1);
  p.text("--workers", "SPEC", &o.workers, "worker spec (default best:4: cuda:0/4 with a GPU, else cpu:4)");
  p.integer("--subset", "N", &o.subset, "training images per epoch (default 2048; 0: all 60000)", 0);
  p.integer("--test-subset", "N", &o.test_subset, "test images for the accuracies (default 2000; 0: all 10000)", 0);
  p.integer("--batch", "N", &o.batch, "batch size (default 32)", 4);
  p.text("--cache-dir", "DIR", &o.cache_dir,
         "where the teacher and the runs are kept (default ~/.cache/tandem/pipe-bd-demo)");
  p.integer("--seed", "N", &o.seed, "data order and student initialization (default 0)");
  p.custom(
      "--precision", "P", [&](const std::string& v) { o.precision = parse_precision(v); },
      "f32 (default) or bf16 for the teacher's training and every distillation worker:\n"
      "convolutions in bf16, relayed activations in bf16, f32 weights and optimizer\n"
      "(runtime/tensor/precision.h); a bf16 teacher is cached apart from an f32 one");
  p.parse(argc, argv);
  return o;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Top-1 accuracy of `model` on the first `limit` test images (all when 0), in evaluation mode.
double accuracy(models::Module& model, const std::shared_ptr<const data::Dataset>& test, int64_t limit) {
  data::LoaderOptions lo;
  lo.batch_size = 250;
  lo.shuffle = false;
  lo.drop_last = false;
  lo.num_workers = 1;
  lo.device = best_device();
  data::Loader loader(test, data::Pipeline::parse("normalize:fashion-mnist"), lo);
  model.to(lo.device);
  model.eval();
  autograd::NoGradGuard no_grad;
  int64_t right = 0, seen = 0;
  while (auto b = loader.next()) {
    if (limit > 0 && seen >= limit) break;
    Tensor pred = argmax(model.forward(b->images), 1).to(Device::cpu());
    std::vector<int64_t> p = pred.to_vector<int64_t>(), l = b->labels.to(Device::cpu()).to_vector<int64_t>();
    for (size_t i = 0; i < p.size() && (limit == 0 || seen < limit); ++i, ++seen) right += p[i] == l[i];
  }
  return seen > 0 ? static_cast<double>(right) / static_cast<double>(seen) : 0.0;
}

int run(const Options& o) {
  const double t0 = host_time_s();
  PrecisionGuard policy(o.precision);
  if (o.precision != Precision::F32) std::printf("precision: %s\n", precision_name(o.precision));
  parallel::count_workers(o.workers);  // a bad spec or a missing GPU is said now, not after training the teacher
  const std::string teacher_spec = "resnet18:cifar,width=8,in_channels=1,classes=10";
  make_dirs(o.cache_dir);
  const std::string teacher_path = o.cache_dir + "/teacher-resnet18w8-n" + std::to_string(o.subset) + "-b" +
                                   std::to_string(o.batch) + "-e" + std::to_string(o.teacher_epochs) + "-s" +
                                   std::to_string(o.seed) + (o.precision == Precision::F32 ? "" : "-bf16") +
                                   ".safetensors";
  std::printf(
      "Pipe-BD demo: blockwise distillation of a ResNet-18 (width 8) teacher into a depthwise-separable\n"
      "student on Fashion-MNIST (%s training images, accuracies on %s test images), batch %lld.\n\n",
      o.subset > 0 ? std::to_string(o.subset).c_str() : "all",
      o.test_subset > 0 ? std::to_string(o.test_subset).c_str() : "all", static_cast<long long>(o.batch));

  // 1. The teacher: trained once, then reused from the cache.
  if (exists(teacher_path)) {
    std::printf("teacher: reusing %s\n", teacher_path.c_str());
  } else {
    std::printf("teacher: training %s for %lld epochs (cached as %s)\n", teacher_spec.c_str(),
                static_cast<long long>(o.teacher_epochs), teacher_path.c_str());
    train::TrainOptions to;
    to.model = teacher_spec;
    to.dataset = "fashion-mnist";
    to.epochs = o.teacher_epochs;
    to.batch = o.batch;
    to.lr = 0.05;
    to.seed = o.seed;
    to.workers = 1;
    to.steps_per_epoch = o.subset > 0 ? o.subset / o.batch : 0;
    to.log_every = 16;
    to.evaluate = false;
    to.checkpoint = teacher_path + ".partial";
    to.live_progress = true;
    to.precision = o.precision;
    train::Trainer trainer(to, std::cout);
    trainer.run();
    TD_CHECK_IO(std::rename(to.checkpoint.c_str(), teacher_path.c_str()) == 0, "cannot rename ", to.checkpoint);
  }
  std::shared_ptr<const data::Dataset> test = data::open_dataset("fashion-mnist", false);
  auto [tname, toptions] = models::parse_model_spec(teacher_spec);
  auto teacher = models::make_model(tname, toptions);
  models::load_weights(teacher_path, *teacher);
  const double teacher_acc = accuracy(*teacher, test, o.test_subset);
  std::printf("teacher test accuracy: %.2f%%  (%.0f s so far)\n\n", 100 * teacher_acc, host_time_s() - t0);

  // 2. Distillation with every strategy on the same workers, data and hyperparameters.
  parallel::bd::SessionOptions so;
  so.workload.teacher = teacher_spec;
  so.workload.teacher_weights = teacher_path;
  so.workload.student = "separable";
  so.workload.student_seed = o.seed;
  so.dataset = "fashion-mnist";
  so.subset = o.subset;
  so.train.batch = o.batch;
  so.train.epochs = o.epochs;
  // Adam, as DNA trains its blocks: the blocks' regressions converge in far fewer steps than with SGD.
  so.train.optimizer.kind = "adam";
  so.train.optimizer.lr = 0.01;
  so.train.optimizer.weight_decay = 0;
  so.train.augment = "normalize:fashion-mnist";
  so.train.data_seed = o.seed;
  so.workers = o.workers;
  so.comm = "local";
  so.profile.trials = 3;
  so.out_dir = o.cache_dir + "/run";
  so.live_progress = true;
  std::printf("distilling with DP, LS, TR, TR+DPU, TR+DPU+AHD on %s (outputs in %s)\n", o.workers.c_str(),
              so.out_dir.c_str());
  parallel::bd::SessionReport r = parallel::bd::run_session(so, [](const std::string& line) {
    std::printf("  %s\n", line.c_str());
    std::fflush(stdout);
  });

  // 3. The students' accuracies and the speedup table.
  const parallel::bd::StrategyResult* dp = nullptr;
  for (const auto& x : r.results)
    if (x.strategy == parallel::bd::Strategy::DP) dp = &x;
  std::printf("\n%s; %s; %lld steps per epoch\n\n", r.device.c_str(), r.data.c_str(),
              static_cast<long long>(r.steps_per_epoch));
  std::printf("%-11s %10s %10s %9s %7s %10s %10s %10s\n", "strategy", "s/epoch", "speedup", "(sim.)", "busy",
              "peak MiB", "relay MiB", "accuracy");
  for (const auto& x : r.results) {
    const std::string path = so.out_dir + "/" + parallel::bd::strategy_name(x.strategy) + "/student.safetensors";
    const std::string spec = load_safetensors(path).metadata.at("tandem.model");
    auto [sname, soptions] = models::parse_model_spec(spec);
    auto student = models::make_model(sname, soptions);
    models::load_weights(path, *student);
    double busy = 0, peak = 0;
    for (double b : x.busy_fraction) busy += b / static_cast<double>(x.busy_fraction.size());
    for (int64_t m : x.peak_memory) peak = std::max(peak, m / 1048576.0);
    std::printf("%-11s %10.2f %9.2fx %8.2fx %6.0f%% %10.1f %10.3f %9.2f%%\n", parallel::bd::strategy_title(x.strategy),
                x.epoch_s, dp ? dp->wall_s / x.wall_s : 0.0,
                dp && x.simulated_s > 0 ? dp->simulated_s / x.simulated_s : 0.0, 100 * busy, peak,
                x.relay_bytes / 1048576.0, 100 * accuracy(*student, test, o.test_subset));
  }
  std::printf("%-11s %10s %10s %9s %7s %10s %10s %9.2f%%\n", "teacher", "", "", "", "", "", "", 100 * teacher_acc);
  std::printf(
      "\nspeedup: DP's measured time per epoch over the strategy's on the same workers; (sim.): the same "
      "from the\nsimulator and the profile; busy: share of time in loads, teacher, student and updates; relay MiB:\n"
      "teacher activations relayed over the run (in bf16 under --precision bf16: half of f32's).\n"
      "All strategies compute the same per-block mathematics; the students differ only where DP's\n"
      "and AHD's per-worker BatchNorm statistics cover fewer rows.\n");
  if (r.device.find("cpu") != std::string::npos)
    std::printf(
        "Note: the CPU workers are threads sharing this machine's %u cores: they do not run side by side at\n"
        "their profiled speeds as the simulator assumes, so measured and simulated speedups differ.\n",
        std::thread::hardware_concurrency());
  std::printf("total %.0f s\n", host_time_s() - t0);
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  tandem::Options o = tandem::parse(argc, argv);
  return tandem::flags::run_reporting_errors("demo", [&] { return tandem::run(o); });
}
