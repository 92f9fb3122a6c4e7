// The cyclic-DP trainer: per-worker state, what each compute action does on a worker (trainer_comm.cc: the
// communication actions), and checkpoints.
#include "parallel/cyclic/trainer.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>

#include "models/losses.h"
#include "parallel/cyclic/profile.h"
#include "parallel/cyclic/trainer_impl.h"
#include "parallel/local_comm.h"
#include "parallel/nccl_comm.h"
#include "runtime/base/error.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/precision.h"
#include "runtime/tensor/whole_number.h"

namespace tandem {
namespace parallel {
namespace cyclic {

using namespace trainer_detail;

namespace {

// Points the module's parameter tensors at consecutive slices of `flat` (mp's versions, zero's working copies):
// the module computes with whatever the buffer holds. Autograd's saved copies keep the storage they saw, so a
// later rebinding never changes a pending backward.
void bind_params(const std::vector<Tensor>& params, const Tensor& flat) {
  int64_t offset = flat.storage_offset();
  for (Tensor p : params) {  // handles: the module's parameters are the same tensors
    TD_ASSERT(p.is_contiguous(), "bind: parameter is not contiguous");
    p.set_storage_(flat.storage(), offset);
    offset += p.numel();
  }
}
// Drops the module's hold on its parameter memory (zero: stages this worker does not own, between uses).
void unbind_params(const std::vector<Tensor>& params) {
  for (Tensor p : params) p.set_storage_(Storage());
}

// Views of `flat` shaped like `like`, one per tensor.
std::vector<Tensor> views(const Tensor& flat, const std::vector<Tensor>& like) {
  std::vector<Tensor> out;
  int64_t offset = 0;
  for (const Tensor& t : like) {
    out.push_back(flat.narrow(0, offset, t.numel()).view(t.shape()));
    offset += t.numel();
  }
  return out;
}

int64_t total_numel(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const Tensor& t : ts) n += t.numel();
  return n;
}

// dst = scale * (the sources summed in order), in the arithmetic of Communicator::all_reduce; all contiguous and
// of dst's shape. The kernel reads the sources directly, and a GPU may not read another GPU's pool memory (no
// peer access to pools is set up): a source on another device is a DeviceError.
void sum_into(const Tensor& dst, const std::vector<Tensor>& srcs, double scale, const char* what) {
  std::vector<const void*> ptrs;
  for (const Tensor& t : srcs) {
    TD_CHECK_DEVICE(t.device() == dst.device(), "cyclic trainer: ", what, " on ", dst.device(), " of a tensor on ",
                    t.device(), "; copy it there first");
    ptrs.push_back(t.raw_data());
  }
  detail::rank_order_sum(ptrs, dst.raw_data(), dst.numel(), dst.dtype(), scale, current_stream(dst.device()), what);
}

}  // namespace

namespace trainer_detail {

Tensor flat_empty(int64_t numel, Device device, MemoryCategory category) {
  MemoryCategoryGuard guard(category);
  return empty({numel}, TensorOptions(DType::F32).with_device(device));
}

Tensor flat_copy(const std::vector<Tensor>& ts, Device device, MemoryCategory category) {
  autograd::NoGradGuard no_grad;
  Tensor flat = flat_empty(total_numel(ts), device, category);
  std::vector<Tensor> v = views(flat, ts);
  for (size_t i = 0; i < ts.size(); ++i) v[i].copy_(ts[i]);
  return flat;
}

void rank_sum(const Tensor& dst, const Tensor& a, const Tensor& b, double scale) {
  std::vector<Tensor> srcs{a};
  if (b.defined()) srcs.push_back(b);
  sum_into(dst, srcs, scale, "gradient sum");
  dst.storage().bump_version();
}

}  // namespace trainer_detail

void CyclicTrainer::Impl::setup(int w, const ModelFactory& factory) {
  WorkerState& s = *ws[w];
  const Device device = workers[w].device;
  auto model = factory();
  TD_CHECK(model != nullptr, "the model factory returned null");
  Shape sample = micro_input;
  sample[0] = 1;
  auto stages = make_stages(model_units(*model, sample), starts);
  s.stages.resize(S);
  for (int l = 0; l < S; ++l) {
    if (!runs_stage(w, l)) continue;
    Stage& st = s.stages[l];
    st.module = stages[l];
    st.module->train();
    for (auto& np : st.module->named_parameters()) {
      st.names.push_back(np.first);
      st.params.push_back(np.second);
    }
    st.numel = total_numel(st.params);
    if (updates_stage(w, l) && o.momentum != 0) {
      MemoryCategoryGuard guard(MemoryCategory::OptimizerState);
      st.momentum = zeros({st.numel}, TensorOptions(DType::F32).with_device(device));
    }
    if (o.mode == Mode::ModelParallel) {
      st.versions[0] = flat_copy(st.params, device, MemoryCategory::Parameters);
      if (o.rule == Rule::CdpV1) st.versions[1] = flat_copy(st.params, device, MemoryCategory::Parameters);
      bind_params(st.params, st.versions[0]);
    } else if (o.mode == Mode::Zero) {
      if (updates_stage(w, l)) st.master = flat_copy(st.params, device, MemoryCategory::Parameters);
      unbind_params(st.params);
    }
  }
  if (o.mode != Mode::ModelParallel) s.model = model;
}

void CyclicTrainer::Impl::sgd(Stage& st, const std::vector<Tensor>& params, const Tensor& grad, int64_t iteration) {
  autograd::NoGradGuard no_grad;
  SgdHyper h;
  h.lr = lr_at(iteration);
  h.momentum = o.momentum;
  h.weight_decay = o.weight_decay;
  h.nesterov = o.nesterov;
  h.first_step = !st.momentum_started;
  std::vector<Tensor> m;
  if (o.momentum != 0) m = views(st.momentum, params);
  sgd_step_(params, views(grad, params), m, h);
  st.momentum_started = true;
}

void CyclicTrainer::Impl::forward(int w, const Action& a) {
  WorkerState& s = *ws[w];
  Stage& st = s.stages[a.stage];
  const Device device = workers[w].device;
  const Key3 key{a.round, a.micro, a.stage};
  if (o.mode == Mode::ModelParallel) {
    bind_params(st.params, st.versions.at(a.version));
  } else if (o.mode == Mode::Zero) {
    Tensor copy;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      copy = take(st.working, a.round, "stage parameters");
    }
    bind_params(st.params, copy);
  }
  Tensor x;
  if (a.stage == 0) {
    x = batch(a.round, a.micro).images.to(device);
  } else {
    std::lock_guard<std::mutex> lock(s.mu);
    if (o.mode == Mode::ModelParallel)
      x = take(s.act_in, key, "received activation");
    else
      x = s.flight.at(Key3{a.round, a.micro, a.stage - 1}).output;
  }
  Flight f;
  f.input = x.detach();
  if (a.stage > 0) f.input.set_requires_grad(true);
  Tensor out = st.module->forward(f.input);
  if (a.stage == S - 1) {
    Tensor labels = batch(a.round, a.micro).labels.to(device);
    f.output = models::cross_entropy(out, labels);
    autograd::NoGradGuard no_grad;
    Tensor correct = sum(eq(argmax(out.detach(), 1), labels).to(DType::F32));
    s.metrics.push_back({a.round, f.output.detach(), correct, out.size(0)});
  } else {
    f.output = out;
  }
  std::lock_guard<std::mutex> lock(s.mu);
  s.flight[key] = std::move(f);
}

void CyclicTrainer::Impl::backward(int w, const Action& a) {
  WorkerState& s = *ws[w];
  Stage& st = s.stages[a.stage];
  const Device device = workers[w].device;
  const Key3 key{a.round, a.micro, a.stage};
  Flight f;
  Tensor g;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    f = s.flight.at(key);
    s.flight.erase(key);
    if (a.stage < S - 1) g = take(s.grad_in, key, "output gradient");
  }
  if (a.stage == S - 1)
    f.output.backward();
  else
    f.output.backward(g);
  g = Tensor();
  Tensor grad_input = a.stage > 0 ? f.input.grad() : Tensor();
  f = Flight();
  std::vector<Tensor> grads;
  for (const Tensor& p : st.params) {
    Tensor pg = p.grad();
    TD_ASSERT(pg.defined(), "cyclic trainer: a parameter of stage ", a.stage, " got no gradient");
    grads.push_back(pg);
  }
  Tensor flat = flat_copy(grads, device, MemoryCategory::Gradients);
  grads.clear();
  for (Tensor& p : st.params) p.zero_grad();
  if (o.mode == Mode::Zero) unbind_params(st.params);

  std::lock_guard<std::mutex> lock(s.mu);
  if (grad_input.defined()) {
    if (o.mode == Mode::ModelParallel)
      s.grad_out[key] = grad_input;
    else
      s.grad_in[Key3{a.round, a.micro, a.stage - 1}] = grad_input;
  }
  if (o.mode != Mode::ModelParallel) {
    st.own_grad[a.round] = flat;
    return;
  }
  // mp: the round's mean gradient, summed in micro-batch order as an all-reduce would.
  TD_ASSERT(a.micro == st.next_micro, "cyclic trainer: stage ", a.stage, " got micro-batch ", a.micro,
            "'s gradient out of order (expected ", st.next_micro, ")");
  const bool last = a.micro == N - 1;
  if (a.micro == 0) {
    st.partial = flat;
    if (last) rank_sum(st.partial, st.partial, Tensor(), 1.0);
  } else {
    rank_sum(st.partial, st.partial, flat, last ? 1.0 / N : 1.0);
  }
  if (last) {
    st.mean_grad[a.round] = st.partial;
    st.partial = Tensor();
    st.next_micro = 0;
  } else {
    ++st.next_micro;
  }
}

void CyclicTrainer::Impl::update(int w, const Action& a) {
  WorkerState& s = *ws[w];
  Stage& st = s.stages[a.stage];
  const Device device = workers[w].device;
  Tensor g;
  if (a.grad_round >= 0) {
    std::lock_guard<std::mutex> lock(s.mu);
    g = take(st.mean_grad, a.grad_round, "mean gradient");
  }
  switch (o.mode) {
    case Mode::DpWorkers: sgd(st, st.params, g, a.iteration); break;
    case Mode::ModelParallel: {
      Tensor buf;
      if (o.rule == Rule::Dp) {
        buf = take(st.versions, a.src_version, "parameter version");
      } else {
        auto it = st.versions.find(a.dst_version - 2);
        if (it != st.versions.end()) {
          buf = it->second;
          st.versions.erase(it);
        } else {
          buf = flat_empty(st.numel, device, MemoryCategory::Parameters);
        }
        autograd::NoGradGuard no_grad;
        buf.copy_(st.versions.at(a.src_version));
      }
      sgd(st, views(buf, st.params), g, a.iteration);
      st.versions[a.dst_version] = buf;
      break;
    }
    case Mode::Zero:
      TD_ASSERT(st.master_version == a.src_version, "zero: the owner of stage ", a.stage, " holds version ",
                st.master_version, " but the update expects ", a.src_version);
      if (g.defined()) sgd(st, views(st.master, st.params), g, a.iteration);
      st.master_version = a.dst_version;
      break;
  }
}

void CyclicTrainer::Impl::perform(int w, const Action& a) {
  switch (a.kind) {
    case ActionKind::Forward: forward(w, a); return;
    case ActionKind::Backward: backward(w, a); return;
    case ActionKind::Update: update(w, a); return;
    case ActionKind::AllReduce: all_reduce(w, a); return;
    case ActionKind::SendAct: send_activation(w, a); return;
    case ActionKind::RecvAct:
    case ActionKind::RecvGrad: recv_from_neighbour(w, a); return;
    case ActionKind::SendGrad: send_input_gradient(w, a); return;
    case ActionKind::IssueParams: issue_params(w, a); return;
    case ActionKind::RecvParams: recv_params(w, a); return;
    case ActionKind::RelayParams: relay_params(w, a); return;
    case ActionKind::ChainSend: chain_send(w, a); return;
    case ActionKind::ChainRecv: chain_recv(w, a); return;
    case ActionKind::MeanSend: mean_send(w, a); return;
    case ActionKind::MeanRecv: mean_recv(w, a); return;
  }
}

CyclicTrainer::CyclicTrainer(ModelFactory factory, const Shape& micro_input, TrainerOptions options,
                             std::vector<Worker> workers)
    : impl_(new Impl) {
  Impl& m = *impl_;
  m.o = std::move(options);
  m.N = m.o.micro_batches;
  m.S = m.o.stages;
  check_config(m.N, m.S);
  TD_CHECK(factory != nullptr, "CyclicTrainer needs a model factory");
  TD_CHECK(micro_input.size() == 4 && micro_input[0] >= 1,
           "CyclicTrainer: the micro-batch input must be [B, C, H, W],"
           " got ",
           shape_str(micro_input));
  TD_CHECK(m.o.lr >= 0 && m.o.momentum >= 0 && m.o.weight_decay >= 0,
           "CyclicTrainer: lr, momentum and weight decay "
           "must be >= 0");
  const int needed = workers_needed(m.o.mode, m.N, m.S);
  TD_CHECK(static_cast<int>(workers.size()) == needed, "mode ", mode_name(m.o.mode), " needs ", needed, " workers (",
           m.o.mode == Mode::ModelParallel ? "one per stage, S = " : "one per micro-batch, N = ", needed, ") but ",
           workers.size(), " were given");
  TD_CHECK(m.o.comm_backend == "nccl" || m.o.comm_backend == "local" || m.o.comm_backend == "local-ordered",
           "unknown comm backend '", m.o.comm_backend, "' (choose local, local-ordered or nccl)");
  m.micro_input = micro_input;
  m.workers = std::move(workers);

  // The split, from a model built on this thread (not charged to any worker).
  {
    auto model = factory();
    TD_CHECK(model != nullptr, "the model factory returned null");
    Shape sample = micro_input;
    sample[0] = 1;
    m.units = model_units(*model, sample);
    if (m.o.stage_starts.empty()) {
      m.starts = balanced_split(m.units, m.S);
    } else {
      m.starts = m.o.stage_starts;
      TD_CHECK(static_cast<int>(m.starts.size()) == m.S, "the given split has ", m.starts.size(),
               " stages but S = ", m.S);
      TD_CHECK(m.starts[0] == 0, "the given split must start at unit 0");
      for (size_t i = 1; i < m.starts.size(); ++i)
        TD_CHECK(m.starts[i] > m.starts[i - 1] && m.starts[i] < m.units.size(),
                 "the given split must increase and stay below ", m.units.size(), " units");
    }
    for (int l = 0; l < m.S; ++l) {
      size_t end = l + 1 < m.S ? m.starts[l + 1] : m.units.size();
      Shape out = m.units[end - 1].output;
      out[0] = micro_input[0];
      m.stage_out.push_back(out);
    }
    m.costs = flop_costs(m.units, m.starts, micro_input[0]);
  }
  m.ws.resize(m.workers.size());
  for (auto& w : m.ws) w.reset(new WorkerState);
  m.relays_of.resize(m.workers.size());
  run_on_workers(m.workers, [&](Worker& w) { m.setup(w.rank, factory); });
  for (Worker& w : m.workers)
    if (w.memory) w.memory->reset_peaks();
  m.signal_comms = make_local_group(m.workers);
  m.data_comms = m.o.comm_backend == "nccl"            ? make_nccl_group(m.workers)
                 : m.o.comm_backend == "local-ordered" ? make_local_group(m.workers, MessageMatching::InIssueOrder)
                                                       : make_local_group(m.workers);
}

CyclicTrainer::~CyclicTrainer() = default;

std::vector<RoundStats> CyclicTrainer::train(int64_t rounds, const MicroBatchFn& next) {
  Impl& m = *impl_;
  TD_CHECK(rounds >= 1, "train: rounds must be >= 1, got ", rounds);
  TD_CHECK(next != nullptr, "train: needs a micro-batch source");
  TimelineSpec spec;
  spec.rule = m.o.rule;
  spec.mode = m.o.mode;
  spec.micro_batches = m.N;
  spec.stages = m.S;
  spec.sync = m.o.sync ? *m.o.sync : default_sync(m.o.rule);
  spec.first_round = m.round;
  spec.rounds = rounds;
  m.last = RunRecord();
  m.last.timeline = build_timeline(spec, m.costs);
  m.act_dtype = activation_dtype(DType::F32);
  const Timeline& tl = m.last.timeline;

  m.batches.clear();
  for (int64_t i = 0; i < rounds * m.N; ++i) {
    MicroBatch b = next(m.round * m.N + i);
    TD_CHECK_SHAPE(b.images.defined() && b.images.shape() == m.micro_input, "micro-batch ", m.round * m.N + i,
                   " has images of shape ", b.images.defined() ? shape_str(b.images.shape()) : "(none)",
                   " but the trainer was built for ", shape_str(m.micro_input));
    TD_CHECK_SHAPE(b.labels.defined() && b.labels.shape() == Shape{m.micro_input[0]} && b.labels.dtype() == DType::I64,
                   "micro-batch ", m.round * m.N + i, " needs i64 labels of shape [", m.micro_input[0], "]");
    if (m.workers[0].device.is_cuda()) {
      // From page-locked memory: a lane copying a pageable micro-batch to its GPU would stall until it ran.
      b.images = b.images.pinned();
      b.labels = b.labels.pinned();
    }
    m.batches.push_back(std::move(b));
  }
  for (auto& r : m.relays_of) r.clear();
  for (size_t id = 0; id < tl.actions.size(); ++id)
    if (tl.actions[id].kind == ActionKind::RelayParams || tl.actions[id].kind == ActionKind::MeanSend)
      m.relays_of[tl.schedule.at(static_cast<int>(id)).worker].insert({tl.actions[id].round, tl.actions[id].stage});

  const size_t W = m.workers.size();
  m.last.times.resize(W);
  m.last.memory.resize(W);
  m.last.comm.resize(W);
  for (size_t w = 0; w < W; ++w) {
    MemoryTracker* t = m.workers[w].memory.get();
    m.last.memory_base.push_back(t ? t->counters().cur(MemoryCategory::Activations) : 0);
    if (t && m.o.record_memory) t->start_recording();
    m.data_comms[w]->take_records();
    m.data_comms[w]->set_recording(m.o.record_comm);
  }
  m.last.start_s = host_time_s();
  run_on_workers(m.workers, [&](Worker& w) {
    Executor ex(tl.schedule, w, m.signal_comms[w.rank].get());
    ex.run([&](const Instr& i) { m.perform(w.rank, tl.actions[i.id]); });
    for (Request& r : m.ws[w.rank]->pending) r.wait();
    m.ws[w.rank]->pending.clear();
    m.last.times[w.rank] = ex.timings();
  });
  m.last.end_s = host_time_s();
  for (size_t w = 0; w < W; ++w) {
    MemoryTracker* t = m.workers[w].memory.get();
    if (t && m.o.record_memory) m.last.memory[w] = t->stop_recording();
    m.data_comms[w]->set_recording(false);
    m.last.comm[w] = m.data_comms[w]->take_records();
  }
  m.batches.clear();

  std::map<int64_t, RoundStats> by_round;
  for (auto& wsp : m.ws) {
    WorkerState& s = *wsp;
    TD_ASSERT(s.flight.empty() && s.act_in.empty() && s.grad_in.empty() && s.grad_out.empty(),
              "cyclic trainer: activations left over after the timeline");
    for (auto& mt : s.metrics) {
      RoundStats& rs = by_round[mt.round];
      rs.round = mt.round;
      rs.loss += static_cast<double>(mt.loss.item<float>()) / m.N;
      rs.correct += static_cast<int64_t>(mt.correct.item<float>());
      rs.samples += mt.samples;
    }
    s.metrics.clear();
  }
  m.round += rounds;
  std::vector<RoundStats> out;
  for (auto& kv : by_round) out.push_back(kv.second);
  return out;
}

int64_t CyclicTrainer::round() const { return impl_->round; }
const RunRecord& CyclicTrainer::last_run() const { return impl_->last; }
void CyclicTrainer::set_recording(bool memory, bool comm) {
  impl_->o.record_memory = memory;
  impl_->o.record_comm = comm;
}
const TrainerOptions& CyclicTrainer::options() const { return impl_->o; }
const std::vector<Unit>& CyclicTrainer::units() const { return impl_->units; }
const std::vector<size_t>& CyclicTrainer::stage_starts() const { return impl_->starts; }
const StageCosts& CyclicTrainer::costs() const { return impl_->costs; }
void CyclicTrainer::set_costs(const StageCosts& costs) {
  costs.check(impl_->S);
  impl_->costs = costs;
}
std::vector<Worker>& CyclicTrainer::workers() { return impl_->workers; }

namespace {
Tensor clone_of(const Tensor& t) {
  autograd::NoGradGuard no_grad;
  return t.detach().clone();
}
// The mean over workers of one tensor each (rank-order sum, scaled by 1/n), on the first one's device, where
// the others (on their workers' GPUs) are copied first; integer tensors: the first.
Tensor mean_over(const std::vector<Tensor>& ts) {
  Tensor out = clone_of(ts[0]);
  if (!is_floating(out.dtype()) || ts.size() == 1) return out;
  std::vector<Tensor> here;
  for (const Tensor& t : ts) here.push_back(t.detach().to(out.device()).contiguous());
  sum_into(out, here, 1.0 / static_cast<double>(ts.size()), "mean over workers");
  return out;
}
bool is_param(const Stage& st, const std::string& name, size_t* index) {
  for (size_t i = 0; i < st.names.size(); ++i)
    if (st.names[i] == name) {
      *index = i;
      return true;
    }
  return false;
}
}  // namespace

NamedTensors CyclicTrainer::view_parameters(int micro) const {
  const Impl& m = *impl_;
  TD_CHECK_INDEX(micro >= 0 && micro < m.N, "view_parameters: micro-batch ", micro, " is out of range (N = ", m.N, ")");
  NamedTensors out;
  for (int l = 0; l < m.S; ++l) {
    int64_t v = version_of(m.o.rule, m.round, micro, l, m.S);
    const Stage* st = nullptr;
    Tensor flat;
    switch (m.o.mode) {
      case Mode::DpWorkers:
        st = &m.ws[micro]->stages[l];
        for (size_t i = 0; i < st->params.size(); ++i) out.push_back({st->names[i], clone_of(st->params[i])});
        continue;
      case Mode::ModelParallel:
        st = &m.ws[l]->stages[l];
        flat = st->versions.at(v);
        break;
      case Mode::Zero:
        st = &m.ws[stage_owner(l, m.N)]->stages[l];
        TD_CHECK(st->master_version == v, "view_parameters: stage ", l, "'s owner holds version ", st->master_version,
                 " but micro-batch ", micro, " needs ", v, " (its update is still to come)");
        flat = st->master;
        break;
    }
    std::vector<Tensor> vs = views(flat, st->params);
    for (size_t i = 0; i < vs.size(); ++i) out.push_back({st->names[i], clone_of(vs[i])});
  }
  return out;
}

NamedTensors CyclicTrainer::model_state() const {
  const Impl& m = *impl_;
  NamedTensors out;
  for (int l = 0; l < m.S; ++l) {
    const int home = m.o.mode == Mode::ModelParallel ? l : 0;
    const Stage& st = m.ws[home]->stages[l];
    Tensor flat;
    if (m.o.mode == Mode::ModelParallel) flat = st.versions.at(m.round);
    if (m.o.mode == Mode::Zero) flat = m.ws[stage_owner(l, m.N)]->stages[l].master;
    std::vector<Tensor> param_views = flat.defined() ? views(flat, st.params) : std::vector<Tensor>();
    for (auto& kv : st.module->state_dict()) {
      size_t i = 0;
      if (is_param(st, kv.first, &i)) {
        if (flat.defined()) {
          out.push_back({kv.first, clone_of(param_views[i])});
        } else if (m.o.rule == Rule::CdpV2) {
          std::vector<Tensor> all;
          for (auto& w : m.ws) all.push_back(w->stages[l].params[i]);
          out.push_back({kv.first, mean_over(all)});
        } else {
          out.push_back({kv.first, clone_of(kv.second)});
        }
        continue;
      }
      if (m.o.mode == Mode::ModelParallel) {
        out.push_back({kv.first, clone_of(kv.second)});
        continue;
      }
      std::vector<Tensor> all;
      for (auto& w : m.ws)
        for (auto& b : w->stages[l].module->state_dict())
          if (b.first == kv.first) all.push_back(b.second);
      out.push_back({kv.first, mean_over(all)});
    }
  }
  return out;
}

namespace {
Tensor i64_scalar(int64_t v) { return from_vector<int64_t>({v}, {1}); }
std::string prefix(int w, int l) { return "cyclic.w" + std::to_string(w) + ".s" + std::to_string(l) + "."; }
}  // namespace

NamedTensors CyclicTrainer::checkpoint_state() const {
  const Impl& m = *impl_;
  NamedTensors out;
  out.push_back({"cyclic.round", i64_scalar(m.round)});
  out.push_back({"cyclic.rule", i64_scalar(static_cast<int64_t>(m.o.rule))});
  out.push_back({"cyclic.mode", i64_scalar(static_cast<int64_t>(m.o.mode))});
  out.push_back({"cyclic.micro_batches", i64_scalar(m.N)});
  out.push_back({"cyclic.stages", i64_scalar(m.S)});
  for (size_t w = 0; w < m.ws.size(); ++w) {
    const WorkerState& s = *m.ws[w];
    for (int l = 0; l < m.S; ++l) {
      const Stage& st = s.stages[l];
      if (!st.module) continue;
      const std::string wp = "cyclic.w" + std::to_string(w) + ".";
      for (auto& kv : st.module->state_dict()) {
        size_t i = 0;
        // Parameters live in the module only in dp-workers; mp and zero keep them in versions and masters.
        if (is_param(st, kv.first, &i) && m.o.mode != Mode::DpWorkers) continue;
        out.push_back({wp + kv.first, clone_of(kv.second)});
      }
      const std::string p = prefix(static_cast<int>(w), l);
      if (st.momentum.defined()) {
        out.push_back({p + "momentum", clone_of(st.momentum)});
        out.push_back({p + "momentum_started", i64_scalar(st.momentum_started ? 1 : 0)});
      }
      for (auto& kv : st.versions) out.push_back({p + "version." + std::to_string(kv.first), clone_of(kv.second)});
      if (st.master.defined()) {
        out.push_back({p + "master", clone_of(st.master)});
        out.push_back({p + "master_version", i64_scalar(st.master_version)});
      }
      for (auto& kv : st.mean_grad) out.push_back({p + "mean_grad." + std::to_string(kv.first), clone_of(kv.second)});
    }
  }
  return out;
}

void CyclicTrainer::load_checkpoint_state(const NamedTensors& state) {
  Impl& m = *impl_;
  std::map<std::string, Tensor> given;
  for (auto& kv : state)
    if (kv.first.rfind("cyclic.", 0) == 0) given[kv.first] = kv.second;
  auto fetch = [&](const std::string& key) {
    auto it = given.find(key);
    TD_CHECK(it != given.end(), "checkpoint: key '", key, "' is missing (was it written by another configuration?)");
    Tensor t = it->second;
    given.erase(it);
    return t;
  };
  auto scalar = [&](const std::string& key) { return whole_number(fetch(key), "checkpoint: key '" + key + "'"); };
  auto copy_into = [&](const Tensor& dst, const std::string& key) {
    Tensor src = fetch(key);
    TD_CHECK_SHAPE(src.numel() == dst.numel(), "checkpoint: key '", key, "' has ", src.numel(), " elements, expected ",
                   dst.numel());
    autograd::NoGradGuard no_grad;
    Tensor(dst).copy_(src.reshape(dst.shape()));
  };
  // Keys "<p><what>.<number>" for a prefix, in increasing number.
  auto numbered = [&](const std::string& p) {
    std::vector<int64_t> out;
    for (auto& kv : given)
      if (kv.first.rfind(p, 0) == 0) {
        const std::string digits = kv.first.substr(p.size());
        TD_CHECK(!digits.empty() && digits.size() <= 18 && digits.find_first_not_of("0123456789") == std::string::npos,
                 "checkpoint: malformed key '", kv.first, "'");
        out.push_back(std::stoll(digits));
      }
    std::sort(out.begin(), out.end());
    return out;
  };
  const int64_t round = scalar("cyclic.round");
  TD_CHECK(round >= 0, "checkpoint: negative round");
  const int64_t rule = scalar("cyclic.rule"), mode = scalar("cyclic.mode");
  TD_CHECK(rule == static_cast<int64_t>(m.o.rule) && mode == static_cast<int64_t>(m.o.mode),
           "checkpoint: written by a trainer with another rule or mode (rule #", rule, ", mode #", mode,
           ") than this one (", rule_name(m.o.rule), ", ", mode_name(m.o.mode), ")");
  const int64_t n = scalar("cyclic.micro_batches"), st = scalar("cyclic.stages");
  TD_CHECK(n == m.N && st == m.S, "checkpoint: written for N = ", n, ", S = ", st, " but this trainer has N = ", m.N,
           ", S = ", m.S);
  for (size_t w = 0; w < m.ws.size(); ++w) {
    WorkerState& s = *m.ws[w];
    const Device device = m.workers[w].device;
    for (int l = 0; l < m.S; ++l) {
      Stage& st = s.stages[l];
      if (!st.module) continue;
      const std::string wp = "cyclic.w" + std::to_string(w) + ".";
      NamedTensors module_state;  // through load_state_dict, so modules refresh what they mirror on the host
      for (auto& kv : st.module->state_dict()) {
        size_t i = 0;
        if (is_param(st, kv.first, &i) && m.o.mode != Mode::DpWorkers) continue;
        module_state.push_back({kv.first, fetch(wp + kv.first)});
      }
      st.module->load_state_dict(module_state, /*strict=*/false);
      const std::string p = prefix(static_cast<int>(w), l);
      if (st.momentum.defined()) {
        copy_into(st.momentum, p + "momentum");
        st.momentum_started = scalar(p + "momentum_started") != 0;
      }
      auto load_flat = [&](const std::string& key, MemoryCategory c) {
        Tensor t = flat_empty(st.numel, device, c);
        copy_into(t, key);
        return t;
      };
      if (m.o.mode == Mode::ModelParallel) {
        st.versions.clear();
        for (int64_t v : numbered(p + "version."))
          st.versions[v] = load_flat(p + "version." + std::to_string(v), MemoryCategory::Parameters);
        TD_CHECK(st.versions.count(version_of(m.o.rule, round, 0, l, m.S)) && st.versions.count(round),
                 "checkpoint: stage ", l, " lacks the parameter versions round ", round, " needs");
        bind_params(st.params, st.versions.at(round));
      }
      if (st.master.defined()) {
        copy_into(st.master, p + "master");
        st.master_version = scalar(p + "master_version");
      }
      st.mean_grad.clear();
      for (int64_t g : numbered(p + "mean_grad."))
        st.mean_grad[g] = load_flat(p + "mean_grad." + std::to_string(g), MemoryCategory::Gradients);
    }
  }
  if (!given.empty())
    TD_THROW(ValueError, "checkpoint: unexpected key '", given.begin()->first, "' (another configuration?)");
  m.round = round;
}

double steady_round_s(const RunRecord& run) {
  const Timeline& tl = run.timeline;
  if (run.times.empty() || tl.spec.rounds < 4) return 0;
  std::map<int64_t, double> start;  // round -> start of micro-batch 0's forward of stage 0
  for (const InstrTime& t : run.times[0]) {
    const Action& a = tl.actions.at(static_cast<size_t>(t.id));
    if (a.kind == ActionKind::Forward && a.stage == 0 && a.micro == 0) start[a.round] = t.start_s;
  }
  std::vector<double> gaps;
  for (auto it = start.begin(); std::next(it) != start.end(); ++it) gaps.push_back(std::next(it)->second - it->second);
  if (gaps.size() < 3) return 0;
  gaps = std::vector<double>(gaps.begin() + 1, gaps.end() - 1);
  std::sort(gaps.begin(), gaps.end());
  return gaps[gaps.size() / 2];
}

}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
