// Builders of the DP and cyclic schedules in the three modes.
#include "parallel/cyclic/timeline.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>

#include "runtime/base/error.h"

namespace tandem {
namespace parallel {
namespace cyclic {

const char* action_name(ActionKind k) {
  switch (k) {
    case ActionKind::Forward: return "forward";
    case ActionKind::Backward: return "backward";
    case ActionKind::AllReduce: return "all_reduce";
    case ActionKind::Update: return "update";
    case ActionKind::SendAct: return "send_act";
    case ActionKind::RecvAct: return "recv_act";
    case ActionKind::SendGrad: return "send_grad";
    case ActionKind::RecvGrad: return "recv_grad";
    case ActionKind::IssueParams: return "issue_params";
    case ActionKind::RelayParams: return "relay_params";
    case ActionKind::RecvParams: return "recv_params";
    case ActionKind::ChainSend: return "chain_send";
    case ActionKind::ChainRecv: return "chain_recv";
    case ActionKind::MeanSend: return "mean_send";
    case ActionKind::MeanRecv: return "mean_recv";
  }
  return "?";
}

StageCosts StageCosts::unit(int stages) {
  StageCosts c;
  c.forward_s.assign(stages, 1.0);
  c.backward_s.assign(stages, 1.0);
  c.update_s.assign(stages, 0.0);
  c.param_bytes.assign(stages, 0);
  c.activation_bytes.assign(stages, 0);
  return c;
}

void StageCosts::check(int stages) const {
  auto sized = [&](size_t n, const char* what) {
    TD_CHECK(static_cast<int>(n) == stages, "stage costs: ", what, " has ", n, " entries for ", stages, " stages");
  };
  sized(forward_s.size(), "forward_s");
  sized(backward_s.size(), "backward_s");
  sized(update_s.size(), "update_s");
  sized(param_bytes.size(), "param_bytes");
  sized(activation_bytes.size(), "activation_bytes");
  for (int l = 0; l < stages; ++l) {
    TD_CHECK(forward_s[l] > 0 && backward_s[l] > 0, "stage costs: stage ", l,
             " needs positive forward and backward costs, got ", forward_s[l], " and ", backward_s[l]);
    TD_CHECK(update_s[l] >= 0 && param_bytes[l] >= 0 && activation_bytes[l] >= 0, "stage costs: stage ", l,
             " has a negative update cost or size");
  }
  TD_CHECK(link_bytes_per_s >= 0 && latency_s >= 0, "stage costs: negative bandwidth or latency");
}

int64_t version_of(Rule rule, int64_t round, int micro, int stage, int stages) {
  if (rule == Rule::CdpV2 && v2_stale(micro, stage, stages)) return std::max<int64_t>(0, round - 1);
  return round;
}

namespace {

struct Proto {
  Instr instr;
  Action action;
  double key = 0;          // ideal start time; raised to the keys of the dependencies
  std::vector<int> deps;   // proto indices
  int intended_send = -1;  // a Recv: the proto of the Send it must pair with
};

std::string stage_label(const char* what, int64_t round, int micro, int stage) {
  std::string s = std::string(what) + " s" + std::to_string(stage);
  if (micro >= 0) s += " m" + std::to_string(micro);
  return s + " r" + std::to_string(round);
}

// Ideal times of the compute operations (see timeline.h).
class Ideal {
 public:
  Ideal(const TimelineSpec& s, const StageCosts& c) : s_(s), c_(c) {
    int S = s.stages;
    fwd_off_.assign(S, 0);
    bwd_off_.assign(S, 0);
    for (int l = 1; l < S; ++l) fwd_off_[l] = fwd_off_[l - 1] + c.forward_s[l - 1];
    double all_fwd = fwd_off_[S - 1] + c.forward_s[S - 1];
    bwd_off_[S - 1] = all_fwd;
    for (int l = S - 2; l >= 0; --l) bwd_off_[l] = bwd_off_[l + 1] + c.backward_s[l + 1];
    period_ = bwd_off_[0] + c.backward_s[0];
    // Whether every stage that computes with the current parameters finds their gradient complete (the last
    // micro-batch's backward of the stage in the previous round) at its ideal start. It holds for DP, CDP-v1 and
    // CDP-v2 with N = S in the unit model (the mask's derivation); the official code's mask for N != S (e.g.
    // N > S) can ask for a gradient before the ideal times have it, and the run then follows its dependencies.
    const double tol = 1e-9 * period_;
    const int64_t k = s.first_round;
    for (int r = 0; r < s.micro_batches; ++r)
      for (int l = 0; l < S; ++l)
        if (!delayed(s.rule, r, l, S) && fwd_start(k + 1, r, l) < bwd_end(k, s.micro_batches - 1, l) - tol)
          in_time_ = false;
  }
  bool in_time() const { return in_time_; }
  double period() const { return period_; }
  double start(int64_t k, int r) const {
    double t = static_cast<double>(k - s_.first_round) * period_;
    return is_cyclic(s_.rule) ? t + r * period_ / s_.micro_batches : t;
  }
  double fwd_start(int64_t k, int r, int l) const { return start(k, r) + fwd_off_[l]; }
  double fwd_end(int64_t k, int r, int l) const { return fwd_start(k, r, l) + c_.forward_s[l]; }
  double bwd_start(int64_t k, int r, int l) const { return start(k, r) + bwd_off_[l]; }
  double bwd_end(int64_t k, int r, int l) const { return bwd_start(k, r, l) + c_.backward_s[l]; }
  double p2p(int64_t bytes) const {
    return c_.latency_s + (c_.link_bytes_per_s > 0 ? static_cast<double>(bytes) / c_.link_bytes_per_s : 0.0);
  }
  double all_reduce(int64_t bytes) const {
    int n = s_.micro_batches;
    double factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
    return c_.latency_s + (c_.link_bytes_per_s > 0 ? factor * static_cast<double>(bytes) / c_.link_bytes_per_s : 0.0);
  }

 private:
  TimelineSpec s_;
  const StageCosts& c_;
  std::vector<double> fwd_off_, bwd_off_;
  double period_ = 0;
  bool in_time_ = true;
};

class Builder {
 public:
  Builder(const TimelineSpec& spec, const StageCosts& costs) : spec_(spec), costs_(costs), ideal_(spec, costs) {}
  const Ideal& ideal() const { return ideal_; }

  int add(int worker, int lane, OpKind kind, std::string label, double key, double cost, const Action& action,
          std::vector<int> deps = {}) {
    Proto p;
    p.instr.worker = worker;
    p.instr.lane = lane;
    p.instr.kind = kind;
    p.instr.label = std::move(label);
    p.instr.step = static_cast<int>(action.round);
    p.instr.stage = action.stage;
    p.instr.micro = action.micro;
    p.instr.peer = action.peer;
    p.instr.cost_s = cost;
    p.action = action;
    p.key = key;
    for (int d : deps)
      if (d >= 0) p.deps.push_back(d);  // -1: no such dependency (e.g. no clock tick early enough)
    protos_.push_back(std::move(p));
    return static_cast<int>(protos_.size()) - 1;
  }
  // A message: the Send on `from`'s comm lane and its Recv on `to`'s; returns {send, recv}.
  std::pair<int, int> message(int from, int to, const std::string& label, double key, int64_t bytes, const Action& send,
                              const Action& recv, std::vector<int> send_deps) {
    int s = add(from, kCommLane, OpKind::Send, label + " ->" + std::to_string(to), key, ideal_.p2p(bytes), send,
                std::move(send_deps));
    protos_[s].instr.peer = to;
    protos_[s].instr.bytes = bytes;
    int r = add(to, kCommLane, OpKind::Recv, label + " <-" + std::to_string(from), key, 0.0, recv, {s});
    protos_[r].instr.peer = from;
    protos_[r].instr.bytes = bytes;
    protos_[r].intended_send = s;
    return {s, r};
  }
  Proto& at(int i) { return protos_.at(static_cast<size_t>(i)); }
  void dep(int from, int on) {
    if (on >= 0) protos_.at(static_cast<size_t>(from)).deps.push_back(on);
  }
  // Compute operations double as each worker's clock: note one with its ideal end.
  void clock_tick(int worker, double end, int proto) {
    if (static_cast<size_t>(worker) >= clock_.size()) clock_.resize(worker + 1);
    clock_[worker].push_back({end, proto});
  }
  // A dependency kept only if it closes no cycle (checked when the timeline is finished): a message that waits
  // for its sender's clock must never wait for something that waits for the message. Dropped when the ideal
  // times are not in time (see Ideal): holding a message to a schedule the run cannot follow only adds waits.
  void soft_dep(int from, int on) {
    if (on >= 0 && ideal_.in_time()) soft_.push_back({from, on});
  }
  // The compute operation of `worker` that ideally ends last at or before `time` (-1 if none): a message sent
  // after it leaves just in time for a peer that needs it at `time`, instead of as soon as it is ready.
  int clock(int worker, double time) const {
    int best = -1;
    double best_end = -1;
    if (static_cast<size_t>(worker) >= clock_.size()) return -1;
    for (const auto& t : clock_[worker])
      if (t.first <= time + 1e-9 * ideal_.period() && t.first > best_end) {
        best_end = t.first;
        best = t.second;
      }
    return best;
  }

  Timeline finish(int workers);

 private:
  TimelineSpec spec_;
  const StageCosts& costs_;
  Ideal ideal_;
  std::vector<Proto> protos_;
  std::vector<std::vector<std::pair<double, int>>> clock_;
  std::vector<std::pair<int, int>> soft_;
};

// Topological levels over the dependencies (each dependent one deeper than its deepest dependency), raising
// every key to its dependencies' keys on the way. A cycle here is a builder bug.
std::vector<int> levels_and_keys(std::vector<Proto>& protos) {
  const size_t n = protos.size();
  std::vector<int> level(n, -1);
  std::vector<int> state(n, 0);  // 0 new, 1 on the stack, 2 done
  std::vector<std::pair<int, size_t>> stack;
  for (size_t root = 0; root < n; ++root) {
    if (state[root] == 2) continue;
    stack.push_back({static_cast<int>(root), 0});
    state[root] = 1;
    while (!stack.empty()) {
      auto& top = stack.back();
      Proto& p = protos[top.first];
      if (top.second < p.deps.size()) {
        int d = p.deps[top.second++];
        TD_ASSERT(d >= 0 && static_cast<size_t>(d) < n, "timeline: dependency out of range");
        TD_ASSERT(state[d] != 1, "timeline: dependency cycle through '", protos[d].instr.label, "'");
        if (state[d] == 0) {
          state[d] = 1;
          stack.push_back({d, 0});
        }
        continue;
      }
      int lv = 0;
      for (int d : p.deps) {
        lv = std::max(lv, level[d] + 1);
        p.key = std::max(p.key, protos[d].key);
      }
      level[top.first] = lv;
      state[top.first] = 2;
      stack.pop_back();
    }
  }
  return level;
}

Timeline Builder::finish(int workers) {
  const size_t n = protos_.size();
  std::vector<int> level = levels_and_keys(protos_);
  if (!soft_.empty()) {
    // Keys only grow along dependencies, so whatever depends on `from` has a key >= from's: a soft dependency on
    // an earlier-keyed `on` can close no cycle; one on an equally keyed `on` needs a search (among nodes of that
    // key only); one on a later `on` would delay the message past its ideal time and is dropped.
    std::vector<std::vector<int>> dependents(n);
    for (size_t i = 0; i < n; ++i)
      for (int d : protos_[i].deps) dependents[d].push_back(static_cast<int>(i));
    std::vector<int> mark(n, -1);
    for (size_t k = 0; k < soft_.size(); ++k) {
      const int from = soft_[k].first, on = soft_[k].second;
      const double key = protos_[from].key;
      if (from == on || protos_[on].key > key) continue;
      bool reaches = false;
      if (protos_[on].key == key) {
        std::vector<int> todo{from};
        mark[from] = static_cast<int>(k);
        while (!todo.empty() && !reaches) {
          int x = todo.back();
          todo.pop_back();
          for (int y : dependents[x]) {
            if (y == on) reaches = true;
            if (mark[y] != static_cast<int>(k) && protos_[y].key <= key) {
              mark[y] = static_cast<int>(k);
              todo.push_back(y);
            }
          }
        }
      }
      if (reaches) continue;
      protos_[from].deps.push_back(on);
      dependents[on].push_back(from);
    }
    level = levels_and_keys(protos_);
  }
  // Instructions in order of key, then of level (dependencies first); a receive right after its send. Every
  // lane then meets its messages in one global order, which a communicator that pairs messages in issue order
  // and holds a send until it is received (NCCL) needs: two workers that each sent to the other first, or each
  // waited to receive first, would wait forever.
  auto at = [&](int i) { return protos_[i].intended_send >= 0 ? protos_[i].intended_send : i; };
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const int pa = at(a), pb = at(b);
    if (protos_[pa].key != protos_[pb].key) return protos_[pa].key < protos_[pb].key;
    if (level[pa] != level[pb]) return level[pa] < level[pb];
    if (pa != pb) return pa < pb;
    return a < b;  // the send (its own proto) before its receive (made after it)
  });

  Timeline t;
  t.spec = spec_;
  t.period_s = ideal_.period();
  t.schedule = Schedule(workers);
  std::vector<int> id_of(n, -1);
  for (int i : order) id_of[i] = t.schedule.add(protos_[i].instr);
  t.actions.resize(n);
  for (size_t i = 0; i < n; ++i) {
    Instr& ins = t.schedule.at(id_of[i]);
    for (int d : protos_[i].deps) ins.deps.push_back(id_of[d]);
    t.actions[id_of[i]] = protos_[i].action;
  }
  t.schedule.validate();
  // Messages pair in program order (k-th send a->b with the k-th recv on b from a): check that this is the
  // pairing the builder meant, so the executor's and the simulator's view of every message is the right one.
  std::vector<int> match = t.schedule.matching_sends();
  for (size_t i = 0; i < n; ++i)
    if (protos_[i].intended_send >= 0)
      TD_ASSERT(match[id_of[i]] == id_of[protos_[i].intended_send], "timeline: ", t.schedule.describe(id_of[i]),
                " would pair with the wrong send");
  return t;
}

// The compute operation (of the predecessor's forward 0..S-1 then backward S-1..0) whose ideal end is nearest to
// `target` (the earlier on a tie), or -1 without operations.
int offset_dep(const std::vector<int>& ops, const std::vector<double>& ends, double target, double tolerance) {
  int best = -1;
  double best_gap = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    double gap = std::abs(ends[i] - target);
    if (best < 0 || gap < best_gap - tolerance) {
      best = ops[i];
      best_gap = gap;
    }
  }
  return best;
}

// An action of `kind` on (round, micro, stage), Action's first fields; the fields other kinds use stay unset.
Action action_at(ActionKind kind, int64_t round, int micro, int stage) { return Action{kind, round, micro, stage}; }

// The two ends of a message between the workers of stages `from` and `to` (model parallelism: one a stage).
std::pair<Action, Action> stage_message(ActionKind send_kind, ActionKind recv_kind, int64_t round, int micro, int from,
                                        int to) {
  Action send = action_at(send_kind, round, micro, from), recv = action_at(recv_kind, round, micro, to);
  send.peer = to;
  recv.peer = from;
  return {send, recv};
}

using Grid = std::vector<std::vector<std::vector<int>>>;  // [round - first][micro][stage]
Grid make_grid(int64_t rounds, int n, int s) {
  return Grid(static_cast<size_t>(rounds), std::vector<std::vector<int>>(n, std::vector<int>(s, -1)));
}

// Forward and backward of every (round, micro) on worker `worker_of(micro, stage)`, with the offset signals of
// the cyclic rules when each micro-batch has its own worker. Fills F and B.
void add_compute(Builder& b, const TimelineSpec& s, const StageCosts& c, bool own_worker, Grid& F, Grid& B) {
  const int N = s.micro_batches, S = s.stages;
  const Ideal& I = b.ideal();
  for (int64_t kk = 0; kk < s.rounds; ++kk) {
    int64_t k = s.first_round + kk;
    for (int r = 0; r < N; ++r) {
      for (int l = 0; l < S; ++l) {
        Action a = action_at(ActionKind::Forward, k, r, l);
        a.version = version_of(s.rule, k, r, l, S);
        int w = own_worker ? r : l;
        F[kk][r][l] =
            b.add(w, kComputeLane, OpKind::Forward, stage_label("F", k, r, l), I.fwd_start(k, r, l), c.forward_s[l], a,
                  own_worker && l > 0 ? std::vector<int>{F[kk][r][l - 1]} : std::vector<int>{});
        b.clock_tick(w, I.fwd_end(k, r, l), F[kk][r][l]);
      }
      for (int l = S - 1; l >= 0; --l) {
        Action a = action_at(ActionKind::Backward, k, r, l);
        a.version = version_of(s.rule, k, r, l, S);
        int w = own_worker ? r : l;
        std::vector<int> deps{F[kk][r][l]};
        if (own_worker && l < S - 1) deps.push_back(B[kk][r][l + 1]);
        B[kk][r][l] = b.add(w, kComputeLane, OpKind::Backward, stage_label("B", k, r, l), I.bwd_start(k, r, l),
                            c.backward_s[l], a, deps);
        b.clock_tick(w, I.bwd_end(k, r, l), B[kk][r][l]);
      }
    }
  }
  if (!is_cyclic(s.rule) || N == 1) return;
  // The uniform delay: micro-batch r starts once its predecessor (r - 1 of the same round, or N - 1 of the
  // previous round for r = 0) has done P/N of its work, i.e. after the predecessor's operation that ends nearest
  // to that (when even its first operation is longer than P/N, one first operation apart: the round then lasts
  // N times that). (In mp the data flow keeps the offsets in the steady
  // state; these hold them during the fill too.)
  const double tol = 1e-9 * I.period();
  for (int64_t kk = 0; kk < s.rounds; ++kk) {
    int64_t k = s.first_round + kk;
    for (int r = 0; r < N; ++r) {
      int64_t pk = r > 0 ? kk : kk - 1;
      int pr = r > 0 ? r - 1 : N - 1;
      if (pk < 0) continue;
      std::vector<int> ops;
      std::vector<double> ends;
      for (int l = 0; l < S; ++l) {
        ops.push_back(F[pk][pr][l]);
        ends.push_back(I.fwd_end(s.first_round + pk, pr, l));
      }
      for (int l = S - 1; l >= 0; --l) {
        ops.push_back(B[pk][pr][l]);
        ends.push_back(I.bwd_end(s.first_round + pk, pr, l));
      }
      b.dep(F[kk][r][0], offset_dep(ops, ends, I.start(k, r), tol));
    }
  }
}

void build_dp_workers(Builder& b, const TimelineSpec& s, const StageCosts& c) {
  const int N = s.micro_batches, S = s.stages;
  const Ideal& I = b.ideal();
  Grid F = make_grid(s.rounds, N, S), B = F, U = F;
  add_compute(b, s, c, true, F, B);
  Grid ready = F;  // the instruction after which worker r holds ḡ of (round, stage)
  for (int64_t kk = 0; kk < s.rounds; ++kk) {
    int64_t k = s.first_round + kk;
    for (int l = S - 1; l >= 0; --l) {
      Action a;
      a.round = k;
      a.stage = l;
      if (s.sync == GradSync::AllReduce) {
        double key = 0;
        for (int r = 0; r < N; ++r) key = std::max(key, I.bwd_end(k, r, l));
        a.kind = ActionKind::AllReduce;
        for (int r = 0; r < N; ++r) {
          a.micro = r;
          int ar = b.add(r, kCommLane, OpKind::AllReduce, stage_label("AR", k, -1, l), key,
                         I.all_reduce(c.param_bytes[l]), a, {B[kk][r][l]});
          b.at(ar).instr.collective = static_cast<int>(kk * S + l);
          // What each rank sends in a reduce-scatter + all-gather.
          b.at(ar).instr.bytes = c.param_bytes[l] * 2 * (N - 1) / N;
          ready[kk][r][l] = ar;
        }
        continue;
      }
      // Chain: partial sums 0 -> 1 -> ... -> N-1 at each worker's own backward, the mean relayed from N-1
      // along the workers keyed by when each applies it.
      int prev = -1;
      for (int r = 0; r < N; ++r) {
        a.kind = ActionKind::ChainSend;
        a.micro = r;
        a.final_sum = r == N - 1;
        a.peer = a.final_sum ? -1 : r + 1;
        std::vector<int> deps{B[kk][r][l]};
        if (prev >= 0) deps.push_back(prev);
        if (a.final_sum) {
          ready[kk][r][l] =
              b.add(r, kCommLane, OpKind::Other, stage_label("mean g", k, -1, l), I.bwd_end(k, r, l), 0.0, a, deps);
          break;
        }
        Action recv = a;
        recv.kind = ActionKind::ChainRecv;
        recv.micro = r + 1;
        recv.peer = r;
        prev = b.message(r, r + 1, stage_label("sum g", k, -1, l), I.bwd_end(k, r, l), c.param_bytes[l], a, recv, deps)
                   .second;
      }
      // The mean goes from N-1 to the other workers in the order in which they need it (on a tie, in rank
      // order): the delayed update runs after the worker's backward of the stage in the next round, the current
      // one before its next forward. A relay through a worker that needs it later would hold the others back
      // behind that worker's progress (CDP-v2's fresh stages wait for stale ones), stretching the round.
      std::vector<std::pair<double, int>> needs;
      for (int r = 0; r + 1 < N; ++r)
        needs.push_back({delayed(s.rule, r, l, S) ? I.bwd_end(k + 1, r, l) : I.fwd_start(k + 1, r, l), r});
      std::stable_sort(
          needs.begin(), needs.end(),
          [](const std::pair<double, int>& x, const std::pair<double, int>& y) { return x.first < y.first; });
      int src = N - 1;
      for (const auto& nr : needs) {
        const double need = nr.first;
        const int r = nr.second;
        Action send = a, recv = a;
        send.kind = ActionKind::MeanSend;
        send.micro = src;
        send.peer = r;
        send.final_sum = recv.final_sum = false;
        recv.kind = ActionKind::MeanRecv;
        recv.micro = r;
        recv.peer = src;
        auto m =
            b.message(src, r, stage_label("mean g", k, -1, l), need, c.param_bytes[l], send, recv, {ready[kk][src][l]});
        b.soft_dep(m.first, b.clock(src, need - I.p2p(c.param_bytes[l])));
        ready[kk][r][l] = m.second;
        src = r;
      }
    }
    for (int r = 0; r < N; ++r)
      for (int l = S - 1; l >= 0; --l) {
        Action u = action_at(ActionKind::Update, k, r, l);
        u.iteration = k;
        if (!delayed(s.rule, r, l, S)) {
          // ḡ^k right after it is complete, on the comm lane.
          u.grad_round = k;
          U[kk][r][l] =
              b.add(r, kCommLane, OpKind::Update, stage_label("U", k, -1, l), 0.0, c.update_s[l], u, {ready[kk][r][l]});
          continue;
        }
        // CDP-v1 and CDP-v2's stale stages: ḡ^{k-1} right after the worker's own backward of the stage, on its
        // compute lane (none in round 0).
        if (k == 0) continue;
        u.grad_round = k - 1;
        std::vector<int> deps{B[kk][r][l]};
        if (kk > 0) deps.push_back(ready[kk - 1][r][l]);
        U[kk][r][l] = b.add(r, kComputeLane, OpKind::Update, stage_label("U", k, -1, l), I.bwd_end(k, r, l),
                            c.update_s[l], u, deps);
      }
  }
  // The next round's forward of a stage waits for the update of that stage.
  for (int64_t kk = 1; kk < s.rounds; ++kk)
    for (int r = 0; r < N; ++r)
      for (int l = 0; l < S; ++l) b.dep(F[kk][r][l], U[kk - 1][r][l]);
}

void build_model_parallel(Builder& b, const TimelineSpec& s, const StageCosts& c) {
  const int N = s.micro_batches, S = s.stages;
  const Ideal& I = b.ideal();
  Grid F = make_grid(s.rounds, N, S), B = F;
  add_compute(b, s, c, false, F, B);
  std::map<std::pair<int, int64_t>, int> produced;  // (stage, version) -> update
  for (int64_t kk = 0; kk < s.rounds; ++kk) {
    int64_t k = s.first_round + kk;
    for (int r = 0; r < N; ++r) {
      for (int l = 0; l + 1 < S; ++l) {
        auto ends = stage_message(ActionKind::SendAct, ActionKind::RecvAct, k, r, l, l + 1);
        auto m = b.message(l, l + 1, stage_label("act", k, r, l), I.fwd_end(k, r, l), c.activation_bytes[l], ends.first,
                           ends.second, {F[kk][r][l]});
        b.dep(F[kk][r][l + 1], m.second);
      }
      for (int l = S - 1; l > 0; --l) {
        auto ends = stage_message(ActionKind::SendGrad, ActionKind::RecvGrad, k, r, l, l - 1);
        auto m = b.message(l, l - 1, stage_label("grad", k, r, l - 1), I.bwd_end(k, r, l), c.activation_bytes[l - 1],
                           ends.first, ends.second, {B[kk][r][l]});
        b.dep(B[kk][r][l - 1], m.second);
      }
    }
    // Each stage is updated once its worker has the whole round's gradient (summed locally).
    for (int l = 0; l < S; ++l) {
      Action u = action_at(ActionKind::Update, k, -1, l);
      u.grad_round = k;
      u.iteration = s.rule == Rule::CdpV1 ? k + 1 : k;
      u.src_version = s.rule == Rule::CdpV1 ? k + 1 : k;
      u.dst_version = u.src_version + 1;
      double key = 0;
      std::vector<int> deps;
      for (int r = 0; r < N; ++r) {
        key = std::max(key, I.bwd_end(k, r, l));
        deps.push_back(B[kk][r][l]);
      }
      produced[{l, u.dst_version}] =
          b.add(l, kComputeLane, OpKind::Update, stage_label("U", k, -1, l), key, c.update_s[l], u, deps);
    }
  }
  for (int64_t kk = 0; kk < s.rounds; ++kk)
    for (int r = 0; r < N; ++r)
      for (int l = 0; l < S; ++l) {
        auto it = produced.find({l, version_of(s.rule, s.first_round + kk, r, l, S)});
        if (it != produced.end()) b.dep(F[kk][r][l], it->second);
      }
}

void build_zero(Builder& b, const TimelineSpec& s, const StageCosts& c) {
  const int N = s.micro_batches, S = s.stages;
  const int64_t t0 = s.first_round, t1 = s.first_round + s.rounds;
  const Ideal& I = b.ideal();
  Grid F = make_grid(s.rounds, N, S), B = F;
  add_compute(b, s, c, true, F, B);
  std::map<std::pair<int, int64_t>, std::vector<int>> issues;  // (stage, version) -> issue instructions
  std::vector<std::vector<int>> grad_ready(s.rounds, std::vector<int>(S, -1));
  for (int64_t kk = 0; kk < s.rounds; ++kk) {
    int64_t k = t0 + kk;
    for (int l = 0; l < S; ++l) {
      const int o = stage_owner(l, N);
      // Parameters: the owner keeps a copy for its own micro-batch and sends one to the first worker of each
      // run of workers (in rank order) that computes with the same version; the run relays it onwards.
      Action keep = action_at(ActionKind::IssueParams, k, o, l);
      keep.version = version_of(s.rule, k, o, l, S);
      int kp = b.add(o, kCommLane, OpKind::Other, stage_label("keep θ", k, o, l), I.fwd_start(k, o, l), 0.0, keep);
      issues[{l, keep.version}].push_back(kp);
      b.dep(F[kk][o][l], kp);
      int prev = -1;
      int64_t prev_version = -1;
      int prev_recv = -1;
      for (int r = 0; r < N; ++r) {
        if (r == o) continue;
        int64_t v = version_of(s.rule, k, r, l, S);
        Action send, recv;
        recv.kind = ActionKind::RecvParams;
        send.round = recv.round = k;
        send.stage = recv.stage = l;
        send.version = recv.version = v;
        recv.micro = r;
        send.peer = r;
        std::pair<int, int> m;
        if (prev < 0 || v != prev_version) {
          send.kind = ActionKind::IssueParams;
          send.micro = o;
          recv.peer = o;
          double need = I.fwd_start(k, r, l);
          m = b.message(o, r, stage_label("θ", k, -1, l), need, c.param_bytes[l], send, recv, {});
          b.soft_dep(m.first, b.clock(o, need - I.p2p(c.param_bytes[l])));
          issues[{l, v}].push_back(m.first);
        } else {
          send.kind = ActionKind::RelayParams;
          send.micro = prev;
          recv.peer = prev;
          double need = I.fwd_start(k, r, l);
          m = b.message(prev, r, stage_label("θ", k, -1, l), need, c.param_bytes[l], send, recv, {prev_recv});
          b.soft_dep(m.first, b.clock(prev, need - I.p2p(c.param_bytes[l])));
        }
        b.dep(F[kk][r][l], m.second);
        prev = r;
        prev_version = v;
        prev_recv = m.second;
      }
      // Gradients: a partial sum in rank order along the workers; the last one scales by 1/N and hands the
      // mean to the owner.
      int prev_chain = -1;
      for (int r = 0; r < N; ++r) {
        const bool last = r == N - 1;
        Action send = action_at(ActionKind::ChainSend, k, r, l);
        send.final_sum = last;
        std::vector<int> deps{B[kk][r][l]};
        if (prev_chain >= 0) deps.push_back(prev_chain);
        if (last && o == r) {
          grad_ready[kk][l] =
              b.add(r, kCommLane, OpKind::Other, stage_label("mean g", k, -1, l), I.bwd_end(k, r, l), 0.0, send, deps);
          break;
        }
        Action recv = send;
        recv.kind = ActionKind::ChainRecv;
        send.peer = last ? o : r + 1;
        recv.micro = send.peer;
        recv.peer = r;
        auto m = b.message(r, send.peer, stage_label(last ? "mean g" : "sum g", k, -1, l), I.bwd_end(k, r, l),
                           c.param_bytes[l], send, recv, deps);
        if (last) grad_ready[kk][l] = m.second;
        prev_chain = m.second;
      }
    }
  }
  // The owners' updates θ^v -> θ^{v+1}, each once its gradient is complete and every use of θ^v has been
  // issued; one that needs a later round waits for a later timeline.
  for (int l = 0; l < S; ++l) {
    const int o = stage_owner(l, N);
    const bool has_stale = s.rule == Rule::CdpV2 && l < S - 1;
    int64_t v = has_stale ? std::max<int64_t>(0, t0 - 1) : t0;
    int prev_update = -1;
    while (true) {
      int64_t last_use = has_stale ? v + 1 : v;
      int64_t g = s.rule == Rule::CdpV1 ? v - 1 : v;
      if (last_use > t1 - 1 || g > t1 - 1) break;
      Action u = action_at(ActionKind::Update, std::max(last_use, g), o, l);
      u.iteration = v;
      u.grad_round = g;
      u.src_version = v;
      u.dst_version = v + 1;
      std::vector<int> deps = issues[{l, v}];
      if (g >= t0) deps.push_back(grad_ready[g - t0][l]);
      if (prev_update >= 0) deps.push_back(prev_update);
      prev_update = b.add(o, kCommLane, OpKind::Update, stage_label("U", u.round, -1, l), 0.0, c.update_s[l], u, deps);
      for (int is : issues[{l, v + 1}]) b.dep(is, prev_update);
      ++v;
    }
  }
}

}  // namespace

Timeline build_timeline(const TimelineSpec& spec, const StageCosts& costs) {
  check_config(spec.micro_batches, spec.stages);
  TD_CHECK(spec.first_round >= 0, "timeline: the first round must be >= 0, got ", spec.first_round);
  TD_CHECK(spec.rounds >= 1 && spec.rounds <= (1 << 20), "timeline: rounds must be in 1..", 1 << 20, ", got ",
           spec.rounds);
  costs.check(spec.stages);
  Builder b(spec, costs);
  switch (spec.mode) {
    case Mode::DpWorkers: build_dp_workers(b, spec, costs); break;
    case Mode::ModelParallel: build_model_parallel(b, spec, costs); break;
    case Mode::Zero: build_zero(b, spec, costs); break;
  }
  return b.finish(workers_needed(spec.mode, spec.micro_batches, spec.stages));
}

}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
