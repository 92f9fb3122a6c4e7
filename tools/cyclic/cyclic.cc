// tools:cyclic: trains a model with Cyclic Data Parallelism (or DP) on CPU threads or GPUs and writes logs,
// memory and communication curves and a trace; with --simulate, writes the unit-time timelines instead.
#include <algorithm>
#include <cmath>
#include <cstdio>
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
#include "runtime/tensor/rng.h"
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

int run(const Flags& f) {
  const Rule rule = parse_rule(f.rule);
  const Mode mode = parse_mode(f.mode);
  check_config(f.micro_batches, f.stages);
  if (!f.out.empty()) make_dirs(f.out);
  if (f.simulate) {
    simulate(f, rule);
    return 0;
  }
  auto spec = models::parse_model_spec(f.model);
  auto train_set = data::open_dataset(f.dataset, true);
  auto test_set = data::open_dataset(f.dataset, false);
  if (f.subset > 0) train_set = std::make_shared<Subset>(train_set, f.subset);
  if (f.test_subset > 0) test_set = std::make_shared<Subset>(test_set, f.test_subset);
  spec.second.num_classes = train_set->num_classes();
  spec.second.in_channels = train_set->get(0).image.channels;
  spec.second.seed = f.seed;
  const std::string model_name = spec.first;
  const models::ModelOptions model_options = spec.second;
  ModelFactory factory = [model_name, model_options] {
    return std::static_pointer_cast<models::Sequential>(models::make_model(model_name, model_options));
  };
  data::Pipeline train_pipe =
      data::Pipeline::parse(f.train_transform.empty() ? default_transform(f.dataset, true) : f.train_transform);
  data::Pipeline test_pipe =
      data::Pipeline::parse(f.test_transform.empty() ? default_transform(f.dataset, false) : f.test_transform);
  data::LoaderOptions lo;
  lo.batch_size = f.batch;
  lo.seed = f.seed;
  lo.num_workers = f.loader_threads;
  data::Loader loader(train_set, train_pipe, lo);
  const int N = f.micro_batches, S = f.stages;
  const int64_t rounds_per_epoch = loader.batches_per_epoch() / N;
  if (rounds_per_epoch < 1)
    flags::usage_error("the training set (" + std::to_string(train_set->size()) + " samples) is too small for " +
                       std::to_string(N) + " micro-batches of " + std::to_string(f.batch));
  int64_t total_rounds = static_cast<int64_t>(std::ceil(f.epochs * static_cast<double>(rounds_per_epoch)));
  if (f.max_rounds > 0) total_rounds = std::min(total_rounds, f.max_rounds);
  if (total_rounds < 1) flags::usage_error("nothing to train: --epochs gives no round");

  Shape image = loader.image_shape();
  Shape micro_input{f.batch, image[0], image[1], image[2]};
  Shape sample{1, image[0], image[1], image[2]};
  std::vector<Unit> units = model_units(*factory(), sample);
  TrainerOptions o;
  o.rule = rule;
  o.mode = mode;
  o.micro_batches = N;
  o.stages = S;
  if (!f.split.empty()) o.stage_starts = parse_split(f.split, units);
  if (f.sync != "auto") o.sync = parse_sync(f.sync);
  o.lr = f.lr;
  o.momentum = f.momentum;
  o.weight_decay = f.weight_decay;
  o.nesterov = f.nesterov;
  o.lr_schedule = optim::parse_lr_schedule(f.lr_schedule, rounds_per_epoch, total_rounds);
  const std::string worker_spec = f.workers.empty() ? "cpu:" + std::to_string(workers_needed(mode, N, S)) : f.workers;
  std::vector<parallel::Worker> workers = parallel::make_workers(worker_spec);
  warm_up(factory, micro_input, o, workers);
  CyclicTrainer trainer(factory, micro_input, o, std::move(workers));
  std::printf("cyclic: %s, %s, %s sync, N = %d micro-batches of %lld, S = %d stages on %s\n", rule_name(rule),
              mode_name(mode), mode == Mode::DpWorkers ? sync_name(o.sync ? *o.sync : default_sync(rule)) : "no", N,
              static_cast<long long>(f.batch), S, worker_spec.c_str());
  std::printf("cyclic: %s; split %s\n", train_set->describe().c_str(),
              describe_split(trainer.units(), trainer.stage_starts()).c_str());

  // Order the timelines by measured stage times (on the first worker's device), and predict memory from measured
  // stage sizes.
  const Device device = trainer.workers()[0].device;
  StageProfile prof;
  {
    DeviceGuard on_device(device);
    auto profiled = factory();
    prof = profile_stages(make_stages(model_units(*profiled, sample), trainer.stage_starts()), micro_input, 3);
  }
  trainer.set_costs(costs_from_profile(prof));
  std::printf(
      "cyclic: timings exclude a warm-up: %d rounds of a separate trainer on random inputs before the first, "
      "and an untimed pass of each stage before its profile\n",
      kWarmupRounds);
  for (int l = 0; l < S; ++l)
    std::printf("cyclic: stage %d: forward %.2f ms, backward %.2f ms, %.2f MiB stored, %.2f MiB parameters\n", l,
                1e3 * prof.forward_s[l], 1e3 * prof.backward_s[l], prof.stored_bytes[l] / 1048576.0,
                prof.param_bytes[l] / 1048576.0);
  std::vector<double> stage_bytes(prof.stored_bytes.begin(), prof.stored_bytes.end());
  Transients transient;
  transient.forward_extra.assign(prof.forward_extra_bytes.begin(), prof.forward_extra_bytes.end());
  transient.backward_extra.assign(prof.backward_extra_bytes.begin(), prof.backward_extra_bytes.end());

  if (!f.resume.empty()) {
    SafetensorsContents ck = load_safetensors(f.resume);
    trainer.load_checkpoint_state(ck.tensors);
    std::printf("cyclic: resumed from %s at round %lld\n", f.resume.c_str(), static_cast<long long>(trainer.round()));
  }
  auto save = [&] {
    if (f.checkpoint.empty()) return;
    NamedTensors all = trainer.model_state();
    for (auto& kv : trainer.checkpoint_state()) all.push_back(kv);
    save_safetensors(f.checkpoint, all,
                     {{"format", "pt"},
                      {"tandem.checkpoint", "cyclic"},
                      {"cyclic.rule", rule_name(rule)},
                      {"cyclic.mode", mode_name(mode)},
                      {"cyclic.model", f.model}});
  };

  std::optional<std::ofstream> log, evals;
  if (!f.out.empty()) {
    log.emplace(open_out(f.out, "log.csv"));
    *log << "round,epoch,loss,train_accuracy,lr,seconds_per_round,steady_seconds_per_round\n";
    evals.emplace(open_out(f.out, "eval.csv"));
    *evals << "round,epoch,test_accuracy,test_loss\n";
  }
  Json summary = Json::object();
  int64_t loader_round = -1;  // the round the loader's next batch belongs to
  bool recorded = f.out.empty();
  double last_eval_epoch = static_cast<double>(trainer.round()) / rounds_per_epoch;
  EvalResult last_eval;
  double steady_sum = 0;
  int steady_count = 0;
  ProgressTask task;
  task.label = rule_name(rule);
  task.unit = "round";
  task.total = total_rounds;
  task.done = std::min(trainer.round(), total_rounds);
  task.items_per_step = N * f.batch;
  Progress live(task);
  while (trainer.round() < total_rounds) {
    const int64_t round = trainer.round();
    const int64_t epoch = round / rounds_per_epoch, pos = round % rounds_per_epoch;
    if (loader_round != round) {
      loader.set_epoch(epoch);
      for (int64_t i = 0; i < pos * N; ++i) loader.next();
      loader_round = round;
    }
    int64_t chunk = std::min({f.log_every, rounds_per_epoch - pos, total_rounds - round});
    const bool record = !recorded;
    if (record) chunk = std::min(chunk, f.record_rounds > 0 ? f.record_rounds : f.log_every);
    trainer.set_recording(record, record);
    const double t0 = host_time_s();
    std::vector<RoundStats> stats = trainer.train(chunk, [&](int64_t) {
      std::optional<data::Batch> b = loader.next();
      TD_ASSERT(b.has_value(), "the loader ran out of batches inside an epoch");
      return MicroBatch{b->images, b->labels};
    });
    const double wall = (host_time_s() - t0) / static_cast<double>(chunk);
    loader_round += chunk;
    const double steady = steady_round_s(trainer.last_run());
    if (steady > 0) {
      steady_sum += steady;
      ++steady_count;
    }
    if (record) {
      summary["recording"] = write_recording(f, trainer, stage_bytes, transient);
      recorded = true;
    }
    double loss = 0;
    int64_t correct = 0, samples = 0;
    for (const RoundStats& s : stats) {
      loss += s.loss / static_cast<double>(stats.size());
      correct += s.correct;
      samples += s.samples;
    }
    const double lr = f.lr * o.lr_schedule->factor(trainer.round() - 1);
    const double epoch_f = static_cast<double>(trainer.round()) / rounds_per_epoch;
    live.step(chunk);
    live.print_above([&] {
      std::printf("round %6lld  epoch %6.2f  loss %.4f  train acc %.4f  lr %.4g  %.4f s/round (steady %.4f)\n",
                  static_cast<long long>(trainer.round()), epoch_f, loss,
                  samples ? static_cast<double>(correct) / samples : 0.0, lr, wall, steady);
      std::fflush(stdout);
    });
    if (log)
      *log << trainer.round() << "," << epoch_f << "," << loss << "," << (samples ? double(correct) / samples : 0.0)
           << "," << lr << "," << wall << "," << steady << "\n"
           << std::flush;
    const bool epoch_end = trainer.round() % rounds_per_epoch == 0;
    const bool last = trainer.round() >= total_rounds;
    if (epoch_end) {
      while (loader.next()) {  // the batches left over after the epoch's whole rounds
      }
      loader_round = -1;
      save();
    }
    if ((epoch_end && f.eval_every > 0 && epoch_f - last_eval_epoch + 1e-9 >= f.eval_every) || last) {
      last_eval = evaluate(factory, trainer.model_state(), test_set, test_pipe, f.loader_threads, device);
      last_eval_epoch = epoch_f;
      live.print_above([&] {
        std::printf("eval  round %6lld  epoch %6.2f  test acc %.4f  test loss %.4f\n",
                    static_cast<long long>(trainer.round()), epoch_f, last_eval.accuracy, last_eval.loss);
        std::fflush(stdout);
      });
      if (evals)
        *evals << trainer.round() << "," << epoch_f << "," << last_eval.accuracy << "," << last_eval.loss << "\n"
               << std::flush;
    }
  }
  save();
  if (!f.out.empty()) {
    summary["rule"] = Json(rule_name(rule));
    summary["mode"] = Json(mode_name(mode));
    summary["micro_batches"] = Json(N);
    summary["stages"] = Json(S);
    summary["model"] = Json(f.model);
    summary["dataset"] = Json(f.dataset);
    summary["rounds"] = Json(trainer.round());
    summary["test_accuracy"] = Json(last_eval.accuracy);
    summary["test_loss"] = Json(last_eval.loss);
    summary["steady_seconds_per_round"] = Json(steady_count ? steady_sum / steady_count : 0.0);
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
