// The cyclic trainer's internals, shared by trainer.cc (state, compute actions, checkpoints) and trainer_comm.cc
// (communication actions): per-worker state, the buffer helpers both use, and CyclicTrainer::Impl.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/cyclic/trainer.h"
#include "runtime/base/error.h"
#include "runtime/memory/stream.h"

namespace tandem {
namespace parallel {
namespace cyclic {
namespace trainer_detail {

using Key3 = std::tuple<int64_t, int, int>;  // (round, micro, stage)

// Every buffer that crosses between a worker's lanes passes through these maps, so the taker's stream is
// recorded on it here: the stream-ordered allocator then hands the memory out again on the allocating lane only
// after the taking lane's work on it (the executor's cross-lane events order the taker's reads after the
// producer, not the producer's next allocations after the taker).
template <typename K>
Tensor take(std::map<K, Tensor>& m, const K& key, const char* what) {
  auto it = m.find(key);
  TD_ASSERT(it != m.end(), "cyclic trainer: missing ", what, " (the timeline ordered an action before its input)");
  Tensor t = it->second;
  m.erase(it);
  t.storage().record_stream(current_stream(t.device()));
  return t;
}

Tensor flat_empty(int64_t numel, Device device, MemoryCategory category);

// The tensors concatenated into a new flat buffer of `category`.
Tensor flat_copy(const std::vector<Tensor>& ts, Device device, MemoryCategory category);

// dst = scale * (a + b) (b may be undefined: dst = scale * a), in the arithmetic of Communicator::all_reduce.
void rank_sum(const Tensor& dst, const Tensor& a, const Tensor& b, double scale);

struct Flight {
  Tensor input;   // the stage's input (a leaf requiring grad, except at stage 0)
  Tensor output;  // its output, or the loss at the last stage
};

struct Stage {
  std::shared_ptr<models::Sequential> module;  // null where the worker does not run the stage (mp)
  std::vector<Tensor> params;                  // the module's parameter tensors
  std::vector<std::string> names;              // their state_dict names
  int64_t numel = 0;
  Tensor momentum;  // flat, when momentum != 0 and this worker updates the stage
  bool momentum_started = false;
  std::map<int64_t, Tensor> versions;  // mp: version -> flat parameters
  Tensor master;                       // zero: the owner's parameters
  int64_t master_version = 0;
  std::map<int64_t, Tensor> mean_grad;  // round -> ḡ (pending updates)
  std::map<int64_t, Tensor> own_grad;   // round -> this worker's gradient (dp-workers, zero)
  Tensor partial;                       // mp: running sum over the round's micro-batches
  int next_micro = 0;
  std::map<int64_t, Tensor> working, relay, chain_in;  // zero (chain_in also dp-workers' chain), by round
  std::map<int64_t, Tensor> mean_relay;                // dp-workers' chain: the mean to pass on, by round
};

struct WorkerState {
  std::mutex mu;  // guards the maps below and the Stage maps (both lanes use them)
  std::shared_ptr<models::Sequential> model;
  std::vector<Stage> stages;
  std::map<Key3, Flight> flight;
  std::map<Key3, Tensor> act_in, grad_in, grad_out;
  std::vector<Request> pending;
  struct Metric {
    int64_t round;
    Tensor loss, correct;
    int64_t samples;
  };
  std::vector<Metric> metrics;
};

}  // namespace trainer_detail

struct CyclicTrainer::Impl {
  TrainerOptions o;
  Shape micro_input;
  int N = 0, S = 0;
  std::vector<Worker> workers;
  std::vector<Unit> units;
  std::vector<size_t> starts;
  std::vector<Shape> stage_out;  // output of each stage for one micro-batch
  DType act_dtype = DType::F32;  // the stages' outputs and input gradients: the policy's, when train() began
  StageCosts costs;
  std::vector<std::unique_ptr<trainer_detail::WorkerState>> ws;
  std::vector<std::shared_ptr<Communicator>> signal_comms, data_comms;
  int64_t round = 0;
  RunRecord last;
  std::vector<MicroBatch> batches;  // the running timeline's, by (round - first) * N + micro
  std::vector<std::set<std::pair<int64_t, int>>>
      relays_of;  // per worker, (round, stage) whose parameters (zero) or mean gradient (chain) it passes on

  bool runs_stage(int w, int l) const { return o.mode != Mode::ModelParallel || w == l; }
  bool updates_stage(int w, int l) const { return o.mode == Mode::Zero ? stage_owner(l, N) == w : runs_stage(w, l); }
  double lr_at(int64_t iteration) const { return o.lr * (o.lr_schedule ? o.lr_schedule->factor(iteration) : 1.0); }
  const MicroBatch& batch(int64_t k, int r) const {
    return batches.at(static_cast<size_t>((k - last.timeline.spec.first_round) * N + r));
  }

  void setup(int w, const ModelFactory& factory);
  void perform(int w, const Action& a);
  void forward(int w, const Action& a);
  void backward(int w, const Action& a);
  void update(int w, const Action& a);
  void sgd(trainer_detail::Stage& st, const std::vector<Tensor>& params, const Tensor& grad, int64_t iteration);

  // The communication actions (trainer_comm.cc), on the worker's data communicator.
  void all_reduce(int w, const Action& a);
  void send_activation(int w, const Action& a);
  void recv_from_neighbour(int w, const Action& a);  // RecvAct, RecvGrad
  void send_input_gradient(int w, const Action& a);
  void issue_params(int w, const Action& a);
  void recv_params(int w, const Action& a);
  void relay_params(int w, const Action& a);
  void chain_send(int w, const Action& a);
  void chain_recv(int w, const Action& a);
  void mean_send(int w, const Action& a);
  void mean_recv(int w, const Action& a);
  void keep(int w, Request r);
  void recv_stage(int w, const Action& a, MemoryCategory category, std::map<int64_t, Tensor>& into,
                  std::map<int64_t, Tensor>* relay);
};

}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
