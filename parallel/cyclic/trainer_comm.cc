// The cyclic-DP trainer's communication actions: activations and input gradients between mp's stages, zero's
// parameter copies and relays, and the gradient means (all-reduce, or the chain of rules.h's GradSync).
// Activations and input gradients travel in the policy's activation dtype; the rest in f32 (trainer.h says why).
#include <map>
#include <mutex>

#include "parallel/cyclic/trainer_impl.h"
#include "runtime/base/error.h"
#include "runtime/tensor/ops.h"

namespace tandem {
namespace parallel {
namespace cyclic {

using namespace trainer_detail;

namespace {

// take() under the worker's lock: the other lane fills these maps.
template <typename K>
Tensor take_locked(WorkerState& s, std::map<K, Tensor>& m, const K& key, const char* what) {
  std::lock_guard<std::mutex> lock(s.mu);
  return take(m, key, what);
}

}  // namespace

// Holds a send's request until the timeline ends. An NCCL send holds the comm stream until received; in-order
// local groups model that by waiting here.
void CyclicTrainer::Impl::keep(int w, Request r) {
  if (data_comms[w]->needs_one_issuer()) return r.wait();
  std::lock_guard<std::mutex> lock(ws[w]->mu);
  ws[w]->pending.push_back(std::move(r));
}

// Receives stage a.stage's flat tensor from a.peer into `into` at a.round, and into `relay` too where this
// worker passes it on (never when relay is null).
void CyclicTrainer::Impl::recv_stage(int w, const Action& a, MemoryCategory category, std::map<int64_t, Tensor>& into,
                                     std::map<int64_t, Tensor>* relay) {
  WorkerState& s = *ws[w];
  Tensor buf = flat_empty(s.stages[a.stage].numel, workers[w].device, category);
  data_comms[w]->recv(buf, a.peer);
  std::lock_guard<std::mutex> lock(s.mu);
  into[a.round] = buf;
  if (relay != nullptr && relays_of[w].count({a.round, a.stage})) (*relay)[a.round] = buf;
}

void CyclicTrainer::Impl::all_reduce(int w, const Action& a) {
  WorkerState& s = *ws[w];
  Stage& st = s.stages[a.stage];
  Tensor flat = take_locked(s, st.own_grad, a.round, "stage gradient");
  data_comms[w]->all_reduce(flat, 1.0 / N);
  std::lock_guard<std::mutex> lock(s.mu);
  st.mean_grad[a.round] = flat;
}

void CyclicTrainer::Impl::send_activation(int w, const Action& a) {
  WorkerState& s = *ws[w];
  Tensor out;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    out = s.flight.at(Key3{a.round, a.micro, a.stage}).output.detach();
  }
  keep(w, data_comms[w]->isend(out, a.peer));
}

void CyclicTrainer::Impl::recv_from_neighbour(int w, const Action& a) {
  WorkerState& s = *ws[w];
  const int producer = a.kind == ActionKind::RecvAct ? a.stage - 1 : a.stage;
  Tensor buf = empty(stage_out[producer], TensorOptions(act_dtype).with_device(workers[w].device));
  data_comms[w]->recv(buf, a.peer);
  std::lock_guard<std::mutex> lock(s.mu);
  (a.kind == ActionKind::RecvAct ? s.act_in : s.grad_in)[Key3{a.round, a.micro, a.stage}] = buf;
}

void CyclicTrainer::Impl::send_input_gradient(int w, const Action& a) {
  WorkerState& s = *ws[w];
  keep(w, data_comms[w]->isend(take_locked(s, s.grad_out, Key3{a.round, a.micro, a.stage}, "input gradient"), a.peer));
}

void CyclicTrainer::Impl::issue_params(int w, const Action& a) {
  WorkerState& s = *ws[w];
  Stage& st = s.stages[a.stage];
  TD_ASSERT(st.master_version == a.version, "zero: the owner of stage ", a.stage, " holds version ", st.master_version,
            " but round ", a.round, " needs ", a.version);
  Tensor copy = flat_copy({st.master}, workers[w].device, MemoryCategory::Parameters);
  if (a.peer < 0) {
    std::lock_guard<std::mutex> lock(s.mu);
    st.working[a.round] = copy;
  } else {
    keep(w, data_comms[w]->isend(copy, a.peer));
  }
}

void CyclicTrainer::Impl::recv_params(int w, const Action& a) {
  Stage& st = ws[w]->stages[a.stage];
  recv_stage(w, a, MemoryCategory::Parameters, st.working, &st.relay);
}

void CyclicTrainer::Impl::relay_params(int w, const Action& a) {
  WorkerState& s = *ws[w];
  Stage& st = s.stages[a.stage];
  keep(w, data_comms[w]->isend(take_locked(s, st.relay, a.round, "parameters to relay"), a.peer));
}

void CyclicTrainer::Impl::chain_send(int w, const Action& a) {
  WorkerState& s = *ws[w];
  Stage& st = s.stages[a.stage];
  Tensor own, partial;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    own = take(st.own_grad, a.round, "stage gradient");
    if (a.micro > 0) partial = take(st.chain_in, a.round, "partial gradient sum");
  }
  const double scale = a.final_sum ? 1.0 / N : 1.0;
  Tensor acc = own;
  if (partial.defined()) {
    rank_sum(partial, partial, own, scale);
    acc = partial;
  } else if (a.final_sum) {
    rank_sum(acc, acc, Tensor(), scale);
  }
  if (a.peer < 0) {
    std::lock_guard<std::mutex> lock(s.mu);
    st.mean_grad[a.round] = acc;
    if (o.mode == Mode::DpWorkers && N > 1) st.mean_relay[a.round] = acc;  // N-1 starts the relay
  } else {
    keep(w, data_comms[w]->isend(acc, a.peer));
  }
}

void CyclicTrainer::Impl::chain_recv(int w, const Action& a) {
  Stage& st = ws[w]->stages[a.stage];
  recv_stage(w, a, MemoryCategory::Gradients, a.final_sum ? st.mean_grad : st.chain_in, nullptr);
}

void CyclicTrainer::Impl::mean_send(int w, const Action& a) {
  WorkerState& s = *ws[w];
  Stage& st = s.stages[a.stage];
  keep(w, data_comms[w]->isend(take_locked(s, st.mean_relay, a.round, "mean gradient to relay"), a.peer));
}

void CyclicTrainer::Impl::mean_recv(int w, const Action& a) {
  Stage& st = ws[w]->stages[a.stage];
  recv_stage(w, a, MemoryCategory::Gradients, st.mean_grad, &st.mean_relay);
}

}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
