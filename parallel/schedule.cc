// Schedule construction and validation.
#include "parallel/schedule.h"

#include <map>
#include <queue>
#include <sstream>

#include "runtime/base/error.h"

namespace tandem {
namespace parallel {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::LoadBatch: return "load";
    case OpKind::Forward: return "forward";
    case OpKind::ForwardBackward: return "forward_backward";
    case OpKind::Backward: return "backward";
    case OpKind::Send: return "send";
    case OpKind::Recv: return "recv";
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::Update: return "update";
    case OpKind::Barrier: return "barrier";
    case OpKind::Other: return "other";
  }
  return "?";
}

Schedule::Schedule(int workers) : workers_(workers) {
  TD_CHECK(workers > 0, "a schedule needs at least one worker, got ", workers);
}

int Schedule::add(Instr instr) {
  TD_CHECK(instr.worker >= 0 && instr.worker < workers_, "instruction '", instr.label, "' on worker ", instr.worker,
           " of a schedule with ", workers_, " workers");
  TD_CHECK(instr.lane >= 0 && instr.lane < kNumLanes, "instruction '", instr.label, "' on lane ", instr.lane);
  instr.id = static_cast<int>(instrs_.size());
  instrs_.push_back(std::move(instr));
  return instrs_.back().id;
}

std::vector<int> Schedule::program(int worker, int lane) const {
  std::vector<int> ids;
  for (const Instr& i : instrs_)
    if (i.worker == worker && i.lane == lane) ids.push_back(i.id);
  return ids;
}

std::string Schedule::describe(int id) const {
  const Instr& i = at(id);
  std::ostringstream os;
  os << "worker " << i.worker << " #" << id << " '" << i.label << "'";
  if (i.step >= 0) os << " (step " << i.step << ")";
  return os.str();
}

std::vector<int> Schedule::matching_sends() const {
  std::map<std::pair<int, int>, std::queue<int>> sends;  // (from, to) -> send ids in order
  for (const Instr& i : instrs_)
    if (i.kind == OpKind::Send) sends[{i.worker, i.peer}].push(i.id);
  std::vector<int> match(instrs_.size(), -1);
  for (const Instr& i : instrs_) {
    if (i.kind != OpKind::Recv) continue;
    auto& q = sends[{i.peer, i.worker}];
    if (q.empty()) continue;
    match[i.id] = q.front();
    q.pop();
  }
  return match;
}

void Schedule::validate() const {
  size_t n = instrs_.size();
  std::map<std::pair<int, int>, int> balance;  // (from, to) -> sends - recvs
  std::map<int, std::vector<int>> collectives;
  for (const Instr& i : instrs_) {
    for (int d : i.deps)
      TD_CHECK(d >= 0 && static_cast<size_t>(d) < n && d != i.id, describe(i.id), " depends on unknown instruction ",
               d);
    if (i.kind == OpKind::Send || i.kind == OpKind::Recv) {
      TD_CHECK(i.peer >= 0 && i.peer < workers_ && i.peer != i.worker, describe(i.id), " has peer ", i.peer);
      if (i.kind == OpKind::Send)
        ++balance[{i.worker, i.peer}];
      else
        --balance[{i.peer, i.worker}];
    }
    if (i.kind == OpKind::AllReduce || i.kind == OpKind::Barrier) {
      TD_CHECK(i.collective >= 0, describe(i.id), " is a collective without a collective key");
      collectives[i.collective].push_back(i.id);
    }
  }
  for (auto& [pair, b] : balance)
    TD_CHECK(b == 0, "worker ", pair.first, " sends ", (b > 0 ? "more" : "fewer"), " messages to worker ", pair.second,
             " than it receives (difference ", b, ")");
  for (auto& [key, ids] : collectives) {
    std::map<int, int> per_worker;
    for (int id : ids)
      TD_CHECK(++per_worker[at(id).worker] == 1, "collective ", key, " has two members on worker ", at(id).worker);
  }

  // Acyclicity over: deps, program order, send -> matching recv, and collectives (a member finishes only
  // after every member's predecessors finished, so each member inherits the others' predecessors).
  std::vector<std::vector<int>> preds(n);
  for (const Instr& i : instrs_) preds[i.id] = i.deps;
  for (int w = 0; w < workers_; ++w)
    for (int l = 0; l < kNumLanes; ++l) {
      auto p = program(w, l);
      for (size_t k = 1; k < p.size(); ++k) preds[p[k]].push_back(p[k - 1]);
    }
  auto match = matching_sends();
  for (size_t r = 0; r < n; ++r)
    if (match[r] >= 0) preds[r].push_back(match[r]);
  for (auto& [key, ids] : collectives) {
    std::vector<int> shared;
    for (int a : ids) shared.insert(shared.end(), preds[a].begin(), preds[a].end());
    for (int a : ids) preds[a].insert(preds[a].end(), shared.begin(), shared.end());
  }
  std::vector<std::vector<int>> succ(n);
  std::vector<int> indeg(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (int p : preds[i])
      if (p != static_cast<int>(i)) {
        succ[p].push_back(static_cast<int>(i));
        ++indeg[i];
      }
  std::queue<int> ready;
  for (size_t i = 0; i < n; ++i)
    if (indeg[i] == 0) ready.push(static_cast<int>(i));
  size_t seen = 0;
  while (!ready.empty()) {
    int i = ready.front();
    ready.pop();
    ++seen;
    for (int s : succ[i])
      if (--indeg[s] == 0) ready.push(s);
  }
  if (seen != n) {
    for (size_t i = 0; i < n; ++i)
      if (indeg[i] > 0)
        TD_THROW(ValueError, "the schedule can deadlock: ", describe(static_cast<int>(i)),
                 " waits in a dependency cycle");
  }
}

}  // namespace parallel
}  // namespace tandem
