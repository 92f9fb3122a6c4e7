// Schedules as data: per-worker instruction lists with explicit dependencies, consumed by the executor
// (runs them), the simulator (times them from a cost model) and the trace writer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {
namespace parallel {

enum class OpKind : uint8_t {
  LoadBatch,        // read (or receive from the loader) the next batch
  Forward,          // a forward pass without gradient (e.g. a teacher block)
  ForwardBackward,  // forward, loss and backward of a trained block or stage
  Backward,         // a backward pass on its own (Cyclic DP stages)
  Send,             // point-to-point send to `peer`
  Recv,             // point-to-point receive from `peer`
  AllReduce,        // a collective over the workers sharing `collective`
  Update,           // an optimizer step
  Barrier,          // a collective barrier over the workers sharing `collective`
  Other,
};
const char* op_kind_name(OpKind k);

constexpr int kComputeLane = 0;
constexpr int kCommLane = 1;
constexpr int kNumLanes = 2;

struct Instr {
  int id = -1;  // index in the schedule (set by Schedule::add)
  int worker = 0;
  int lane = kComputeLane;  // compute or comm: a stream on CUDA, a thread on the CPU
  OpKind kind = OpKind::Other;
  std::string label;      // shown in traces, e.g. "T2", "S1 fwd+bwd", "send act->2"
  int step = -1;          // training step (or -1)
  int block = -1;         // Pipe-BD block (or -1)
  int stage = -1;         // pipeline / Cyclic-DP stage (or -1)
  int micro = -1;         // Cyclic-DP micro-batch (or -1)
  int peer = -1;          // Send/Recv: the other worker
  int collective = -1;    // AllReduce/Barrier: instructions with the same key on several workers form one
  int64_t bytes = 0;      // data moved (Send/Recv/AllReduce) or loaded
  double cost_s = 0;      // cost-model time, for the simulator
  std::vector<int> deps;  // instructions (any worker) that must finish before this one starts
};

class Schedule {
 public:
  explicit Schedule(int workers = 1);
  int workers() const { return workers_; }
  // Appends; program order on each (worker, lane) is the order of add(). Returns the id.
  int add(Instr instr);
  const Instr& at(int id) const { return instrs_.at(static_cast<size_t>(id)); }
  Instr& at(int id) { return instrs_.at(static_cast<size_t>(id)); }
  const std::vector<Instr>& instrs() const { return instrs_; }
  size_t size() const { return instrs_.size(); }
  // Ids of one worker's instructions on one lane, in program order.
  std::vector<int> program(int worker, int lane) const;
  // Checks workers, lanes and deps are in range, sends and receives pair up (same count per ordered pair),
  // collectives have one member per participating worker, and the whole graph (deps + program order) is
  // acyclic, i.e. it cannot deadlock. Throws ValueError naming the offending instruction.
  void validate() const;
  // For each Recv, the id of the Send it pairs with (k-th send a->b with k-th recv on b from a); -1 else.
  std::vector<int> matching_sends() const;
  std::string describe(int id) const;  // "worker 2 #17 'S1 fwd+bwd' (step 3)"

 private:
  int workers_;
  std::vector<Instr> instrs_;
};

}  // namespace parallel
}  // namespace tandem
