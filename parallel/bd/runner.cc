// One rank's part of a strategy run: its models, loader and communicators, the instruction interpreter the
// executor calls, checkpoints, and the gathering of results.
#include "parallel/bd/runner.h"

#include <sys/stat.h>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include "data/loader.h"
#include "models/blocks.h"
#include "models/checkpoint.h"
#include "parallel/bd/compute_graphs.h"
#include "parallel/bd/warmup.h"
#include "parallel/simulator.h"
#include "parallel/trace.h"
#include "runtime/base/checked_math.h"
#include "runtime/base/error.h"
#include "runtime/base/parse_number.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/progress/progress.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/precision.h"

namespace tandem {
namespace parallel {
namespace bd {

int64_t steps_per_epoch(const RunContext& ctx) {
  TD_CHECK(ctx.dataset != nullptr && ctx.workload != nullptr, "a run needs a dataset and a workload");
  const int64_t n = ctx.dataset->size(), b = ctx.train.batch;
  TD_CHECK(b >= 1, "the batch must hold at least one row, got ", b);
  TD_CHECK(n >= b, "the dataset has ", n, " samples, fewer than one batch of ", b);
  int64_t spe = n / b;
  if (ctx.train.steps_per_epoch > 0) spe = std::min(spe, ctx.train.steps_per_epoch);
  return spe;
}

namespace {

std::string block_path(const std::string& dir, int b) { return dir + "/block" + std::to_string(b) + ".safetensors"; }

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string meta(const SafetensorsMetadata& m, const std::string& key, const std::string& path) {
  auto it = m.find(key);
  TD_CHECK_IO(it != m.end(), path, " is not a distillation block checkpoint (no '", key, "' in its metadata)");
  return it->second;
}

int64_t meta_int(const SafetensorsMetadata& m, const std::string& key, const std::string& path) {
  const std::string v = meta(m, key, path);
  int64_t x = 0;
  TD_CHECK_IO(parse_count(v, &x), path, ": bad '", key, "' value '", v, "'");
  return x;
}

std::vector<double> parse_losses(const std::string& s, const std::string& path) {
  std::vector<double> out;
  std::stringstream items(s);
  std::string item;
  while (std::getline(items, item, ',')) {
    char* end = nullptr;
    out.push_back(std::strtod(item.c_str(), &end));
    TD_CHECK_IO(!item.empty() && *end == '\0', path, ": bad 'tandem.loss' value '", s, "'");
  }
  return out;
}

// Host f64 tensor summed over all ranks (each rank fills its own entries, zeros elsewhere).
void sum_over_ranks(Tensor& host, Communicator& world, const Worker& worker) {
  Tensor t = host.to(worker.device);
  world.all_reduce(t);
  host = t.to(Device::cpu());
}

struct BlockTrainer {
  models::ModulePtr module;
  NamedTensors params;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::LrScheduler> sched;
  Tensor loss_acc;             // sum over the epoch's steps of this rank's share of the step loss
  std::vector<double> losses;  // per epoch: the mean full-batch loss
  bool saver = false;          // writes the block's checkpoints
};

class RankRunner {
 public:
  RankRunner(const RunContext& ctx, const Layout& layout, const BlockProfile* costs, Worker& worker,
             Communicator& world, Communicator* signals)
      : ctx_(ctx),
        w_(*ctx.workload),
        layout_(layout),
        worker_(worker),
        world_(world),
        signals_(signals != nullptr ? *signals : world),
        me_(worker.rank) {
    TD_CHECK(world.size() == layout.workers, "the ", strategy_title(layout.strategy), " layout needs ", layout.workers,
             " workers but the communicator has ", world.size());
    TD_CHECK(world.rank() == worker.rank, "worker rank ", worker.rank, " differs from its communicator rank ",
             world.rank());
    TD_CHECK(signals_.size() == world.size() && signals_.rank() == world.rank(), "the signal communicator's rank ",
             signals_.rank(), " of ", signals_.size(), " differs from rank ", world.rank(), " of ", world.size());
    TD_CHECK(!world.needs_one_issuer() || (signals != nullptr && !signals->needs_one_issuer()), "the ", world.backend(),
             " communicator pairs messages in issue order: Pipe-BD's dependency signals need a "
             "separate communicator that pairs them by tag (local or mpi)");
    TD_CHECK(layout.blocks == w_.blocks(), "the layout has ", layout.blocks, " blocks but the workload ", w_.blocks());
    spe_ = steps_per_epoch(ctx);
    steps_ = spe_ * ctx.train.epochs;
    TD_CHECK(ctx.train.epochs >= 1, "epochs must be at least 1, got ", ctx.train.epochs);
    TD_CHECK(ctx.train.stop_after >= 0, "stop_after must be non-negative, got ", ctx.train.stop_after);
    d_ = build_schedule(layout, ctx.train.batch, steps_, spe_, w_.row_bytes(), resume_starts(),
                        ctx.train.stop_after * spe_);
    if (costs != nullptr) apply_costs(d_, *costs);
    for (const Instr& i : d_.schedule.instrs())
      if (i.worker == me_ && i.kind == OpKind::Send) sends_after_[i.deps.at(0)].push_back(i.id);
    if (layout.pipelined()) make_stage_comms();
    make_models();
    make_loader();
  }

  StrategyResult run() {
    warm_up();
    if (worker_.memory) worker_.memory->reset_peaks();
    world_.barrier();
    const double t0 = host_time_s();
    if (me_ == 0 && ctx_.live_progress) {
      ProgressTask task;
      task.label = strategy_title(layout_.strategy);
      task.unit = "update";
      task.items_per_step = ctx_.train.batch;
      for (const Instr& i : d_.schedule.instrs()) task.total += i.worker == me_ && i.kind == OpKind::Update;
      live_.emplace(task);
    }
    if (ctx_.train.cuda_graph) graphs_ = std::make_unique<ComputeGraphs>(worker_.compute);
    Executor ex(d_.schedule, worker_, &signals_, world_.needs_one_issuer());
    ex.run([this](const Instr& i) { execute(i); });
    live_.reset();
    if (graphs_) graph_counts_ = graphs_->counts();
    graphs_.reset();
    std::vector<InstrTime> mine = ex.timings();
    for (InstrTime& t : mine) {
      t.start_s -= t0;
      t.end_s -= t0;
    }
    StrategyResult r = gather(mine);
    for (auto& [b, t] : students_)
      if (t.saver) {
        NamedTensors copy;
        for (auto& [name, v] : t.module->state_dict()) copy.emplace_back(name, v.to(Device::cpu()).clone());
        r.local_blocks[b] = copy;
      }
    if (!ctx_.out_dir.empty()) write_outputs(r);
    return r;
  }

 private:
  // First step of each block: 0, or after the epochs its checkpoint holds when resuming.
  std::vector<int64_t> resume_starts() {
    std::vector<int64_t> start(static_cast<size_t>(w_.blocks()), 0);
    if (!ctx_.resume || ctx_.out_dir.empty()) return start;
    for (int b = 0; b < w_.blocks(); ++b) {
      const std::string path = block_path(ctx_.out_dir, b);
      if (!file_exists(path)) continue;
      SafetensorsMetadata m = load_safetensors(path).metadata;
      const int64_t spe = meta_int(m, "tandem.steps_per_epoch", path);
      const int64_t batch = meta_int(m, "tandem.batch", path);
      TD_CHECK(spe == spe_ && batch == ctx_.train.batch, path, " was written with batch ", batch, " and ", spe,
               " steps per epoch; this run has batch ", ctx_.train.batch, " and ", spe_,
               " (resume with the same data and batch)");
      start[b] = std::min<int64_t>(steps_, checked_mul<int64_t>(meta_int(m, "tandem.epochs_done", path), spe_, path,
                                                                ": 'tandem.epochs_done' in steps"));
    }
    return start;
  }

  // Every shape this rank runs, once untimed before its timed run (warmup.h): its teacher and student blocks at the
  // row counts its instructions give them, on copies; and one all-reduce over each group it reduces over (NCCL sets
  // a communicator's channels up at its first collective). Every member of a group has the group's all-reduces.
  void warm_up() {
    std::map<int, BlockWork> work;
    std::set<int> groups;
    auto add = [](std::vector<int64_t>& rows, int64_t r) {
      if (std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
    };
    for (const Instr& i : d_.schedule.instrs()) {
      if (i.worker != me_) continue;
      const InstrInfo& info = d_.info[i.id];
      if (i.kind == OpKind::Forward) add(work[i.block].teacher_rows, info.rows);
      if (i.kind == OpKind::ForwardBackward) add(work[i.block].student_rows, info.rows);
      if (i.kind == OpKind::AllReduce) groups.insert(info.group);
    }
    warm_up_blocks(w_, ctx_.train, work, worker_.device);
    for (int g : groups) {
      Tensor one = zeros({1}, TensorOptions(DType::F32).with_device(worker_.device));
      comm_of(g).all_reduce(one);
    }
  }

  void make_stage_comms() {
    const auto ranks = layout_.plan.stage_ranks();
    stage_comms_.resize(ranks.size());
    for (size_t s = 0; s < ranks.size(); ++s)
      if (ranks[s].size() > 1) stage_comms_[s] = world_.split(ranks[s]);
  }

  void make_models() {
    tblocks_ = w_.make_teacher_blocks(ctx_.train.teacher_bn);
    std::vector<int> mine = layout_.blocks_of(me_);
    std::vector<models::ModulePtr> students = w_.make_students(mine);
    const bool saver = layout_.strategy == Strategy::DP ? me_ == 0
                       : layout_.pipelined()            ? layout_.replica_of(me_) == 0
                                                        : true;
    for (size_t i = 0; i < mine.size(); ++i) {
      BlockTrainer& t = students_[mine[i]];
      t.module = students[i];
      t.params = t.module->named_parameters(models::ParamKind::Weight);
      t.opt = optim::make_optimizer(ctx_.train.optimizer, t.params);
      t.sched =
          std::make_unique<optim::LrScheduler>(*t.opt, optim::parse_lr_schedule(ctx_.train.lr_schedule, spe_, steps_));
      t.loss_acc = zeros({}, TensorOptions(DType::F32).with_device(worker_.device));
      t.saver = saver;
      const std::string path = block_path(ctx_.out_dir, mine[i]);
      if (d_.start[mine[i]] > 0) {
        SafetensorsMetadata m = models::load_checkpoint(path, *t.module, t.opt.get(), t.sched.get());
        t.losses = parse_losses(meta(m, "tandem.loss", path), path);
      }
    }
  }

  void make_loader() {
    data::LoaderOptions o;
    o.batch_size = ctx_.train.batch;
    o.seed = ctx_.train.data_seed;
    o.num_workers = ctx_.train.loader_threads;
    o.prefetch = 2;
    o.device = worker_.device;
    if (layout_.strategy == Strategy::DP) {
      o.batch_size = ctx_.train.batch / layout_.workers;
      o.shard_rank = me_;
      o.num_shards = layout_.workers;
    } else if (layout_.pipelined()) {
      if (layout_.stage_of(me_) != 0) return;
      o.split_rank = layout_.replica_of(me_);
      o.split_size = layout_.plan.stages[0].replicas;
    } else if (layout_.bins[me_].empty()) {
      return;
    }
    loader_ = std::make_unique<data::Loader>(ctx_.dataset, data::Pipeline::parse(ctx_.train.augment), o);
    TD_CHECK_SHAPE(loader_->image_shape() == w_.spec().sample, "the data gives samples of ",
                   shape_str(loader_->image_shape()), " but the workload expects ", shape_str(w_.spec().sample));
  }

  void execute(const Instr& i) {
    const InstrInfo& info = d_.info[i.id];
    switch (i.kind) {
      case OpKind::LoadBatch: return load(i);
      case OpKind::Recv: return recv(i, info);
      case OpKind::Forward: return teacher_forward(i);
      case OpKind::Send: return send(i, info);
      case OpKind::ForwardBackward: return student_step(i, info);
      case OpKind::AllReduce: return all_reduce(i, info);
      case OpKind::Barrier: return world_.barrier();
      case OpKind::Update: return update(i, info);
      default: TD_THROW(InternalError, "unexpected instruction ", d_.schedule.describe(i.id));
    }
  }

  void reset_activations(int step) {
    acts_.assign(static_cast<size_t>(w_.blocks() + 1), Tensor());
    acts_step_ = step;
  }

  void load(const Instr& i) {
    TD_ASSERT(loader_ != nullptr, "worker ", me_, " loads without a loader");
    reset_activations(i.step);
    const int64_t epoch = i.step / spe_;
    const std::pair<int, int64_t> key{i.block, epoch};
    if (key != loader_key_) {
      loader_->set_epoch(epoch);
      loader_key_ = key;
    }
    std::optional<data::Batch> b = loader_->next();
    TD_ASSERT(b.has_value(), "the loader ran out of batches in epoch ", epoch);
    acts_[0] = b->images;
  }

  void recv(const Instr& i, const InstrInfo& info) {
    if (i.step != acts_step_) reset_activations(i.step);
    Tensor& buf = acts_[i.block];
    if (!buf.defined()) {
      // Block 0's input is the data (f32); a teacher block's output is in the policy's activation dtype.
      const DType t = i.block == 0 ? DType::F32 : activation_dtype(DType::F32);
      buf = empty(w_.activation_shape(i.block, info.rows), TensorOptions(t).with_device(worker_.device));
    }
    Tensor slice = buf.narrow(0, info.offset, info.count);
    world_.recv(slice, i.peer, i.block);
  }

  void teacher_forward(const Instr& i) {
    TD_ASSERT(acts_[i.block].defined(), "teacher block ", i.block, " has no input on worker ", me_);
    auto it = sends_after_.find(i.id);
    if (graphs_) {
      // What is sent is read on the comm lane, after the next replay may have overwritten the graph's output.
      acts_[i.block + 1] = graphs_->teacher(i.block, *tblocks_[i.block], acts_[i.block], it != sends_after_.end());
    } else {
      autograd::NoGradGuard no_grad;
      acts_[i.block + 1] = tblocks_[i.block]->forward(acts_[i.block]);
    }
    if (it == sends_after_.end()) return;
    std::lock_guard<std::mutex> lock(outbox_mu_);
    for (int id : it->second) outbox_[id] = acts_[i.block + 1];
  }

  void send(const Instr& i, const InstrInfo& info) {
    Tensor t;
    {
      std::lock_guard<std::mutex> lock(outbox_mu_);
      auto it = outbox_.find(i.id);
      TD_ASSERT(it != outbox_.end(), "send ", d_.schedule.describe(i.id), " has no activation");
      t = it->second;
      outbox_.erase(it);
    }
    Tensor slice = t.narrow(0, info.offset, info.count);
    slice.storage().record_stream(worker_.comm);  // made on the compute lane, read here
    world_.isend(slice, i.peer, i.block).wait();
    relay_bytes_ += static_cast<int64_t>(slice.nbytes());
  }

  void student_step(const Instr& i, const InstrInfo& info) {
    BlockTrainer& t = students_.at(i.block);
    const Tensor& input = acts_[i.block];
    const Tensor& target = acts_[i.block + 1];
    TD_ASSERT(input.defined() && target.defined(), "student block ", i.block, " lacks its teacher activations");
    // A share of rows other than B/g weighs its mean loss so that averaging over the g shares gives the
    // full batch's mean (a no-op for even splits).
    const int64_t share = info.rows * info.factor;
    auto body = [&](const Tensor& x, const Tensor& y) {
      Tensor loss = block_loss(i.block, w_.blocks(), t.module->forward(x), y);
      if (share != d_.batch) loss = mul(loss, static_cast<double>(share) / static_cast<double>(d_.batch));
      loss.backward();
      autograd::NoGradGuard no_grad;
      add_(t.loss_acc, info.factor == 1 ? loss.detach() : mul(loss.detach(), 1.0 / info.factor));
    };
    if (graphs_) {
      graphs_->student(
          i.block, *t.module, input, target,
          "rows " + std::to_string(share) + " of " + std::to_string(d_.batch) + " over " + std::to_string(info.factor),
          body);
    } else {
      t.module->zero_grad();
      body(input, target);
    }
  }

  void all_reduce(const Instr& i, const InstrInfo& info) {
    BlockTrainer& t = students_.at(i.block);
    Communicator& comm = group_comm(info);
    autograd::NoGradGuard no_grad;
    std::vector<Tensor> grads, flat;
    for (auto& [name, p] : t.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      grads.push_back(g);
      flat.push_back(g.reshape({-1}));
    }
    if (grads.empty()) return;  // replicas sample the same path, so they all skip
    Tensor buf = concat(flat, 0);
    comm.all_reduce(buf, 1.0 / info.factor);
    all_reduce_bytes_ += static_cast<int64_t>(buf.nbytes());
    int64_t offset = 0;
    for (Tensor& g : grads) {
      g.copy_(buf.narrow(0, offset, g.numel()).view(g.shape()));
      offset += g.numel();
    }
  }

  void update(const Instr& i, const InstrInfo& info) {
    std::vector<int> blocks = i.block >= 0 ? std::vector<int>{i.block} : layout_.blocks_of(me_);
    std::vector<std::string> lines;  // said once the update counts in the live display
    for (int b : blocks) {
      BlockTrainer& t = students_.at(b);
      t.opt->step();
      t.sched->step();
      if (!info.epoch_end) continue;
      const int64_t epoch = i.step / spe_;
      Tensor sum = t.loss_acc;
      if (info.factor > 1) group_comm(info).all_reduce(sum);  // the replicas' shares make the full loss
      const double mean = static_cast<double>(sum.item<float>()) / static_cast<double>(spe_);
      t.loss_acc.fill_(0.0);  // in place: a CUDA graph of a student step adds into it
      t.losses.resize(static_cast<size_t>(epoch + 1), 0.0);
      t.losses[static_cast<size_t>(epoch)] = mean;
      if (t.saver && !ctx_.out_dir.empty()) save_block(b, t, epoch + 1);
      if (me_ == 0 && ctx_.log) {
        char line[256];
        std::snprintf(line, sizeof line, "[%s] block %d epoch %lld/%lld: loss %.5f, %.1f s",
                      strategy_name(layout_.strategy), b, static_cast<long long>(epoch + 1),
                      static_cast<long long>(ctx_.train.epochs), mean, host_time_s() - start_host_s_);
        lines.push_back(line);
      }
    }
    if (live_) live_->step();
    for (const std::string& line : lines) {
      if (live_)
        live_->print_above([&] { ctx_.log(line); });
      else
        ctx_.log(line);
    }
  }

  Communicator& group_comm(const InstrInfo& info) { return comm_of(info.group); }
  Communicator& comm_of(int group) { return group < 0 ? world_ : *stage_comms_.at(static_cast<size_t>(group)); }

  void save_block(int b, BlockTrainer& t, int64_t epochs_done) {
    std::ostringstream losses;
    for (size_t e = 0; e < t.losses.size(); ++e) losses << (e ? "," : "") << t.losses[e];
    models::save_checkpoint(block_path(ctx_.out_dir, b), *t.module, t.opt.get(), t.sched.get(),
                            {{"tandem.block", std::to_string(b)},
                             {"tandem.epochs_done", std::to_string(epochs_done)},
                             {"tandem.steps_per_epoch", std::to_string(spe_)},
                             {"tandem.batch", std::to_string(ctx_.train.batch)},
                             {"tandem.strategy", strategy_name(layout_.strategy)},
                             {"tandem.teacher", w_.spec().teacher},
                             {"tandem.student", w_.spec().student},
                             {"tandem.loss", losses.str()}});
  }

  StrategyResult gather(const std::vector<InstrTime>& mine) {
    StrategyResult r;
    r.strategy = layout_.strategy;
    r.layout = layout_.describe();
    const int n = static_cast<int>(d_.schedule.size());
    const int workers = layout_.workers, blocks = w_.blocks();
    const int64_t epochs = ctx_.train.epochs;
    // One host tensor (on the CPU whatever the worker's device: the host writes it): instruction times, then
    // peak memory per worker, then losses per block and epoch, then the relayed and all-reduced bytes (whole
    // numbers far below 2^53: exact in f64).
    const int64_t bytes_at = 2 * n + workers + blocks * epochs;
    Tensor all = zeros({bytes_at + 5}, TensorOptions(DType::F64).with_device(Device::cpu()));
    double* p = all.data<double>();
    for (const InstrTime& t : mine) {
      p[2 * t.id] = t.start_s;
      p[2 * t.id + 1] = t.end_s;
    }
    const MemoryCounters mem = worker_.memory ? worker_.memory->counters() : memory_counters(worker_.device);
    p[2 * n + me_] = static_cast<double>(mem.total_peak);
    for (auto& [b, t] : students_)
      for (size_t e = 0; e < t.losses.size() && e < static_cast<size_t>(epochs) && t.saver; ++e)
        p[2 * n + workers + b * epochs + static_cast<int64_t>(e)] = t.losses[e];
    p[bytes_at] = static_cast<double>(relay_bytes_.load());
    p[bytes_at + 1] = static_cast<double>(all_reduce_bytes_.load());
    p[bytes_at + 2] = static_cast<double>(graph_counts_.eager);
    p[bytes_at + 3] = static_cast<double>(graph_counts_.captured);
    p[bytes_at + 4] = static_cast<double>(graph_counts_.replayed);
    sum_over_ranks(all, world_, worker_);
    p = all.data<double>();
    r.times.resize(static_cast<size_t>(n));
    double first = 0, last = 0;
    bool any = false;
    for (int id = 0; id < n; ++id) {
      r.times[id] = {id, p[2 * id], p[2 * id + 1]};
      first = any ? std::min(first, p[2 * id]) : p[2 * id];
      last = any ? std::max(last, p[2 * id + 1]) : p[2 * id + 1];
      any = true;
    }
    r.wall_s = last - first;
    int64_t run_steps = 0;
    for (size_t b = 0; b < d_.start.size(); ++b) run_steps = std::max(run_steps, d_.end[b] - d_.start[b]);
    r.epochs_run = run_steps / spe_;
    r.epoch_s = r.epochs_run > 0 ? r.wall_s / static_cast<double>(r.epochs_run) : 0;
    r.busy_fraction.assign(static_cast<size_t>(workers), 0.0);
    for (const Instr& i : d_.schedule.instrs()) {
      const bool work = i.kind == OpKind::LoadBatch || i.kind == OpKind::Forward || i.kind == OpKind::ForwardBackward ||
                        i.kind == OpKind::Update;
      if (work && r.wall_s > 0) r.busy_fraction[i.worker] += (r.times[i.id].end_s - r.times[i.id].start_s) / r.wall_s;
    }
    for (int k = 0; k < workers; ++k) r.peak_memory.push_back(static_cast<int64_t>(p[2 * n + k]));
    r.loss.assign(static_cast<size_t>(blocks), std::vector<double>(static_cast<size_t>(epochs)));
    for (int b = 0; b < blocks; ++b)
      for (int64_t e = 0; e < epochs; ++e) r.loss[b][e] = p[2 * n + workers + b * epochs + e];
    r.relay_bytes = static_cast<int64_t>(p[bytes_at]);
    r.all_reduce_bytes = static_cast<int64_t>(p[bytes_at + 1]);
    r.graphs = {static_cast<int64_t>(p[bytes_at + 2]), static_cast<int64_t>(p[bytes_at + 3]),
                static_cast<int64_t>(p[bytes_at + 4])};
    if (d_.schedule.size() > 0 && has_costs()) r.simulated_s = simulate(d_.schedule).makespan_s;
    r.schedule = d_;
    return r;
  }

  bool has_costs() const {
    for (const Instr& i : d_.schedule.instrs())
      if (i.cost_s > 0) return true;
    return false;
  }

  void write_outputs(const StrategyResult& r) {
    world_.barrier();  // every block checkpoint is written
    if (me_ != 0) return;
    std::vector<std::string> names;
    for (int k = 0; k < layout_.workers; ++k) names.push_back("rank " + std::to_string(k));
    write_trace(ctx_.out_dir + "/trace.json", r.schedule.schedule, r.times, names);
    std::vector<models::ModulePtr> blocks = w_.make_students();
    for (int b = 0; b < w_.blocks(); ++b) models::load_weights(block_path(ctx_.out_dir, b), *blocks[b]);
    // Registry students stitch back into their network's key names. Supernet blocks repeat item names
    // (cell0, ...), which stitch_blocks refuses: they become items block0, block1, ..., the key names of the
    // registry's supernet students (ModelOptions::supernet_cells).
    std::shared_ptr<models::Sequential> student;
    if (w_.spec().student == "supernet") {
      models::block_shapes(blocks, w_.activation_shape(0, 1));
      student = std::make_shared<models::Sequential>();
      for (int b = 0; b < w_.blocks(); ++b) student->add("block" + std::to_string(b), blocks[b]);
    } else {
      student = models::stitch_blocks(blocks, w_.activation_shape(0, 1));
    }
    student->eval();
    // Written as a training checkpoint before its first epoch (no optimizer steps, schedule position 0), so
    // that tools:train --model <tandem.model> --resume evaluates it and fine-tunes it end to end.
    optim::Sgd fresh(optim::single_group(student->named_parameters()), optim::SgdOptions{});
    optim::LrScheduler position0(fresh, optim::constant_lr());
    models::save_checkpoint(ctx_.out_dir + "/student.safetensors", *student, &fresh, &position0,
                            {{"epoch", "0"},
                             {"tandem.model", w_.student_model_spec()},
                             {"tandem.teacher", w_.spec().teacher},
                             {"tandem.strategy", strategy_name(layout_.strategy)}});
  }

  const RunContext& ctx_;
  const Workload& w_;
  const Layout& layout_;
  Worker& worker_;
  Communicator& world_;
  Communicator& signals_;
  const int me_;
  int64_t spe_ = 0, steps_ = 0;
  double start_host_s_ = host_time_s();
  DistillSchedule d_;
  std::vector<std::shared_ptr<Communicator>> stage_comms_;
  std::vector<models::ModulePtr> tblocks_;
  std::map<int, BlockTrainer> students_;
  std::unique_ptr<data::Loader> loader_;
  std::pair<int, int64_t> loader_key_{-1, -1};
  // Compute-lane state of the current step: the activation entering each block (acts_[blocks]: logits).
  std::vector<Tensor> acts_;
  int acts_step_ = -1;
  // Teacher activations handed from the compute lane to the comm lane's sends.
  std::map<int, std::vector<int>> sends_after_;  // teacher forward id -> send ids
  std::mutex outbox_mu_;
  std::map<int, Tensor> outbox_;
  std::unique_ptr<ComputeGraphs> graphs_;                      // --cuda-graph, while the executor runs
  GraphCounts graph_counts_;                                   // this rank's, of the last run
  std::optional<Progress> live_;                               // rank 0's display, while the executor runs
  std::atomic<int64_t> relay_bytes_{0}, all_reduce_bytes_{0};  // this rank's, counted on its comm lane
};

}  // namespace

StrategyResult run_strategy(const RunContext& ctx, const Layout& layout, const BlockProfile* costs, Worker& worker,
                            Communicator& world, Communicator* signals) {
  RankRunner runner(ctx, layout, costs, worker, world, signals);
  return runner.run();
}

std::vector<std::map<std::string, double>> time_breakdown(const StrategyResult& r) {
  const Schedule& s = r.schedule.schedule;
  std::vector<std::map<std::string, double>> out(static_cast<size_t>(s.workers()));
  for (const Instr& i : s.instrs()) {
    if (i.lane != kComputeLane) continue;
    const char* kind = "comm";
    switch (i.kind) {
      case OpKind::LoadBatch: kind = "load"; break;
      case OpKind::Forward: kind = "teacher"; break;
      case OpKind::ForwardBackward: kind = "student"; break;
      case OpKind::Update: kind = "update"; break;
      default: break;
    }
    out[i.worker][kind] += r.times[i.id].end_s - r.times[i.id].start_s;
  }
  for (auto& m : out) {
    double busy = 0;
    for (const char* k : {"load", "teacher", "student", "update", "comm"}) busy += m[k];
    m["idle"] = std::max(0.0, r.wall_s - busy);
  }
  return out;
}

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
