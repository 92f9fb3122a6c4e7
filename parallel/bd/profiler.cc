// Measuring block costs, relays, all-reduces, memory and loads for the AHD planner.
#include "parallel/bd/profiler.h"

#include <algorithm>
#include <functional>
#include <map>

#include "data/loader.h"
#include "data/split.h"
#include "parallel/bd/warmup.h"
#include "runtime/base/error.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"

namespace tandem {
namespace parallel {
namespace bd {

namespace {

// Median seconds of `trials` runs of fn after `warmup` runs: CUDA events on the worker's compute stream, or
// the host clock.
double median_time(const Worker& worker, const ProfileOptions& o, const std::function<void()>& fn) {
  for (int i = 0; i < o.warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < o.trials; ++i) {
    if (worker.device.is_cuda()) {
      Event start(true), end(true);
      start.record(worker.compute);
      fn();
      end.record(worker.compute);
      end.synchronize();
      t.push_back(start.elapsed_ms(end) * 1e-3);
    } else {
      const double s = host_time_s();
      fn();
      t.push_back(host_time_s() - s);
    }
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Host-clock median for communication, which may involve other streams: synchronizes after each trial.
double median_comm_time(const Worker& worker, const ProfileOptions& o, const std::function<void()>& fn,
                        const std::function<void()>& align) {
  std::vector<double> t;
  for (int i = 0; i < o.warmup + o.trials; ++i) {
    align();
    const double s = host_time_s();
    fn();
    if (worker.device.is_cuda()) {
      worker.compute.synchronize();
      worker.comm.synchronize();
    }
    if (i >= o.warmup) t.push_back(host_time_s() - s);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int64_t param_bytes(const models::Module& m) {
  int64_t b = 0;
  for (const Tensor& p : m.parameters()) b += static_cast<int64_t>(p.nbytes());
  for (const auto& kv : m.named_buffers()) b += static_cast<int64_t>(kv.second.nbytes());
  return b;
}

// Elements of block b's gradients after one step (what its all-reduce moves), from a 2-row step of a fresh
// student: every rank gets the same count because fresh students sample the same path.
std::vector<int64_t> gradient_elements(const RunContext& ctx, const Worker& worker) {
  const Workload& w = *ctx.workload;
  std::vector<models::ModulePtr> teacher = w.make_teacher_blocks(ctx.train.teacher_bn);
  std::vector<models::ModulePtr> students = w.make_students();
  Generator gen(1);
  Tensor x = randn(w.activation_shape(0, 2), gen, TensorOptions().with_device(worker.device));
  std::vector<int64_t> out;
  for (int b = 0; b < w.blocks(); ++b) {
    Tensor y;
    {
      autograd::NoGradGuard no_grad;
      y = teacher[b]->forward(x);
    }
    block_loss(b, w.blocks(), students[b]->forward(x), y).backward();
    int64_t n = 0;
    for (const Tensor& p : students[b]->parameters(models::ParamKind::Weight))
      if (p.grad().defined()) n += p.numel();
    out.push_back(n);
    x = y;
  }
  return out;
}

// The measurements of a profile in one host tensor, so that the ranks add up what each measured with one
// all-reduce: teacher, student, all-reduce and memory cells [g][b] each, relay [b], load [g].
class ProfileTable {
 public:
  ProfileTable(int g_max, int blocks)
      : g_max_(g_max),
        k_(blocks),
        cells_(static_cast<int64_t>(g_max) * blocks),
        table_(zeros({4 * cells_ + blocks + g_max}, TensorOptions(DType::F64).with_device(Device::cpu()))) {}

  double& teacher(int g, int b) { return cell(0, g, b); }    // seconds of block b's teacher forward
  double& student(int g, int b) { return cell(1, g, b); }    // seconds of block b's student step
  double& allreduce(int g, int b) { return cell(2, g, b); }  // seconds of block b's gradient all-reduce
  double& memory(int g, int b) { return cell(3, g, b); }     // bytes of block b's step
  double& relay(int b) { return at(4 * cells_ + b); }        // seconds to send block b's output to a peer
  double& load(int g) { return at(4 * cells_ + k_ + g - 1); }

  // Adds up every rank's table.
  void all_reduce(Communicator& world, Device device) {
    Tensor shared = table_.to(device);
    world.all_reduce(shared);
    table_ = shared.to(Device::cpu());
  }

  BlockProfile profile(int64_t batch) {
    BlockProfile p;
    p.batch = batch;
    for (int g = 1; g <= g_max_; ++g) {
      std::vector<double> te, st, ar;
      std::vector<int64_t> mem;
      for (int b = 0; b < k_; ++b) {
        te.push_back(teacher(g, b));
        st.push_back(student(g, b));
        ar.push_back(allreduce(g, b));
        mem.push_back(static_cast<int64_t>(memory(g, b)));
      }
      p.teacher_s.push_back(te);
      p.student_s.push_back(st);
      p.allreduce_s.push_back(ar);
      p.memory.push_back(mem);
      p.load_s.push_back(load(g));
    }
    for (int b = 0; b < k_; ++b) p.relay_s.push_back(relay(b));  // the last block relays nothing: 0
    return p;
  }

 private:
  double& cell(int which, int g, int b) { return at(which * cells_ + (g - 1) * k_ + b); }
  double& at(int64_t i) { return table_.data<double>()[i]; }

  const int g_max_, k_;
  const int64_t cells_;
  Tensor table_;
};

// One worker's share of the compute profile: each block's teacher forward, student step and memory, and a
// batch load, at per-worker batches B/g.
void measure_replicas(const RunContext& ctx, const ProfileOptions& o, Worker& worker,
                      const std::vector<models::ModulePtr>& teacher, int g, ProfileTable& table) {
  const Workload& w = *ctx.workload;
  const int k = w.blocks();
  const int64_t rows = data::rows_for(0, g, ctx.train.batch).count;
  // Every shape once before any is timed: each teacher block, and each student block along every path.
  std::map<int, BlockWork> work;
  for (int b = 0; b < k; ++b) work[b] = BlockWork{{rows}, {rows}};
  warm_up_blocks(w, ctx.train, work, worker.device);
  Generator gen(static_cast<uint64_t>(g));
  std::vector<Tensor> acts = {randn(w.activation_shape(0, rows), gen, TensorOptions().with_device(worker.device))};
  for (int b = 0; b < k; ++b) {
    Tensor out;
    table.teacher(g, b) = median_time(worker, o, [&] {
      autograd::NoGradGuard no_grad;
      out = teacher[b]->forward(acts[b]);
    });
    acts.push_back(out);
  }
  for (int b = 0; b < k; ++b) {
    auto tracker = std::make_shared<MemoryTracker>("profile");
    {
      MemoryScope scope(tracker);
      models::ModulePtr student = w.make_students({b})[0];
      auto opt = optim::make_optimizer(ctx.train.optimizer, student->named_parameters(models::ParamKind::Weight));
      table.student(g, b) = median_time(worker, o, [&] {
        student->zero_grad();
        block_loss(b, k, student->forward(acts[b]), acts[b + 1]).backward();
        opt->step();
      });
    }
    table.memory(g, b) = static_cast<double>(tracker->counters().total_peak + param_bytes(*teacher[b]) +
                                             static_cast<int64_t>(acts[b].nbytes() + acts[b + 1].nbytes()));
  }
  data::LoaderOptions lo;
  lo.batch_size = ctx.train.batch;
  lo.split_size = g;
  lo.num_workers = 0;
  lo.seed = ctx.train.data_seed;
  lo.device = worker.device;
  data::Loader loader(ctx.dataset, data::Pipeline::parse(ctx.train.augment), lo);
  table.load(g) = median_time(worker, o, [&] { loader.next(); });
}

// Relays: rank 0 sends each boundary's full-batch activation to rank 1.
void measure_relays(const RunContext& ctx, const ProfileOptions& o, Worker& worker, Communicator& world,
                    ProfileTable& table) {
  std::shared_ptr<Communicator> pair = world.size() >= 2 ? world.split({0, 1}) : nullptr;
  if (!pair) return;
  const Workload& w = *ctx.workload;
  for (int b = 0; b + 1 < w.blocks(); ++b) {
    Tensor buf = zeros(w.activation_shape(b + 1, ctx.train.batch), TensorOptions().with_device(worker.device));
    const double s = median_comm_time(
        worker, o,
        [&] {
          if (pair->rank() == 0)
            pair->send(buf, 1, b);
          else
            pair->recv(buf, 0, b);
        },
        [&] { pair->barrier(); });
    if (world.rank() == 0) table.relay(b) = s;
  }
}

// All-reduces: the first g ranks reduce each block's gradient elements.
void measure_all_reduces(const RunContext& ctx, const ProfileOptions& o, Worker& worker, Communicator& world, int g_max,
                         ProfileTable& table) {
  const std::vector<int64_t> elements = gradient_elements(ctx, worker);
  for (int g = 2; g <= std::min(g_max, world.size()); ++g) {
    std::vector<int> ranks;
    for (int r = 0; r < g; ++r) ranks.push_back(r);
    std::shared_ptr<Communicator> group = world.split(ranks);
    if (!group) continue;
    for (int b = 0; b < ctx.workload->blocks(); ++b) {
      Tensor buf = zeros({elements[b]}, TensorOptions().with_device(worker.device));
      const double s = median_comm_time(
          worker, o, [&] { group->all_reduce(buf, 1.0 / g); }, [&] { group->barrier(); });
      if (world.rank() == 0) table.allreduce(g, b) = s;
    }
  }
}

}  // namespace

BlockProfile profile_blocks(const RunContext& ctx, const ProfileOptions& o, Worker& worker, Communicator& world) {
  TD_CHECK(o.trials >= 1 && o.warmup >= 0, "profiling needs at least one trial");
  const Workload& w = *ctx.workload;
  const int workers = world.size(), me = world.rank();
  const int g_max = o.max_replicas > 0 ? o.max_replicas : workers;
  const int64_t batch = ctx.train.batch;
  TD_CHECK(g_max <= batch, "profiling up to ", g_max, " replicas needs a batch of at least ", g_max, " rows, got ",
           batch);
  ProfileTable table(g_max, w.blocks());
  std::vector<models::ModulePtr> teacher = w.make_teacher_blocks(ctx.train.teacher_bn);
  // CPU workers share the host's cores, so they take turns (concurrent timings would mostly measure the OS
  // scheduler); GPU workers and SM partitions measure at the same time, as they will run.
  const bool turns = worker.device.is_cpu();
  for (int turn = 0; turn < (turns ? workers : 1); ++turn) {
    if (!turns || turn == me)
      for (int g = me + 1; g <= g_max; g += workers) measure_replicas(ctx, o, worker, teacher, g, table);
    if (turns) world.barrier();
  }
  measure_relays(ctx, o, worker, world, table);
  measure_all_reduces(ctx, o, worker, world, g_max, table);
  table.all_reduce(world, worker.device);
  return table.profile(batch);
}

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
