// tools:cyclic: trains a model with Cyclic Data Parallelism (or DP) on CPU threads or GPUs and writes logs,
// memory and communication curves and a trace; with --simulate, writes the unit-time timelines instead, or
// (--simulate --gpu) projects the rules on modelled GPUs from the cost model.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/transforms.h"
#include "models/losses.h"
#include "models/registry.h"
#include "parallel/cyclic/accounting.h"
#include "parallel/cyclic/partition.h"
#include "parallel/cyclic/profile.h"
#include "parallel/cyclic/trainer.h"
#include "parallel/simulator.h"
#include "parallel/trace.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/formats/json.h"
#include "runtime/formats/safetensors.h"
#include "runtime/memory/stream.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/progress/progress.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/precision.h"
#include "runtime/tensor/rng.h"
#include "tools/costmodel/cyclic/stage_costs.h"
#include "tools/cyclic/flags.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace cyclic_tool {
namespace {

using namespace parallel::cyclic;

// The first `n` samples of a dataset.
class Subset : public data::Dataset {
 public:
  Subset(std::shared_ptr<data::Dataset> base, int64_t n) : base_(std::move(base)), n_(std::min(n, base_->size())) {}
  int64_t size() const override { return n_; }
  int64_t num_classes() const override { return base_->num_classes(); }
  data::Sample get(int64_t index) const override { return base_->get(index); }
  std::string describe() const override { return base_->describe() + " (first " + std::to_string(n_) + ")"; }

 private:
  std::shared_ptr<data::Dataset> base_;
  int64_t n_;
};

std::string default_transform(const std::string& dataset, bool train) {
  if (dataset.rfind("cifar", 0) == 0) return train ? "cifar-train" : "cifar-eval";
  if (dataset.rfind("fashion-mnist", 0) == 0) return "normalize:fashion-mnist";
  if (dataset.rfind("mnist", 0) == 0) return "normalize:mnist";
  return "none";
}

std::ofstream open_out(const std::string& dir, const std::string& name) {
  std::ofstream f(dir + "/" + name);
  TD_CHECK_IO(f.good(), "cannot write ", dir, "/", name);
  return f;
}

// --simulate: the unit-time DP and CDP timelines of the paper's figure for N micro-batches and S stages.
void simulate(const Flags& f, Rule rule) {
  TD_CHECK(!f.out.empty(), "--simulate needs --out DIR");
  TimelineSpec spec;
  spec.mode = Mode::DpWorkers;
  spec.micro_batches = f.micro_batches;
  spec.stages = f.stages;
  spec.rounds = f.simulate_rounds;
  StageCosts c = StageCosts::unit(f.stages);
  const double unit = 1 << 20;  // bytes of one stage's gradient (large, so integer byte counts stay exact)
  c.param_bytes.assign(f.stages, static_cast<int64_t>(unit));
  std::vector<Rule> rules{Rule::Dp, rule == Rule::Dp ? Rule::CdpV1 : rule};
  std::vector<Curve> stored;
  std::vector<std::vector<double>> traffic;
  double makespan = 0;
  for (Rule r : rules) {
    spec.rule = r;
    spec.sync = default_sync(r);
    Timeline t = build_timeline(spec, c);
    parallel::SimResult sim = parallel::simulate(t.schedule);
    makespan = std::max(makespan, sim.makespan_s);
    std::ofstream cells = open_out(f.out, std::string("timeline_") + rule_name(r) + ".csv");
    cells << "stage,micro,round,kind,start,end\n";
    for (const parallel::InstrTime& it : sim.times) {
      const Action& a = t.actions[it.id];
      if (a.kind != ActionKind::Forward && a.kind != ActionKind::Backward) continue;
      cells << a.stage << "," << a.micro << "," << a.round << "," << (a.kind == ActionKind::Forward ? "f" : "b") << ","
            << it.start_s << "," << it.end_s << "\n";
    }
    stored.push_back(stored_activations(t, sim.times, std::vector<double>(f.stages, 1.0)).total);
    traffic.push_back(scheduled_bytes_per_bin(t, sim.times, 1.0, static_cast<int>(sim.makespan_s) + 1));
    for (double& x : traffic.back()) x /= unit;  // in stage gradients
  }
  std::ofstream act = open_out(f.out, "activations_sim.csv");
  act << "step,dp," << rule_name(rules[1]) << "\n";
  for (int step = 0; step < static_cast<int>(makespan); ++step)
    act << step << "," << stored[0].at(step + 0.5) << "," << stored[1].at(step + 0.5) << "\n";
  std::ofstream comm = open_out(f.out, "comm_sim.csv");
  comm << "step,dp," << rule_name(rules[1]) << "\n";
  for (int step = 0; step <= static_cast<int>(makespan); ++step)
    comm << step << "," << (step < static_cast<int>(traffic[0].size()) ? traffic[0][step] : 0) << ","
         << (step < static_cast<int>(traffic[1].size()) ? traffic[1][step] : 0) << "\n";
  std::printf("cyclic: wrote unit-time timelines of dp and %s (N = %d, S = %d) to %s\n", rule_name(rules[1]),
              f.micro_batches, f.stages, f.out.c_str());
}

// --simulate --gpu: DP and the cyclic rules in dp-workers and mp modes on modelled GPUs, from stage costs the
// cost model predicts, beside the unit-time model of the paper's figure.
void simulate_on_gpu(const Flags& f) {
  const costmodel::GpuSpec& gpu = costmodel::gpu_spec(f.gpu);
  auto spec = models::parse_model_spec(f.model);
  const bool cifar = f.model.find("cifar") != std::string::npos;
  const int64_t size = f.input > 0 ? f.input : cifar ? 32 : 224;
  spec.second.in_channels = 3;
  spec.second.seed = f.seed;
  auto model = std::static_pointer_cast<models::Sequential>(models::make_model(spec.first, spec.second));
  const int N = f.micro_batches, S = f.stages;
  const std::vector<Unit> units = model_units(*model, {1, 3, size, size});
  const std::vector<size_t> starts = f.split.empty() ? balanced_split(units, S) : parse_split(f.split, units);
  std::printf(
      "cyclic: %s at %lldx%lld, micro-batch %lld, N = %d micro-batches, S = %d stages (%s), on %s GPUs "
      "joined by NVLink\n",
      f.model.c_str(), static_cast<long long>(size), static_cast<long long>(size), static_cast<long long>(f.batch), N,
      S, describe_split(units, starts).c_str(), gpu.title.c_str());
  const costmodel::ModelledStages ms = costmodel::model_stage_costs(make_stages(units, starts), {3, size, size},
                                                                    f.batch, gpu, costmodel::fitted_constants());
  const int64_t rounds = std::max<int64_t>(f.simulate_rounds, 4);
  std::printf(
      "PROJECTED by the cost model (stage costs predicted from the simulated GPU's counters, the rules' timelines\n"
      "timed by the simulator; a round's time in the steady state: %lld rounds against %lld), not measured. Beside\n"
      "them, the paper's unit-time model: DP's activations peak at N*S stage activations in all, CDP's stay at\n"
      "N(S+1)/2; DP x MP needs N*S GPUs, CDP x MP S*ceil(N/S).\n%-10s %-7s %5s %10s %11s %12s %11s  %s\n",
      static_cast<long long>(2 * rounds), static_cast<long long>(rounds), "mode", "rule", "gpus", "round_ms",
      "images/s", "act_peak_GB", "per_gpu_GB", "unit model");
  for (Mode mode : {Mode::DpWorkers, Mode::ModelParallel})
    for (Rule r : {Rule::Dp, Rule::CdpV1, Rule::CdpV2}) {
      TimelineSpec t;
      t.rule = r;
      t.mode = mode;
      t.sync = default_sync(r);
      t.micro_batches = N;
      t.stages = S;
      t.rounds = rounds;
      const Timeline tl = build_timeline(t, ms.costs);
      const parallel::SimResult sim = parallel::simulate(tl.schedule);
      t.rounds = 2 * rounds;
      const double longer = parallel::simulate(build_timeline(t, ms.costs).schedule).makespan_s;
      const ActivationProfile act = stored_activations(tl, sim.times, ms.stored_bytes);
      double per_gpu = 0;
      for (const Curve& c : act.per_worker) per_gpu = std::max(per_gpu, c.peak());
      const double round_s = (longer - sim.makespan_s) / static_cast<double>(rounds);
      const std::string units_text =
          std::to_string(r == Rule::Dp ? N * S : N * (S + 1) / 2) + " acts" +
          (mode == Mode::ModelParallel ? ", " + std::to_string(r == Rule::Dp ? N * S : S * ((N + S - 1) / S)) + " gpus"
                                       : "");
      std::printf("%-10s %-7s %5d %10.2f %11.1f %12.3f %11.3f  %s\n", mode_name(mode), rule_name(r), tl.workers(),
                  round_s * 1e3, N * f.batch / round_s, act.total.peak() * 1e-9, per_gpu * 1e-9, units_text.c_str());
    }
}

struct EvalResult {
  double accuracy = 0, loss = 0;
};

EvalResult evaluate(const ModelFactory& factory, const NamedTensors& state, std::shared_ptr<data::Dataset> test,
                    const data::Pipeline& pipeline, int threads, Device device) {
  DeviceGuard on_device(device);
  auto model = factory();
  model->load_state_dict(state);
  model->eval();
  data::LoaderOptions lo;
  lo.batch_size = 256;
  lo.shuffle = false;
  lo.drop_last = false;
  lo.num_workers = threads;
  data::Loader loader(test, pipeline, lo);
  autograd::NoGradGuard no_grad;
  int64_t correct = 0, seen = 0;
  double loss = 0;
  while (auto b = loader.next()) {
    Tensor labels = b->labels.to(device);
    Tensor logits = model->forward(b->images.to(device));
    loss += models::cross_entropy(logits, labels).item<float>() * static_cast<double>(labels.size(0));
    correct += static_cast<int64_t>(sum(eq(argmax(logits, 1), labels).to(DType::F32)).item<float>());
    seen += b->labels.size(0);
  }
  EvalResult r;
  if (seen > 0) {
    r.accuracy = static_cast<double>(correct) / static_cast<double>(seen);
    r.loss = loss / static_cast<double>(seen);
  }
  return r;
}

// The recorded timeline's curves: memory on the schedule's time axis (measured, aligned, and predicted from
// the profiled stage sizes), memory in wall-clock time, transfers in wall-clock bins, and the trace.
Json write_recording(const Flags& f, const CyclicTrainer& trainer, const std::vector<double>& stage_bytes,
                     const Transients& transient) {
  const RunRecord& run = trainer.last_run();
  parallel::SimResult sim = parallel::simulate(run.timeline.schedule);
  ActivationProfile measured = aligned_activations(run.timeline, sim.times, run.times, run.memory, run.memory_base);
  ActivationProfile predicted = stored_activations(run.timeline, sim.times, stage_bytes, transient);
  ActivationProfile wall = wall_clock_activations(run.memory, run.memory_base);
  std::vector<double> times = measured.total.t;
  times.insert(times.end(), predicted.total.t.begin(), predicted.total.t.end());
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  std::ofstream mem = open_out(f.out, "memory.csv");
  mem << "schedule_time,measured_total,predicted_total";
  for (size_t w = 0; w < measured.per_worker.size(); ++w) mem << ",w" << w;
  mem << "\n";
  for (double t : times) {
    if (t < 0) continue;
    mem << t << "," << measured.total.at(t) << "," << predicted.total.at(t);
    for (const Curve& c : measured.per_worker) mem << "," << c.at(t);
    mem << "\n";
  }
  std::ofstream mw = open_out(f.out, "memory_wall.csv");
  mw << "time_s,total";
  for (size_t w = 0; w < wall.per_worker.size(); ++w) mw << ",w" << w;
  mw << "\n";
  for (double t : wall.total.t) {
    if (t < run.start_s || t > run.end_s) continue;
    mw << t - run.start_s << "," << wall.total.at(t);
    for (const Curve& c : wall.per_worker) mw << "," << c.at(t);
    mw << "\n";
  }
  const double span = run.end_s - run.start_s;
  const int bins = 200;
  std::vector<double> bytes = comm_bytes_per_bin(run.comm, run.start_s, span / bins, bins);
  std::ofstream comm = open_out(f.out, "comm.csv");
  comm << "time_s,bytes\n";
  double total_bytes = 0;
  for (int i = 0; i < bins; ++i) {
    comm << (i + 0.5) * span / bins << "," << bytes[i] << "\n";
    total_bytes += bytes[i];
  }
  std::vector<parallel::InstrTime> all;
  std::vector<std::string> names;
  for (size_t w = 0; w < run.times.size(); ++w) {
    all.insert(all.end(), run.times[w].begin(), run.times[w].end());
    names.push_back(const_cast<CyclicTrainer&>(trainer).workers()[w].name());
  }
  parallel::write_trace(f.out + "/trace.json", run.timeline.schedule, all, names);
  Json j = Json::object();
  j["recorded_rounds"] = Json(run.timeline.spec.rounds);
  j["peak_activation_bytes_measured"] = Json(measured.total.peak());
  j["peak_activation_bytes_predicted"] = Json(predicted.total.peak());
  j["peak_activation_bytes_wall_clock"] = Json(wall.total.peak());
  j["bytes_per_round"] = Json(total_bytes / static_cast<double>(run.timeline.spec.rounds));
  return j;
}

constexpr int kWarmupRounds = 2;

// kWarmupRounds rounds of a separate trainer (same model, options and workers) on random micro-batches, untimed:
// every shape of every worker runs once before the real trainer's timed rounds, so that those leave out first-call
// costs (on a GPU, cuDNN's algorithm search per convolution shape), and the real trainer computes what it would have.
void warm_up(const ModelFactory& factory, const Shape& micro_input, const TrainerOptions& o,
             const std::vector<parallel::Worker>& workers) {
  CyclicTrainer warm(factory, micro_input, o, workers);
  Generator gen(0x5eed);
  warm.train(kWarmupRounds, [&](int64_t) {
    return MicroBatch{randn(micro_input, gen), zeros({micro_input[0]}, TensorOptions(DType::I64))};
  });
}

// The training and test sets (cut to --subset and --test-subset).
struct Datasets {
  std::shared_ptr<data::Dataset> train, test;
};

Datasets open_datasets(const Flags& f) {
  Datasets d{data::open_dataset(f.dataset, true), data::open_dataset(f.dataset, false)};
  if (f.subset > 0) d.train = std::make_shared<Subset>(d.train, f.subset);
  if (f.test_subset > 0) d.test = std::make_shared<Subset>(d.test, f.test_subset);
  return d;
}

// The model of a --model spec with the training set's classes and channels, and --seed.
ModelFactory model_factory(std::pair<std::string, models::ModelOptions> spec, const data::Dataset& train_set,
                           uint64_t seed) {
  spec.second.num_classes = train_set.num_classes();
  spec.second.in_channels = train_set.get(0).image.channels;
  spec.second.seed = seed;
  const std::string model_name = spec.first;
  const models::ModelOptions model_options = spec.second;
  return [model_name, model_options] {
    return std::static_pointer_cast<models::Sequential>(models::make_model(model_name, model_options));
  };
}

data::Pipeline pipeline(const Flags& f, bool train) {
  const std::string& given = train ? f.train_transform : f.test_transform;
  return data::Pipeline::parse(given.empty() ? default_transform(f.dataset, train) : given);
}

// How long the run trains: whole rounds of N micro-batches per epoch, and the rounds in all.
struct Rounds {
  int64_t per_epoch = 0, total = 0;
};

Rounds count_rounds(const Flags& f, const data::Loader& loader, const data::Dataset& train_set) {
  Rounds r;
  r.per_epoch = loader.batches_per_epoch() / f.micro_batches;
  if (r.per_epoch < 1)
    flags::usage_error("the training set (" + std::to_string(train_set.size()) + " samples) is too small for " +
                       std::to_string(f.micro_batches) + " micro-batches of " + std::to_string(f.batch));
  r.total = static_cast<int64_t>(std::ceil(f.epochs * static_cast<double>(r.per_epoch)));
  if (f.max_rounds > 0) r.total = std::min(r.total, f.max_rounds);
  if (r.total < 1) flags::usage_error("nothing to train: --epochs gives no round");
  return r;
}

TrainerOptions trainer_options(const Flags& f, Rule rule, Mode mode, const std::vector<Unit>& units,
                               const Rounds& rounds) {
  TrainerOptions o;
  o.rule = rule;
  o.mode = mode;
  o.micro_batches = f.micro_batches;
  o.stages = f.stages;
  if (!f.split.empty()) o.stage_starts = parse_split(f.split, units);
  if (f.sync != "auto") o.sync = parse_sync(f.sync);
  o.lr = f.lr;
  o.momentum = f.momentum;
  o.weight_decay = f.weight_decay;
  o.nesterov = f.nesterov;
  o.lr_schedule = optim::parse_lr_schedule(f.lr_schedule, rounds.per_epoch, rounds.total);
  return o;
}

// The stages' measured sizes, from which memory is predicted.
struct StageSizes {
  std::vector<double> stored;
  Transients transient;
};

// Orders the trainer's timelines by measured stage times (on the first worker's device), prints them, and
// returns the stages' measured sizes.
StageSizes measure_stages(const ModelFactory& factory, const Shape& micro_input, const Shape& sample, int stages,
                          CyclicTrainer& trainer) {
  StageProfile prof;
  {
    DeviceGuard on_device(trainer.workers()[0].device);
    auto profiled = factory();
    prof = profile_stages(make_stages(model_units(*profiled, sample), trainer.stage_starts()), micro_input, 3);
  }
  trainer.set_costs(costs_from_profile(prof));
  std::printf(
      "cyclic: timings exclude a warm-up: %d rounds of a separate trainer on random inputs before the first, "
      "and an untimed pass of each stage before its profile\n",
      kWarmupRounds);
  for (int l = 0; l < stages; ++l)
    std::printf("cyclic: stage %d: forward %.2f ms, backward %.2f ms, %.2f MiB stored, %.2f MiB parameters\n", l,
                1e3 * prof.forward_s[l], 1e3 * prof.backward_s[l], prof.stored_bytes[l] / 1048576.0,
                prof.param_bytes[l] / 1048576.0);
  StageSizes sizes;
  sizes.stored.assign(prof.stored_bytes.begin(), prof.stored_bytes.end());
  sizes.transient.forward_extra.assign(prof.forward_extra_bytes.begin(), prof.forward_extra_bytes.end());
  sizes.transient.backward_extra.assign(prof.backward_extra_bytes.begin(), prof.backward_extra_bytes.end());
  return sizes;
}

// --checkpoint (if given): the model and the trainer's state, with the run's configuration as metadata.
void save_checkpoint(const Flags& f, const CyclicTrainer& trainer, Rule rule, Mode mode) {
  if (f.checkpoint.empty()) return;
  NamedTensors all = trainer.model_state();
  for (auto& kv : trainer.checkpoint_state()) all.push_back(kv);
  save_safetensors(f.checkpoint, all,
                   {{"format", "pt"},
                    {"tandem.checkpoint", "cyclic"},
                    {"cyclic.rule", rule_name(rule)},
                    {"cyclic.mode", mode_name(mode)},
                    {"cyclic.model", f.model}});
}

// The training loop: chunks of rounds (a timeline each) from the loader, a log line per chunk, a checkpoint
// per epoch, evaluations, and the first chunk's recording when --out is given.
class TrainingLoop {
 public:
  TrainingLoop(const Flags& f, const TrainerOptions& o, const Rounds& rounds, CyclicTrainer& trainer,
               data::Loader& loader, std::shared_ptr<data::Dataset> test_set, const data::Pipeline& test_pipe,
               ModelFactory factory, const StageSizes& sizes)
      : f_(f),
        o_(o),
        rounds_(rounds),
        trainer_(trainer),
        loader_(loader),
        test_set_(std::move(test_set)),
        test_pipe_(test_pipe),
        factory_(std::move(factory)),
        sizes_(sizes),
        recorded_(f.out.empty()),
        last_eval_epoch_(static_cast<double>(trainer.round()) / rounds.per_epoch) {}

  // Trains to the last round; returns what summary.json records of the run.
  Json run() {
    open_logs();
    ProgressTask task;
    task.label = rule_name(o_.rule);
    task.unit = "round";
    task.total = rounds_.total;
    task.done = std::min(trainer_.round(), rounds_.total);
    task.items_per_step = f_.micro_batches * f_.batch;
    Progress live(task);
    while (trainer_.round() < rounds_.total) {
      const int64_t chunk = next_chunk();
      const bool record = !recorded_;
      trainer_.set_recording(record, record);
      const double t0 = host_time_s();
      std::vector<RoundStats> stats = trainer_.train(chunk, [&](int64_t) {
        std::optional<data::Batch> b = loader_.next();
        TD_ASSERT(b.has_value(), "the loader ran out of batches inside an epoch");
        return MicroBatch{b->images, b->labels};
      });
      const double wall = (host_time_s() - t0) / static_cast<double>(chunk);
      loader_round_ += chunk;
      const double steady = steady_round_s(trainer_.last_run());
      if (steady > 0) {
        steady_sum_ += steady;
        ++steady_count_;
      }
      if (record) {
        summary_["recording"] = write_recording(f_, trainer_, sizes_.stored, sizes_.transient);
        recorded_ = true;
      }
      log_chunk(live, chunk, stats, wall, steady);
      after_chunk(live);
    }
    save_checkpoint(f_, trainer_, o_.rule, o_.mode);
    return summary();
  }

 private:
  void open_logs() {
    if (f_.out.empty()) return;
    log_.emplace(open_out(f_.out, "log.csv"));
    *log_ << "round,epoch,loss,train_accuracy,lr,seconds_per_round,steady_seconds_per_round\n";
    evals_.emplace(open_out(f_.out, "eval.csv"));
    *evals_ << "round,epoch,test_accuracy,test_loss\n";
  }

  // Positions the loader at the current round (after a resume or an epoch's end) and returns the rounds of
  // the next chunk: up to --log-every, within the epoch (the first recorded chunk: up to --record-rounds).
  int64_t next_chunk() {
    const int64_t round = trainer_.round();
    const int64_t epoch = round / rounds_.per_epoch, pos = round % rounds_.per_epoch;
    if (loader_round_ != round) {
      loader_.set_epoch(epoch);
      for (int64_t i = 0; i < pos * f_.micro_batches; ++i) loader_.next();
      loader_round_ = round;
    }
    int64_t chunk = std::min({f_.log_every, rounds_.per_epoch - pos, rounds_.total - round});
    if (!recorded_) chunk = std::min(chunk, f_.record_rounds > 0 ? f_.record_rounds : f_.log_every);
    return chunk;
  }

  double epoch_f() const { return static_cast<double>(trainer_.round()) / rounds_.per_epoch; }

  // The chunk's log line (stdout and log.csv): loss and accuracy over its rounds, time per round.
  void log_chunk(Progress& live, int64_t chunk, const std::vector<RoundStats>& stats, double wall, double steady) {
    double loss = 0;
    int64_t correct = 0, samples = 0;
    for (const RoundStats& s : stats) {
      loss += s.loss / static_cast<double>(stats.size());
      correct += s.correct;
      samples += s.samples;
    }
    const double lr = f_.lr * o_.lr_schedule->factor(trainer_.round() - 1);
    const double epoch = epoch_f();
    live.step(chunk);
    live.print_above([&] {
      std::printf("round %6lld  epoch %6.2f  loss %.4f  train acc %.4f  lr %.4g  %.4f s/round (steady %.4f)\n",
                  static_cast<long long>(trainer_.round()), epoch, loss,
                  samples ? static_cast<double>(correct) / samples : 0.0, lr, wall, steady);
      std::fflush(stdout);
    });
    if (log_)
      *log_ << trainer_.round() << "," << epoch << "," << loss << "," << (samples ? double(correct) / samples : 0.0)
            << "," << lr << "," << wall << "," << steady << "\n"
            << std::flush;
  }

  // At an epoch's end: drains the loader and saves a checkpoint; evaluates every --eval-every epochs and at
  // the end.
  void after_chunk(Progress& live) {
    const bool epoch_end = trainer_.round() % rounds_.per_epoch == 0;
    const bool last = trainer_.round() >= rounds_.total;
    const double epoch = epoch_f();
    if (epoch_end) {
      while (loader_.next()) {  // the batches left over after the epoch's whole rounds
      }
      loader_round_ = -1;
      save_checkpoint(f_, trainer_, o_.rule, o_.mode);
    }
    if ((epoch_end && f_.eval_every > 0 && epoch - last_eval_epoch_ + 1e-9 >= f_.eval_every) || last) {
      last_eval_ = evaluate(factory_, trainer_.model_state(), test_set_, test_pipe_, f_.loader_threads,
                            trainer_.workers()[0].device);
      last_eval_epoch_ = epoch;
      live.print_above([&] {
        std::printf("eval  round %6lld  epoch %6.2f  test acc %.4f  test loss %.4f\n",
                    static_cast<long long>(trainer_.round()), epoch, last_eval_.accuracy, last_eval_.loss);
        std::fflush(stdout);
      });
      if (evals_)
        *evals_ << trainer_.round() << "," << epoch << "," << last_eval_.accuracy << "," << last_eval_.loss << "\n"
                << std::flush;
    }
  }

  Json summary() {
    summary_["rule"] = Json(rule_name(o_.rule));
    summary_["mode"] = Json(mode_name(o_.mode));
    summary_["micro_batches"] = Json(f_.micro_batches);
    summary_["stages"] = Json(f_.stages);
    summary_["model"] = Json(f_.model);
    summary_["dataset"] = Json(f_.dataset);
    summary_["rounds"] = Json(trainer_.round());
    summary_["test_accuracy"] = Json(last_eval_.accuracy);
    summary_["test_loss"] = Json(last_eval_.loss);
    summary_["steady_seconds_per_round"] = Json(steady_count_ ? steady_sum_ / steady_count_ : 0.0);
    return summary_;
  }

  const Flags& f_;
  const TrainerOptions& o_;
  const Rounds rounds_;
  CyclicTrainer& trainer_;
  data::Loader& loader_;
  const std::shared_ptr<data::Dataset> test_set_;
  const data::Pipeline& test_pipe_;
  const ModelFactory factory_;
  const StageSizes& sizes_;
  std::optional<std::ofstream> log_, evals_;
  Json summary_ = Json::object();
  int64_t loader_round_ = -1;  // the round the loader's next batch belongs to
  bool recorded_;
  double last_eval_epoch_;
  EvalResult last_eval_;
  double steady_sum_ = 0;
  int steady_count_ = 0;
};

// The last timeline's messages per round by kind (sizes from the measured stages: in the policy's dtypes),
// printed and as summary.json records them.
Json report_messages(const CyclicTrainer& trainer) {
  const Timeline& tl = trainer.last_run().timeline;
  const MessageBytes m = message_bytes(tl);
  const double rounds = static_cast<double>(tl.spec.rounds), mib = 1048576.0;
  const char* act = dtype_name(activation_dtype(DType::F32));
  std::printf(
      "cyclic: messages per round: activations %.3f MiB and activation gradients %.3f MiB in %s, weight "
      "gradients %.3f MiB and parameters %.3f MiB in f32\n",
      m.activations / rounds / mib, m.activation_gradients / rounds / mib, act, m.gradients / rounds / mib,
      m.parameters / rounds / mib);
  Json j = Json::object();
  j["activation_dtype"] = Json(act);
  j["activations"] = Json(m.activations / rounds);
  j["activation_gradients"] = Json(m.activation_gradients / rounds);
  j["gradients"] = Json(m.gradients / rounds);
  j["parameters"] = Json(m.parameters / rounds);
  return j;
}

int run(const Flags& f) {
  const Rule rule = parse_rule(f.rule);
  const Mode mode = parse_mode(f.mode);
  check_config(f.micro_batches, f.stages);
  if (!f.out.empty()) make_dirs(f.out);
  if (f.simulate && !f.gpu.empty()) {
    simulate_on_gpu(f);
    return 0;
  }
  if (f.simulate) {
    simulate(f, rule);
    return 0;
  }
  TD_CHECK(f.gpu.empty(), "--gpu needs --simulate");
  PrecisionGuard policy(f.precision);  // this thread's (profile, evaluation) and, through run_on_workers, the workers'
  auto spec = models::parse_model_spec(f.model);
  const Datasets sets = open_datasets(f);
  const ModelFactory factory = model_factory(std::move(spec), *sets.train, f.seed);
  const data::Pipeline train_pipe = pipeline(f, true), test_pipe = pipeline(f, false);
  data::LoaderOptions lo;
  lo.batch_size = f.batch;
  lo.seed = f.seed;
  lo.num_workers = f.loader_threads;
  data::Loader loader(sets.train, train_pipe, lo);
  const Rounds rounds = count_rounds(f, loader, *sets.train);

  Shape image = loader.image_shape();
  Shape micro_input{f.batch, image[0], image[1], image[2]};
  Shape sample{1, image[0], image[1], image[2]};
  const TrainerOptions o = trainer_options(f, rule, mode, model_units(*factory(), sample), rounds);
  const int N = f.micro_batches, S = f.stages;
  const std::string worker_spec = f.workers.empty() ? "cpu:" + std::to_string(workers_needed(mode, N, S)) : f.workers;
  std::vector<parallel::Worker> workers = parallel::make_workers(worker_spec);
  if (f.precision != Precision::F32)
    std::printf("precision: %s\n", precision_summary(f.precision, workers[0].device).c_str());
  warm_up(factory, micro_input, o, workers);
  CyclicTrainer trainer(factory, micro_input, o, std::move(workers));
  std::printf("cyclic: %s, %s, %s sync, N = %d micro-batches of %lld, S = %d stages on %s\n", rule_name(rule),
              mode_name(mode), mode == Mode::DpWorkers ? sync_name(o.sync ? *o.sync : default_sync(rule)) : "no", N,
              static_cast<long long>(f.batch), S, worker_spec.c_str());
  std::printf("cyclic: %s; split %s\n", sets.train->describe().c_str(),
              describe_split(trainer.units(), trainer.stage_starts()).c_str());
  const StageSizes sizes = measure_stages(factory, micro_input, sample, S, trainer);

  if (!f.resume.empty()) {
    SafetensorsContents ck = load_safetensors(f.resume);
    trainer.load_checkpoint_state(ck.tensors);
    std::printf("cyclic: resumed from %s at round %lld\n", f.resume.c_str(), static_cast<long long>(trainer.round()));
  }
  Json summary = TrainingLoop(f, o, rounds, trainer, loader, sets.test, test_pipe, factory, sizes).run();
  summary["precision"] = Json(precision_name(f.precision));
  summary["message_bytes_per_round"] = report_messages(trainer);
  if (!f.out.empty()) {
    std::ofstream js = open_out(f.out, "summary.json");
    js << dump_json(summary, 2) << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace cyclic_tool
}  // namespace tandem

int main(int argc, char** argv) {
  using namespace tandem;
  const cyclic_tool::Flags parsed = cyclic_tool::parse_flags(argc, argv);
  // Modelled GPUs: the simulated one shapes its launches as an H100 or H200 (132 SMs) does.
  if (!parsed.gpu.empty()) setenv("TANDEM_CUDASIM_SMS", "132", 0);
  try {
    return cyclic_tool::run(parsed);
  } catch (const ValueError& e) {
    flags::usage_error(e.message());
  } catch (const ShapeError& e) {
    flags::usage_error(e.message());
  } catch (const Error& e) {
    std::fprintf(stderr, "cyclic: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cyclic: %s\n", e.what());
    return 1;
  }
}
