// Cyclic DP against DP on the same CPU workers: steady-state round time (goal: CDP within 5% of DP) and the
// peak activation memory (total over workers) of DP over CDP, measured and as the unit-time model predicts from
// the model's own stage sizes (2S/(S+1) for equal stages). Rules alternate in repetitions so that load from
// other processes hits them alike; the table reports medians and the machine's load average.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/load_average.h"
#include "models/registry.h"
#include "parallel/cyclic/accounting.h"
#include "parallel/cyclic/profile.h"
#include "parallel/cyclic/trainer.h"
#include "parallel/simulator.h"
#include "runtime/base/error.h"
#include "runtime/memory/stream.h"
#include "runtime/tensor/rng.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace {

using namespace parallel::cyclic;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Row {
  std::vector<double> steady, wall;
  double measured_peak = 0, predicted_peak = 0;
};

struct Config {
  int n, s;
  Mode mode;
  bool memory_split;  // stages balanced by stored activation bytes instead of FLOPs
};

// Stage starts balancing the stored activation bytes of the units (each unit profiled as a stage of its own).
std::vector<size_t> memory_balanced_split(const ModelFactory& factory, const Shape& input, int stages) {
  Shape sample = input;
  sample[0] = 1;
  std::vector<Unit> units = model_units(*factory(), sample);
  std::vector<size_t> each(units.size());
  for (size_t i = 0; i < each.size(); ++i) each[i] = i;
  StageProfile p = profile_stages(make_stages(units, each), input, 1);
  for (size_t i = 0; i < units.size(); ++i) units[i].flops = static_cast<double>(p.stored_bytes[i]);
  return balanced_split(units, stages);
}

// "NxS" -> the DP-workers configs of N micro-batches and S stages, balanced by FLOPs and by memory.
void add_config(const std::string& c, std::vector<Config>& list) {
  int n = 0, s = 0;
  char rest = 0;
  TD_CHECK(std::sscanf(c.c_str(), "%dx%d%c", &n, &s, &rest) == 2 && n >= 1 && s >= 1, "--configs: bad config '", c,
           "' (want NxS, e.g. 4x4)");
  list.push_back({n, s, Mode::DpWorkers, false});
  list.push_back({n, s, Mode::DpWorkers, true});
}

struct BenchFlags {
  std::string model = "resnet18:cifar,width=8";
  int64_t batch = 16, size = 32, rounds = 16, reps = 3;
  std::vector<Config> configs;
};

BenchFlags parse_flags(int argc, char** argv) {
  BenchFlags f;
  flags::Parser p("cyclic_bench",
                  "cyclic_bench [--model SPEC] [--batch B] [--size HW] [--rounds K] [--reps R] "
                  "[--configs NxS,...]",
                  "");
  p.text("--model", "SPEC", &f.model, "default resnet18:cifar,width=8");
  p.integer("--batch", "B", &f.batch, "micro-batch (default 16)", 1);
  p.integer("--size", "HW", &f.size, "HWxHW inputs (default 32x32)", 1);
  p.integer("--rounds", "K", &f.rounds, "timed rounds (default 16)", 1);
  p.integer("--reps", "R", &f.reps, "repetitions (default 3)", 1);
  p.custom(
      "--configs", "NxS,...",
      [&](const std::string& v) {
        f.configs.clear();
        std::stringstream items(v);
        for (std::string c; std::getline(items, c, ',');) add_config(c, f.configs);
      },
      "micro-batches x stages (default 2x2,4x4)");
  p.parse(argc, argv);
  if (f.configs.empty())
    for (const char* c : {"2x2", "4x4"}) add_config(c, f.configs);
  return f;
}

const std::vector<Rule> kRules{Rule::Dp, Rule::CdpV1, Rule::CdpV2};

// One config's trainers (one per rule, warmed up) and the stage sizes the memory model predicts from.
struct Trainers {
  std::map<Rule, std::unique_ptr<CyclicTrainer>> of;
  std::vector<double> stage_bytes;
  Transients transient;
};

Trainers make_trainers(const Config& c, const ModelFactory& factory, const Shape& input, const MicroBatchFn& batches) {
  Trainers t;
  std::vector<size_t> memory_starts;
  for (Rule r : kRules) {
    TrainerOptions o;
    o.rule = r;
    o.mode = c.mode;
    o.micro_batches = c.n;
    o.stages = c.s;
    auto workers = parallel::make_workers("cpu:" + std::to_string(workers_needed(c.mode, c.n, c.s)));
    if (c.memory_split) {
      DeviceGuard on_device(workers[0].device);
      if (memory_starts.empty()) memory_starts = memory_balanced_split(factory, input, c.s);
      o.stage_starts = memory_starts;
    }
    t.of[r].reset(new CyclicTrainer(factory, input, o, std::move(workers)));
    if (t.stage_bytes.empty()) {
      DeviceGuard on_device(t.of[r]->workers()[0].device);
      Shape sample = input;
      sample[0] = 1;
      StageProfile p = profile_stages(make_stages(model_units(*factory(), sample), t.of[r]->stage_starts()), input);
      for (int64_t b : p.stored_bytes) t.stage_bytes.push_back(static_cast<double>(b));
      for (int64_t b : p.forward_extra_bytes) t.transient.forward_extra.push_back(static_cast<double>(b));
      for (int64_t b : p.backward_extra_bytes) t.transient.backward_extra.push_back(static_cast<double>(b));
    }
    // Timelines ordered by the figure's time steps: CDP's offsets are then P/N of a round of equal stages.
    t.of[r]->set_costs(StageCosts::unit(c.s));
    t.of[r]->train(2, batches);  // warm-up: every shape once, untimed (first calls cost more)
  }
  return t;
}

// Each rule's steady and wall round times over the repetitions (rules alternating), then its peak activation
// memory over 6 recorded rounds, measured and predicted.
std::map<Rule, Row> measure(Trainers& t, const BenchFlags& f, const MicroBatchFn& batches) {
  std::map<Rule, Row> rows;
  for (int64_t rep = 0; rep < f.reps; ++rep)
    for (Rule r : kRules) {
      double t0 = host_time_s();
      t.of[r]->train(f.rounds, batches);
      rows[r].wall.push_back((host_time_s() - t0) / static_cast<double>(f.rounds));
      rows[r].steady.push_back(steady_round_s(t.of[r]->last_run()));
    }
  for (Rule r : kRules) {
    CyclicTrainer& trainer = *t.of[r];
    trainer.set_recording(true, false);
    trainer.train(6, batches);
    trainer.set_recording(false, false);
    const RunRecord& run = trainer.last_run();
    parallel::SimResult sim = parallel::simulate(run.timeline.schedule);
    rows[r].measured_peak =
        aligned_activations(run.timeline, sim.times, run.times, run.memory, run.memory_base).total.peak();
    rows[r].predicted_peak = stored_activations(run.timeline, sim.times, t.stage_bytes, t.transient).total.peak();
  }
  return rows;
}

void print_rows(const Config& c, std::map<Rule, Row>& rows) {
  const double dp_steady = median(rows[Rule::Dp].steady);
  for (Rule r : kRules) {
    const Row& row = rows[r];
    const double steady = median(row.steady);
    std::printf("%dx%-4d %-7s %-7s %-10s %10.4f %8.1f%% %10.4f %11.2f", c.n, c.s, c.memory_split ? "memory" : "flops",
                rule_name(r), sync_name(default_sync(r)), steady, 100.0 * (steady / dp_steady - 1), median(row.wall),
                row.measured_peak / (1 << 20));
    if (r == Rule::Dp) {
      std::printf("\n");
      continue;
    }
    const double measured = rows[Rule::Dp].measured_peak / row.measured_peak;
    const double predicted = rows[Rule::Dp].predicted_peak / row.predicted_peak;
    std::printf(" %11.3f %9.3f %9.3f %9.3f\n", measured, predicted, 2.0 * c.s / (c.s + 1), measured / predicted);
  }
}

int run(int argc, char** argv) {
  const BenchFlags f = parse_flags(argc, argv);
  auto spec = models::parse_model_spec(f.model);
  spec.second.num_classes = 10;
  ModelFactory factory = [spec] {
    return std::static_pointer_cast<models::Sequential>(models::make_model(spec.first, spec.second));
  };
  const int64_t batch = f.batch;
  const Shape input{batch, spec.second.in_channels, f.size, f.size};
  std::printf(
      "cyclic_bench: %s, micro-batch %lld x %lldx%lld, %lld timed rounds x %lld repetitions, load average "
      "%.1f on this machine\n\n",
      f.model.c_str(), static_cast<long long>(batch), static_cast<long long>(f.size), static_cast<long long>(f.size),
      static_cast<long long>(f.rounds), static_cast<long long>(f.reps), load_average());
  std::printf("%-6s %-7s %-7s %-10s %10s %9s %10s %11s %9s %9s %9s %9s\n", "N x S", "split", "rule", "sync", "s/round",
              "vs DP", "wall s/rd", "peak MiB", "DP/CDP", "predicted", "2S/(S+1)", "meas/pred");
  const MicroBatchFn batches = [&](int64_t index) {
    Generator g(7, static_cast<uint64_t>(index) << 32);
    MicroBatch b;
    b.images = randn(input, g);
    std::vector<int64_t> labels(static_cast<size_t>(batch));
    for (auto& l : labels) l = static_cast<int64_t>(g.integer(10));
    b.labels = from_vector<int64_t>(labels, {batch});
    return b;
  };
  for (const Config& c : f.configs) {
    Trainers trainers = make_trainers(c, factory, input, batches);
    std::map<Rule, Row> rows = measure(trainers, f, batches);
    print_rows(c, rows);
  }
  std::printf(
      "\nsplit: stages balanced by FLOPs (the default) or by the units' stored activation bytes;\n"
      "s/round: median over repetitions of the steady-state round time (worker 0's round starts);\n"
      "vs DP: its difference to DP's; wall s/rd: whole timelines including CDP's one-time fill and drain;\n"
      "both exclude a warm-up: 2 untimed rounds of each trainer first (every shape run once);\n"
      "peak MiB: activation bytes summed over workers on the schedule's time steps (each worker's measured\n"
      "peak during each instruction); predicted: the unit-time model with the stages' measured sizes (stored\n"
      "activations, plus each forward's and backward's own temporaries while it runs).\n");
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  return tandem::flags::run_reporting_errors("cyclic_bench", [&] { return tandem::run(argc, argv); });
}
