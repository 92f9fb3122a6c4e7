// The supervised training loop.
#include "tools/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <optional>
#include <sstream>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/transforms.h"
#include "models/checkpoint.h"
#include "models/losses.h"
#include "models/registry.h"
#include "runtime/base/checked_math.h"
#include "runtime/base/error.h"
#include "runtime/base/parse_number.h"
#include "runtime/formats/chrome_trace.h"
#include "runtime/memory/cuda_graph.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/optim/optim.h"
#include "runtime/progress/progress.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/profile_table.h"
#include "runtime/tensor/profiler.h"

namespace tandem {
namespace train {

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Transforms by dataset kind: the standard augmentation for training where there is one, else normalization.
std::string transform_spec(const std::string& dataset, bool train) {
  std::string kind = dataset.substr(0, dataset.find(':'));
  if (kind == "cifar10") return train ? "cifar-train" : "cifar-eval";
  if (kind == "cifar100") return train ? "random-crop:pad=4,flip,normalize:cifar100" : "normalize:cifar100";
  if (kind == "fashion-mnist") return "normalize:fashion-mnist";
  if (kind == "mnist") return "normalize:mnist";
  if (kind == "folder" || kind == "packed") return train ? "imagenet-train" : "imagenet-eval";
  return "none";
}

std::string mib(int64_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2) << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return os.str();
}

// The number of rows whose arg-max is the label, as an f64 scalar on the logits' device (not read back).
Tensor correct_rows(const Tensor& logits, const Tensor& labels) {
  autograd::NoGradGuard ng;
  return sum(eq(argmax(logits, 1), labels).to(DType::F64));
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  return static_cast<int64_t>(correct_rows(logits, labels).to(Device::cpu()).item<double>());
}

int64_t metadata_int(const SafetensorsMetadata& m, const std::string& key, const std::string& path) {
  auto it = m.find(key);
  TD_CHECK(it != m.end(), "checkpoint '", path, "' has no '", key, "' entry (not written by tools:train?)");
  int64_t v = 0;
  TD_CHECK(parse_count(it->second, &v), "checkpoint '", path, "': bad '", key, "' value '", it->second, "'");
  return v;
}

// --profile-steps: the profile runs from step 1 (after the warm-up step 0) of the run's first epoch through step
// profile_steps, or the epoch's last step; after it, its tables go to `log` and its trace to --profile-trace.
bool profiled_step(const TrainOptions& o, bool first_epoch, int64_t step) {
  return o.profile_steps > 0 && first_epoch && step >= 1 && step <= o.profile_steps;
}
void end_profile(const TrainOptions& o, int64_t steps, std::ostream& log) {
  profiler::Profile p = profiler::stop();
  log << "profile of " << steps << (steps == 1 ? " step" : " steps") << " after the warm-up step\n"
      << profiler::format_table(p, 30);
  if (!o.profile_trace.empty()) {
    write_chrome_trace(p, o.profile_trace);
    log << "trace: " << o.profile_trace << std::endl;
  }
}

// One training step's loss and count of correct rows, left on the device.
struct StepResult {
  Tensor loss, correct;
};

// The training step, eager or (with --cuda-graph) replayed from a captured CUDA graph. The graph reads static
// input tensors and writes static outputs (made before the capture); each replay's inputs are copied into them
// first, and its outputs copied out after. A batch of another shape (a smaller last one) runs eagerly.
class StepRunner {
 public:
  StepRunner(const TrainOptions& o, Device device, models::Network& model, optim::Optimizer& optimizer,
             std::ostream& log)
      : o_(o), device_(device), model_(model), optimizer_(optimizer), log_(log) {}

  // `warm_up`: the run's first step, which runs eagerly even with --cuda-graph so that gradients, optimizer
  // state, handles and algorithms exist before a capture.
  StepResult run(const data::Batch& batch, bool warm_up) {
    if (o_.cuda_graph && (!x_.defined() || batch.images.shape() == x_.shape())) return graphed(batch, warm_up);
    if (o_.cuda_graph)
      log_ << "cuda graph: a batch of another shape (" << shape_str(batch.images.shape()) << ") runs eagerly"
           << std::endl;
    optimizer_.zero_grad(!o_.cuda_graph);
    Tensor logits = model_.forward(batch.images);
    Tensor loss = models::cross_entropy(logits, batch.labels, o_.label_smoothing);
    loss.backward();
    optimizer_.step();
    return {loss, correct_rows(logits, batch.labels)};
  }

 private:
  StepResult graphed(const data::Batch& batch, bool warm_up) {
    if (!x_.defined()) {
      x_ = empty_like(batch.images);
      y_ = empty_like(batch.labels);
      loss_ = empty({}, TensorOptions().with_device(device_));
      correct_ = empty({}, TensorOptions(DType::F64).with_device(device_));
    }
    x_.copy_(batch.images);
    y_.copy_(batch.labels);
    if (graph_.captured()) {
      graph_.replay();
    } else if (warm_up) {
      static_step();
    } else {
      graph_.capture(current_stream(device_), [this] { static_step(); });
      log_ << "cuda graph: the step is " << graph_.nodes() << " nodes, replayed with one launch" << std::endl;
      graph_.replay();
    }
    return {loss_.clone(), correct_.clone()};
  }

  // The step on the static tensors: what the graph captures.
  void static_step() {
    optimizer_.zero_grad(false);
    Tensor logits = model_.forward(x_);
    Tensor loss = models::cross_entropy(logits, y_, o_.label_smoothing);
    loss.backward();
    optimizer_.step();
    autograd::NoGradGuard ng;
    loss_.copy_(loss.detach());
    correct_.copy_(correct_rows(logits, y_));
  }

  const TrainOptions& o_;
  Device device_;
  models::Network& model_;
  optim::Optimizer& optimizer_;
  std::ostream& log_;
  CudaGraph graph_;
  Tensor x_, y_, loss_, correct_;
};

}  // namespace

struct Trainer::State {
  TrainOptions o;
  std::ostream& log;
  Device device = Device::cpu();
  std::shared_ptr<models::Network> model;
  std::unique_ptr<data::Loader> train_loader, test_loader;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<optim::LrScheduler> scheduler;
  int64_t steps_per_epoch = 0;
  int64_t first_epoch = 0;

  State(const TrainOptions& opts, std::ostream& l) : o(opts), log(l) {
    if (!o.clock) o.clock = steady_seconds;
  }
};

Trainer::Trainer(const TrainOptions& o, std::ostream& log) : s_(std::make_unique<State>(o, log)) {
  TD_CHECK(o.epochs > 0 && o.batch > 0, "epochs and batch size must be positive, got ", o.epochs, " and ", o.batch);
  TD_CHECK(o.lr >= 0 && o.weight_decay >= 0 && o.momentum >= 0, "lr, weight decay and momentum must be >= 0");
  s_->device = o.device.empty() ? best_device() : Device::parse(o.device);
  check_device_available(s_->device);
  TD_CHECK(!o.cuda_graph || s_->device.is_cuda(), "--cuda-graph needs a CUDA device, got ", s_->device);

  std::shared_ptr<const data::Dataset> train_set = data::open_dataset(o.dataset, true);
  data::LoaderOptions lo;
  lo.batch_size = o.batch;
  lo.seed = o.seed;
  lo.num_workers = o.workers;
  lo.device = s_->device;
  s_->train_loader = std::make_unique<data::Loader>(
      train_set, data::Pipeline::parse(o.transform == "auto" ? transform_spec(o.dataset, true) : o.transform), lo);
  s_->steps_per_epoch = s_->train_loader->batches_per_epoch();
  if (o.steps_per_epoch > 0) s_->steps_per_epoch = std::min(s_->steps_per_epoch, o.steps_per_epoch);
  TD_CHECK(s_->steps_per_epoch > 0, "dataset '", o.dataset, "' has fewer training images (", train_set->size(),
           ") than one batch (", o.batch, ")");
  if (o.evaluate || !o.eval_only.empty()) {
    data::LoaderOptions eo = lo;
    eo.shuffle = false;
    eo.drop_last = false;
    s_->test_loader = std::make_unique<data::Loader>(data::open_dataset(o.dataset, false),
                                                     data::Pipeline::parse(transform_spec(o.dataset, false)), eo);
  }

  Shape image = s_->train_loader->image_shape();
  models::ModelOptions defaults;
  defaults.num_classes = train_set->num_classes();
  defaults.in_channels = image[0];
  defaults.seed = o.seed;
  auto spec = models::parse_model_spec(o.model, defaults);
  s_->model = models::make_model(spec.first, spec.second);
  s_->model->to(s_->device);

  s_->optimizer = optim::make_optimizer({o.optimizer, o.lr, o.momentum, /*nesterov=*/true, o.weight_decay},
                                        s_->model->named_parameters());
  s_->scheduler = std::make_unique<optim::LrScheduler>(
      *s_->optimizer, optim::parse_lr_schedule(o.schedule, s_->steps_per_epoch, s_->steps_per_epoch * o.epochs));

  TD_CHECK(o.eval_only.empty() || o.resume.empty(), "evaluate weights or resume training, not both");
  if (!o.eval_only.empty()) models::load_weights(o.eval_only, *s_->model);
  if (!o.resume.empty()) {
    SafetensorsMetadata meta = models::load_checkpoint(o.resume, *s_->model, s_->optimizer.get(), s_->scheduler.get());
    s_->first_epoch = metadata_int(meta, "epoch", o.resume);
    const int64_t epoch_end = checked_mul<int64_t>(s_->first_epoch, s_->steps_per_epoch, "checkpoint '", o.resume,
                                                   "': the step at the end of its epoch");
    TD_CHECK(s_->scheduler->position() == epoch_end, "checkpoint '", o.resume, "' is at step ",
             s_->scheduler->position(), " but epoch ", s_->first_epoch, " with ", s_->steps_per_epoch,
             " steps per epoch ends at step ", epoch_end,
             ": resume with the batch size and dataset it was trained with");
  }

  int64_t param_bytes = 0, grad_bytes = 0;
  for (const auto& p : s_->model->named_parameters()) {
    param_bytes += static_cast<int64_t>(p.second.nbytes());
    if (p.second.requires_grad()) grad_bytes += static_cast<int64_t>(p.second.nbytes());
  }
  for (const auto& b : s_->model->named_buffers()) param_bytes += static_cast<int64_t>(b.second.nbytes());
  int64_t optim_bytes = s_->optimizer->planned_state_bytes();
  log << "model " << o.model << ": " << s_->model->num_parameters() << " parameters\n"
      << "memory plan: parameters+buffers " << mib(param_bytes) << ", gradients " << mib(grad_bytes)
      << ", optimizer state " << mib(optim_bytes) << " (" << s_->optimizer->name() << "), total "
      << mib(param_bytes + grad_bytes + optim_bytes) << " + activations\n"
      << "data: " << train_set->describe() << "; " << s_->steps_per_epoch << " steps of " << o.batch << " per epoch on "
      << s_->device.str() << "\n"
      << "schedule: " << s_->scheduler->schedule().describe() << ", lr " << o.lr << "\n"
      << "precision: " << precision_summary(o.precision, s_->device) << "\n";
  if (s_->first_epoch > 0) log << "resumed from " << o.resume << " after epoch " << s_->first_epoch << "\n";
  log.flush();
}

Trainer::~Trainer() = default;

int64_t Trainer::first_epoch() const { return s_->first_epoch; }

std::vector<EpochResult> Trainer::run() {
  State& s = *s_;
  PrecisionGuard policy(s.o.precision);
  std::vector<EpochResult> results;
  int64_t end = s.o.stop_after > 0 ? std::min(s.o.epochs, s.first_epoch + s.o.stop_after) : s.o.epochs;
  for (int64_t epoch = s.first_epoch; epoch < end; ++epoch) {
    EpochResult r;
    r.epoch = epoch;
    s.model->train();
    s.train_loader->set_epoch(epoch);
    int64_t seen = 0, first_images = 0;
    const double t0 = s.o.clock();
    double first_end = t0, window = t0;  // when the first step ended; when the current log window began
    int64_t window_images = 0;
    // Step losses and correct counts stay on the device until a log line or the epoch end reads them, so
    // the host does not wait for the GPU at every step.
    std::vector<Tensor> pending;
    Tensor correct;
    std::optional<Progress> live;
    if (s.o.live_progress) {
      ProgressTask task;
      task.label = "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(s.o.epochs);
      task.total = s.steps_per_epoch;
      task.items_per_step = s.o.batch;
      live.emplace(task);
    }
    StepRunner runner(s.o, s.device, *s.model, *s.optimizer, s.log);
    auto read_losses = [&] {
      if (pending.empty()) return;
      for (Tensor& l : pending) l = l.reshape({1});
      std::vector<float> values = concat(pending, 0).to(Device::cpu()).to_vector<float>();
      for (float v : values) {
        TD_CHECK(std::isfinite(v), "the loss became ", v, " at epoch ", epoch, " step ", r.step_losses.size(),
                 " (learning rate too high?)");
        r.step_losses.push_back(v);
      }
      pending.clear();
    };
    for (int64_t step = 0; step < s.steps_per_epoch; ++step) {
      if (s.o.before_step) s.o.before_step(epoch, step);
      const bool profiled = profiled_step(s.o, epoch == s.first_epoch, step);
      if (profiled && step == 1) profiler::start({s.device});
      std::optional<data::Batch> batch = s.train_loader->next();
      TD_ASSERT(batch.has_value(), "the loader ended epoch ", epoch, " after ", step, " of ", s.steps_per_epoch,
                " batches");
      StepResult step_result = runner.run(*batch, step == 0 && epoch == s.first_epoch);
      s.scheduler->step();
      pending.push_back(step_result.loss.detach());
      int64_t n = batch->images.size(0);
      correct = correct.defined() ? add(correct, step_result.correct) : step_result.correct;
      seen += n;
      window_images += n;
      if (step == 0) {
        // The first step carries the warm-up (cuDNN's algorithm choices, allocations, lazy loading): it ends
        // when the device has done it (reading its loss waits for that), and the rates leave it out.
        read_losses();
        first_end = window = s.o.clock();
        first_images = n;
        window_images = 0;
      }
      if (pending.size() >= 256) read_losses();
      if (profiled && (step == s.o.profile_steps || step + 1 == s.steps_per_epoch)) end_profile(s.o, step, s.log);
      if (live) live->step();
      if (s.o.log_every > 0 && (step + 1) % s.o.log_every == 0) {
        read_losses();
        const double now = s.o.clock();
        auto print = [&] {
          s.log << "epoch " << epoch + 1 << " step " << step + 1 << "/" << s.steps_per_epoch << "  loss " << std::fixed
                << std::setprecision(4) << r.step_losses.back() << "  lr " << std::setprecision(5) << s.optimizer->lr(0)
                << "  ";
          if (step == 0)
            s.log << "first step " << std::setprecision(2) << first_end - t0 << " s (warm-up)" << std::endl;
          else
            s.log << std::setprecision(0) << window_images / (now - window) << " img/s" << std::endl;
        };
        if (live)
          live->print_above(print);
        else
          print();
        window = s.o.clock();
        window_images = 0;
      }
    }
    read_losses();
    live.reset();
    const double end = s.o.clock();
    r.seconds = end - t0;
    r.images_per_second = static_cast<double>(seen) / r.seconds;
    if (s.steps_per_epoch > 1) {
      r.first_step_seconds = first_end - t0;
      r.steady_images_per_second = static_cast<double>(seen - first_images) / (end - first_end);
    }
    double total = 0;
    for (double v : r.step_losses) total += v;
    r.train_loss = total / static_cast<double>(r.step_losses.size());
    r.train_accuracy = seen > 0 ? correct.to(Device::cpu()).item<double>() / static_cast<double>(seen) : 0.0;
    if (s.test_loader) r.test_accuracy = test_accuracy();
    s.log << "epoch " << epoch + 1 << "/" << s.o.epochs << ": train loss " << std::fixed << std::setprecision(4)
          << r.train_loss << ", train acc " << std::setprecision(2) << 100 * r.train_accuracy << "%";
    if (r.test_accuracy >= 0) s.log << ", test acc " << 100 * r.test_accuracy << "%";
    if (r.steady_images_per_second > 0)
      s.log << ", " << std::setprecision(0) << r.steady_images_per_second << " img/s after the first step ("
            << std::setprecision(2) << r.first_step_seconds << " s, warm-up)";
    else
      s.log << ", " << std::setprecision(0) << r.images_per_second << " img/s (one step, warm-up included)";
    s.log << ", " << std::setprecision(1) << r.seconds << " s" << std::endl;
    if (!s.o.checkpoint.empty()) {
      models::save_checkpoint(s.o.checkpoint, *s.model, s.optimizer.get(), s.scheduler.get(),
                              {{"epoch", std::to_string(epoch + 1)}, {"model", s.o.model}, {"dataset", s.o.dataset}});
      s.log << "checkpoint: " << s.o.checkpoint << std::endl;
    }
    results.push_back(std::move(r));
  }
  return results;
}

double Trainer::test_accuracy() {
  State& s = *s_;
  PrecisionGuard policy(s.o.precision);
  TD_CHECK(s.test_loader != nullptr, "no test split loaded (evaluation was turned off)");
  s.model->eval();
  autograd::NoGradGuard ng;
  s.test_loader->set_epoch(0);
  std::optional<Progress> live;
  if (s.o.live_progress) {
    ProgressTask task;
    task.label = "test";
    task.total = s.test_loader->batches_per_epoch();
    task.items_per_step = s.o.batch;
    task.unit = "batch";
    live.emplace(task);
  }
  int64_t ok = 0, total_images = 0;
  while (auto b = s.test_loader->next()) {
    ok += count_correct(s.model->forward(b->images), b->labels);
    total_images += b->images.size(0);
    if (live) live->step();
  }
  return total_images > 0 ? static_cast<double>(ok) / static_cast<double>(total_images) : 0.0;
}

}  // namespace train
}  // namespace tandem
