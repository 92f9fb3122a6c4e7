// Distillation sessions: data, workers and communicators, profile, plans, strategy runs, reports.
#include "parallel/bd/session.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/dataset.h"
#include "data/transforms.h"
#include "parallel/communicator.h"
#include "parallel/mpi_comm.h"
#include "parallel/nccl_comm.h"
#include "parallel/simulator.h"
#include "parallel/worker.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"

namespace tandem {
namespace parallel {
namespace bd {

namespace {

// The first `n` samples of a dataset.
class Subset : public data::Dataset {
 public:
  Subset(std::shared_ptr<const data::Dataset> base, int64_t n) : base_(std::move(base)), n_(n) {}
  int64_t size() const override { return n_; }
  int64_t num_classes() const override { return base_->num_classes(); }
  data::Sample get(int64_t index) const override {
    TD_CHECK_INDEX(index >= 0 && index < n_, "sample ", index, " is out of range for ", n_, " samples");
    return base_->get(index);
  }
  std::string describe() const override {
    return base_->describe() + " (the first " + std::to_string(n_) + " samples)";
  }

 private:
  std::shared_ptr<const data::Dataset> base_;
  int64_t n_;
};

// "4 x cpu", "4 x cuda", "4 x cuda:0/4" for `count` workers of the kind of `one`.
std::string device_summary(int count, const Worker& one) {
  std::string name = one.name();
  const size_t hash = name.find('#');
  if (hash != std::string::npos) name = name.substr(0, hash);
  if (one.kind == WorkerKind::CudaDevice) name = "cuda";
  return std::to_string(count) + " x " + name;
}

// The training split, cut to the options' subset.
std::shared_ptr<const data::Dataset> open_training_set(const SessionOptions& o) {
  std::shared_ptr<const data::Dataset> dataset = data::open_dataset(o.dataset, true);
  TD_CHECK(o.subset >= 0, "the data subset must be a sample count, got ", o.subset);
  if (o.subset > 0 && o.subset < dataset->size()) dataset = std::make_shared<Subset>(dataset, o.subset);
  return dataset;
}

// The options' workload; when it gives no sample shape, the shape the training transform makes of the first
// image.
WorkloadSpec workload_spec(const SessionOptions& o, const data::Dataset& dataset) {
  WorkloadSpec spec = o.workload;
  if (spec.sample.empty()) {
    const data::Image first = dataset.get(0).image;
    spec.sample = data::Pipeline::parse(o.train.augment).output_shape(first.height, first.width, first.channels);
  }
  return spec;
}

// The strategies and the memory limit fit `workers` workers and a teacher of `blocks` blocks.
void check_strategies(const SessionOptions& o, int workers, int blocks) {
  for (Strategy s : o.strategies) {
    if (s == Strategy::TR || s == Strategy::DPU)
      TD_CHECK(workers <= blocks, strategy_title(s), " runs one pipeline stage per worker: ", workers,
               " workers need at least ", workers, " blocks, the teacher has ", blocks,
               " (use fewer workers, or TR+DPU+AHD, which replicates stages)");
    if (s == Strategy::DP)
      TD_CHECK(o.train.batch % workers == 0, "DP shards each batch evenly: a batch of ", o.train.batch,
               " rows does not split over ", workers, " workers");
  }
  TD_CHECK(o.memory_limit == 0 || o.plan_model == PlanModel::Tandem,
           "a memory limit needs the tandem plan model: the pipe-bd model (the paper's planner) has none");
}

// What every rank of a session starts from: the options, the context of its runs, and the profile and plan
// given by file (empty when none).
struct SessionInputs {
  const SessionOptions& o;
  const RunContext& ctx;
  int workers = 0, blocks = 0;
  BlockProfile given_profile;
  Plan given_plan;
};

// What a rank planned and ran.
struct RankOutcome {
  BlockProfile profile;
  Plan pipeline, hybrid;
  std::vector<StrategyResult> results;
};

void say(const RunContext& my, const std::string& line) {
  if (my.log) my.log(line);
}

// The hybrid plan: planned on the profile, or the given one with its modelled time and memory on the profile.
Plan hybrid_plan(const SessionInputs& in, const BlockProfile& profile) {
  const SessionOptions& o = in.o;
  if (o.plan_path.empty()) return plan_hybrid(profile, in.workers, o.memory_limit, o.plan_model);
  Plan hybrid = in.given_plan;
  hybrid.bottleneck_s = plan_time(profile, hybrid, o.plan_model);
  hybrid.peak_memory = 0;
  for (const Stage& s : hybrid.stages) hybrid.peak_memory = std::max(hybrid.peak_memory, stage_memory(profile, s));
  TD_CHECK(o.memory_limit == 0 || hybrid.peak_memory <= o.memory_limit, "the plan ", o.plan_path, " needs about ",
           hybrid.peak_memory, " bytes per worker, over the memory limit of ", o.memory_limit);
  return hybrid;
}

// The profile (measured by all ranks together unless given) and the plans; rank 0 writes and tells them.
void plan_rank(const SessionInputs& in, RunContext& my, Worker& worker, Communicator& world, RankOutcome& out) {
  const SessionOptions& o = in.o;
  out.profile = in.given_profile;
  if (o.profile_path.empty()) {
    say(my, "profiling " + std::to_string(in.blocks) + " blocks at per-worker batches B/g, g = 1.." +
                std::to_string(o.profile.max_replicas > 0 ? o.profile.max_replicas : in.workers) +
                " (every shape run once untimed first) ...");
    out.profile = profile_blocks(my, o.profile, worker, world);
  }
  if (in.workers <= in.blocks) out.pipeline = plan_pipeline(out.profile, in.workers, o.memory_limit, o.plan_model);
  out.hybrid = hybrid_plan(in, out.profile);
  if (world.rank() == 0 && !o.out_dir.empty()) {
    write_text(o.out_dir + "/profile.json", dump_json(out.profile.to_json(), 1));
    write_text(o.out_dir + "/plan.json", dump_json(out.hybrid.to_json(), 1));
  }
  if (!out.pipeline.stages.empty()) say(my, "pipeline plan (TR, TR+DPU): " + out.pipeline.describe());
  say(my, std::string("hybrid plan (TR+DPU+AHD)") + (o.plan_path.empty() ? "" : " from " + o.plan_path) + ", " +
              plan_model_name(o.plan_model) + " model: " + out.hybrid.describe());
}

// One strategy on this rank, with the layout its plan gives; its files go to a folder of its own.
StrategyResult run_planned(const SessionInputs& in, Strategy s, const RankOutcome& plans, RunContext& my,
                           Worker& worker, Communicator& world, Communicator* signals) {
  const int k = in.blocks, w_count = in.workers;
  Layout layout = s == Strategy::DP    ? dp_layout(k, w_count)
                  : s == Strategy::LS  ? ls_layout(plans.profile, w_count)
                  : s == Strategy::AHD ? pipeline_layout(s, plans.hybrid, k, w_count)
                                       : pipeline_layout(s, plans.pipeline, k, w_count);
  say(my, "running " + layout.describe());
  if (!in.o.out_dir.empty()) {
    my.out_dir = in.o.out_dir + "/" + strategy_name(s);
    if (world.rank() == 0) make_dirs(my.out_dir);
    world.barrier();
  }
  StrategyResult result = run_strategy(my, layout, &plans.profile, worker, world, signals);
  char line[200];
  std::snprintf(line, sizeof line, "%s done: %.2f s per epoch (simulated %.2f s)", strategy_title(s), result.epoch_s,
                result.epochs_run > 0 ? result.simulated_s / result.epochs_run : 0.0);
  say(my, line);
  return result;
}

// A rank's session: plan, then run each strategy. `signals`: the executor's dependency signals when `world`
// pairs messages in issue order (see run_strategy).
RankOutcome run_rank(const SessionInputs& in, const std::function<void(const std::string&)>& log, Worker& worker,
                     Communicator& world, Communicator* signals) {
  RunContext my = in.ctx;
  my.log = world.rank() == 0 ? log : nullptr;
  RankOutcome out;
  plan_rank(in, my, worker, world, out);
  for (Strategy s : in.o.strategies) out.results.push_back(run_planned(in, s, out, my, worker, world, signals));
  return out;
}

using RankMain = std::function<void(Worker&, Communicator& world, Communicator* signals)>;

// One worker per MPI process: NCCL between GPU workers (MPI carrying the executor's signals), else MPI.
void run_mpi_ranks(const SessionOptions& o, int w_count, SessionReport& report, const RankMain& rank_main) {
  std::shared_ptr<Communicator> world = make_mpi_communicator();
  TD_CHECK(world->size() == w_count, "the worker spec '", o.workers, "' names ", w_count, " workers but ",
           world->size(), " MPI processes run (one worker per process)");
  std::vector<Worker> mine = {make_worker(o.workers, world->rank())};
  report.device = device_summary(w_count, mine[0]);
  const bool cuda = mine[0].device.is_cuda();
  std::shared_ptr<Communicator> mpi_world = world;
  if (cuda) world = make_nccl_communicator_mpi(mine[0]);
  run_on_workers(mine, [&](Worker& w) { rank_main(w, *world, cuda ? mpi_world.get() : nullptr); });
}

// Every worker in this process, one thread each, over the options' communicator.
void run_local_ranks(const SessionOptions& o, int w_count, SessionReport& report, const RankMain& rank_main) {
  std::vector<Worker> workers = make_workers(o.workers);
  report.device = device_summary(w_count, workers[0]);
  // local-ordered: the local backend pairing messages in issue order as NCCL does, to check on CPU workers
  // that a run's message order suits NCCL.
  std::vector<std::shared_ptr<Communicator>> comms = o.comm == "nccl" ? make_nccl_group(workers)
                                                     : o.comm == "local-ordered"
                                                         ? make_local_group(workers, MessageMatching::InIssueOrder)
                                                         : make_local_group(workers);
  std::vector<std::shared_ptr<Communicator>> signals;
  if (comms[0]->needs_one_issuer()) signals = make_local_group(workers);
  run_on_workers(workers, [&](Worker& w) {
    const size_t r = static_cast<size_t>(w.rank);
    rank_main(w, *comms[r], signals.empty() ? nullptr : signals[r].get());
  });
}

}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

SessionReport run_session(const SessionOptions& o, const std::function<void(const std::string&)>& log) {
  // Everything a user can get wrong is checked here, before any worker starts.
  TD_CHECK(o.comm == "auto" || o.comm == "local" || o.comm == "local-ordered" || o.comm == "mpi" || o.comm == "nccl",
           "unknown communicator '", o.comm, "' (known: auto, local, local-ordered, mpi, nccl)");
  TD_CHECK(!o.strategies.empty(), "no strategy to run");
  // Workers are made once the communicator is chosen: under MPI each process makes only its own.
  const int w_count = count_workers(o.workers);
  const bool mpi =
      o.comm == "mpi" || (o.comm == "auto" && launched_by_mpi()) || (o.comm == "nccl" && launched_by_mpi());
  std::shared_ptr<const data::Dataset> dataset = open_training_set(o);
  const Workload workload(workload_spec(o, *dataset));
  const int k = workload.blocks();
  RunContext ctx;
  ctx.workload = &workload;
  ctx.dataset = dataset;
  ctx.train = o.train;
  ctx.resume = o.resume;
  ctx.live_progress = o.live_progress;
  const int64_t spe = steps_per_epoch(ctx);
  check_strategies(o, w_count, k);
  SessionInputs in{o, ctx, w_count, k, {}, {}};
  if (!o.profile_path.empty()) {
    in.given_profile = BlockProfile::from_json(parse_json(read_text(o.profile_path)));
    TD_CHECK(in.given_profile.blocks() == k, "the profile ", o.profile_path, " has ", in.given_profile.blocks(),
             " blocks but the teacher has ", k);
  }
  if (!o.plan_path.empty()) in.given_plan = Plan::from_json(parse_json(read_text(o.plan_path)), k, w_count);
  if (!o.out_dir.empty()) make_dirs(o.out_dir);

  SessionReport report;
  report.workers = w_count;
  report.workload = workload.describe();
  report.data = dataset->describe();
  report.steps_per_epoch = spe;
  std::mutex report_mu;
  const RankMain rank_main = [&](Worker& worker, Communicator& world, Communicator* signals) {
    RankOutcome out = run_rank(in, log, worker, world, signals);
    if (world.rank() != 0) return;
    std::lock_guard<std::mutex> lock(report_mu);
    report.root = true;
    report.profile = std::move(out.profile);
    report.pipeline_plan = std::move(out.pipeline);
    report.hybrid_plan = std::move(out.hybrid);
    report.plan_model = o.plan_model;
    report.results = std::move(out.results);
  };
  if (mpi)
    run_mpi_ranks(o, w_count, report, rank_main);
  else
    run_local_ranks(o, w_count, report, rank_main);
  if (report.root && !o.out_dir.empty()) write_text(o.out_dir + "/summary.json", dump_json(report_json(report), 1));
  return report;
}

namespace {

const StrategyResult* find(const SessionReport& r, Strategy s) {
  for (const StrategyResult& x : r.results)
    if (x.strategy == s) return &x;
  return nullptr;
}

// The instructions of one steady step: step `step` of pipelines; for DP and LS, step `step` of the block
// each worker trains last.
Json timeline(const StrategyResult& r, int64_t step) {
  const Schedule& s = r.schedule.schedule;
  std::vector<int> phase(static_cast<size_t>(s.workers()), -1), last(static_cast<size_t>(s.workers()), -1);
  for (const Instr& i : s.instrs())
    if (i.kind == OpKind::LoadBatch) last[i.worker] = std::max(last[i.worker], i.block);
  std::vector<const Instr*> picked;
  for (const Instr& i : s.instrs()) {
    if (i.kind == OpKind::LoadBatch) phase[i.worker] = i.block;
    if (i.step != step) continue;
    if (!r.schedule.layout.pipelined() && phase[i.worker] != last[i.worker]) continue;
    picked.push_back(&i);
  }
  double t0 = 0;
  bool any = false;
  for (const Instr* i : picked) {
    t0 = any ? std::min(t0, r.times[i->id].start_s) : r.times[i->id].start_s;
    any = true;
  }
  Json out = Json::array();
  for (const Instr* i : picked) {
    Json e = Json::object();
    e["worker"] = i->worker;
    e["lane"] = i->lane == kComputeLane ? "compute" : "comm";
    e["kind"] = op_kind_name(i->kind);
    e["label"] = i->label;
    e["start_s"] = r.times[i->id].start_s - t0;
    e["end_s"] = r.times[i->id].end_s - t0;
    out.push_back(e);
  }
  return out;
}

}  // namespace

double pipeline_step_s(const DistillSchedule& d, const std::vector<InstrTime>& times) {
  if (!d.layout.pipelined()) return 0;
  std::map<int, double> step_end;  // step -> the last update of that step
  for (const Instr& i : d.schedule.instrs())
    if (i.kind == OpKind::Update) step_end[i.step] = std::max(step_end[i.step], times[i.id].end_s);
  if (step_end.size() < 2) return 0;
  const auto first = step_end.begin();
  const auto last = std::prev(step_end.end());
  return (last->second - first->second) / static_cast<double>(last->first - first->first);
}

namespace {

// The AHD plan's step time as each planner model predicts it, as the simulator times its schedule from the
// same profile, and as measured (0: no AHD run).
struct PlanCheck {
  double tandem_s = 0, pipe_bd_s = 0, simulated_s = 0, measured_s = 0;
};
PlanCheck check_plan(const SessionReport& r) {
  PlanCheck c;
  const StrategyResult* ahd = find(r, Strategy::AHD);
  if (ahd == nullptr || r.hybrid_plan.stages.empty()) return c;
  c.tandem_s = plan_time(r.profile, r.hybrid_plan, PlanModel::Tandem);
  c.pipe_bd_s = plan_time(r.profile, r.hybrid_plan, PlanModel::PipeBD);
  c.measured_s = pipeline_step_s(ahd->schedule, ahd->times);
  if (ahd->simulated_s > 0) c.simulated_s = pipeline_step_s(ahd->schedule, simulate(ahd->schedule.schedule).times);
  return c;
}

}  // namespace

Json report_json(const SessionReport& r) {
  Json j = Json::object();
  j["device"] = r.device;
  j["workers"] = r.workers;
  j["workload"] = r.workload;
  j["data"] = r.data;
  j["steps_per_epoch"] = r.steps_per_epoch;
  j["profile"] = r.profile.to_json();
  if (!r.pipeline_plan.stages.empty()) j["pipeline_plan"] = r.pipeline_plan.to_json();
  j["hybrid_plan"] = r.hybrid_plan.to_json();
  j["plan_model"] = plan_model_name(r.plan_model);
  const PlanCheck check = check_plan(r);
  if (check.measured_s > 0) {
    Json c = Json::object();
    c["tandem_s"] = check.tandem_s;
    c["pipe_bd_s"] = check.pipe_bd_s;
    c["simulated_s"] = check.simulated_s;
    c["measured_s"] = check.measured_s;
    j["ahd_step_s"] = c;
  }
  const StrategyResult* dp = find(r, Strategy::DP);
  Json list = Json::array();
  for (const StrategyResult& x : r.results) {
    Json s = Json::object();
    s["name"] = strategy_name(x.strategy);
    s["title"] = strategy_title(x.strategy);
    s["layout"] = x.layout;
    s["epochs_run"] = x.epochs_run;
    s["wall_s"] = x.wall_s;
    s["epoch_s"] = x.epoch_s;
    s["simulated_s"] = x.simulated_s;
    s["relay_bytes"] = x.relay_bytes;
    s["all_reduce_bytes"] = x.all_reduce_bytes;
    if (x.graphs.eager + x.graphs.replayed > 0)
      s["cuda_graph"] = {{"eager", x.graphs.eager}, {"captured", x.graphs.captured}, {"replayed", x.graphs.replayed}};
    if (dp && x.wall_s > 0) s["speedup"] = dp->wall_s / x.wall_s;
    if (dp && x.simulated_s > 0) s["simulated_speedup"] = dp->simulated_s / x.simulated_s;
    Json busy = Json::array(), mem = Json::array(), loss = Json::array(), parts = Json::array();
    for (double b : x.busy_fraction) busy.push_back(b);
    for (int64_t m : x.peak_memory) mem.push_back(m);
    for (const auto& per_block : x.loss) {
      Json l = Json::array();
      for (double v : per_block) l.push_back(v);
      loss.push_back(l);
    }
    for (const auto& m : time_breakdown(x)) {
      Json p = Json::object();
      for (const auto& [k, v] : m) p[k] = v;
      parts.push_back(p);
    }
    s["busy_fraction"] = busy;
    s["peak_memory"] = mem;
    s["loss"] = loss;
    s["breakdown_s"] = parts;
    int64_t first = 0;
    for (int64_t b : x.schedule.start) first = std::max(first, b);
    s["timeline"] = timeline(x, (first + x.schedule.steps) / 2);
    list.push_back(s);
  }
  j["strategies"] = list;
  return j;
}

std::string report_table(const SessionReport& r) {
  const StrategyResult* dp = find(r, Strategy::DP);
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "%-11s %10s %9s %9s %6s %10s %10s %10s %9s  %s\n", "strategy", "s/epoch", "speedup",
                "sim.x", "busy", "peak MiB", "relay MiB", "a-r MiB", "loss", "layout");
  os << line;
  for (const StrategyResult& x : r.results) {
    double busy = 0, peak = 0, loss = 0;
    for (double b : x.busy_fraction) busy += b / static_cast<double>(x.busy_fraction.size());
    for (int64_t m : x.peak_memory) peak = std::max(peak, m / 1048576.0);
    for (const auto& per_block : x.loss) loss += per_block.empty() ? 0 : per_block.back();
    std::string speedup = dp && x.wall_s > 0 ? std::to_string(dp->wall_s / x.wall_s).substr(0, 5) + "x" : "-";
    std::string sim =
        dp && x.simulated_s > 0 ? std::to_string(dp->simulated_s / x.simulated_s).substr(0, 5) + "x" : "-";
    std::snprintf(line, sizeof line, "%-11s %10.3f %9s %9s %5.0f%% %10.1f %10.3f %10.3f %9.4f  %s\n",
                  strategy_title(x.strategy), x.epoch_s, speedup.c_str(), sim.c_str(), busy * 100, peak,
                  x.relay_bytes / 1048576.0, x.all_reduce_bytes / 1048576.0, loss, x.layout.c_str());
    os << line;
  }
  for (const StrategyResult& x : r.results)
    if (x.graphs.captured > 0) {
      std::snprintf(line, sizeof line,
                    "%-11s cuda graph: %lld compute instructions replayed from %lld graphs, %lld run eagerly\n",
                    strategy_title(x.strategy), static_cast<long long>(x.graphs.replayed),
                    static_cast<long long>(x.graphs.captured), static_cast<long long>(x.graphs.eager));
      os << line;
    }
  os << "(speedup: measured time over DP's on the same workers; sim.x: the simulator's, from the profile; "
        "busy: mean share of wall time in loads, teacher, student and updates;\n"
        "relay MiB: teacher activations relayed, in the policy's activation dtype (bf16: half of f32), and a-r MiB: "
        "student gradients all-reduced (f32), each summed over the workers for the whole run; loss: sum over blocks, "
        "last epoch;\n"
        "timings exclude a warm-up per strategy: each block shape the worker runs, every supernet path, once "
        "untimed on copies of the blocks)\n";
  const PlanCheck check = check_plan(r);
  if (check.measured_s > 0) {
    std::snprintf(line, sizeof line,
                  "AHD step time: predicted %.2f ms (tandem model), %.2f ms (pipe-bd model), simulated %.2f ms; "
                  "measured %.2f ms (steady state); planned with the %s model\n",
                  check.tandem_s * 1e3, check.pipe_bd_s * 1e3, check.simulated_s * 1e3, check.measured_s * 1e3,
                  plan_model_name(r.plan_model));
    os << line;
  }
  return os.str();
}

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
