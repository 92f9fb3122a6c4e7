// Building the five strategies' schedules, relay slices, and the profile-based cost model.
#include "parallel/bd/bd_schedule.h"

#include <algorithm>
#include <map>
#include <string>

#include "data/split.h"
#include "runtime/base/error.h"

namespace tandem {
namespace parallel {
namespace bd {

std::vector<RelaySlice> relay_slices(int senders, int receivers, int64_t rows) {
  TD_CHECK(senders >= 1 && receivers >= 1, "relay_slices needs at least one sender and one receiver");
  std::vector<RelaySlice> out;
  for (int r = 0; r < receivers; ++r) {
    data::RowRange want = data::rows_for(r, receivers, rows);
    for (int s = 0; s < senders; ++s) {
      data::RowRange have = data::rows_for(s, senders, rows);
      int64_t begin = std::max(want.begin, have.begin), end = std::min(want.end(), have.end());
      if (end > begin) out.push_back({s, r, begin, end - begin});
    }
  }
  return out;
}

namespace {

std::string block_name(const char* prefix, int b) { return prefix + std::to_string(b); }

class Builder {
 public:
  Builder(DistillSchedule& out) : out_(out), s_(out.schedule) {}

  int add(int worker, OpKind kind, const std::string& label, int64_t step, int block, const InstrInfo& info,
          int lane = kComputeLane) {
    Instr i;
    i.worker = worker;
    i.lane = lane;
    i.kind = kind;
    i.label = label;
    i.step = static_cast<int>(step);
    i.block = block;
    int id = s_.add(i);
    out_.info.push_back(info);
    return id;
  }
  Instr& at(int id) { return s_.at(id); }
  int next_collective() { return collective_++; }

 private:
  DistillSchedule& out_;
  Schedule& s_;
  int collective_ = 0;
};

InstrInfo rows_info(int64_t rows, int factor) {
  InstrInfo i;
  i.rows = rows;
  i.factor = factor;
  return i;
}

// Load, teacher prefix 0..b, student b, [all-reduce,] update: one step of DP or LS on one worker.
// DP's all-reduce (when `collective` >= 0) spans every worker, as many as its replication factor.
void add_block_step(Builder& bld, const DistillSchedule& d, int worker, int b, int64_t step, int64_t rows, int factor,
                    int collective, const std::vector<int64_t>& row_bytes) {
  InstrInfo info = rows_info(rows, factor);
  int load = bld.add(worker, OpKind::LoadBatch, "load", step, b, info);
  bld.at(load).bytes = rows * row_bytes[0];
  for (int t = 0; t <= b; ++t) bld.add(worker, OpKind::Forward, block_name("T", t), step, t, info);
  bld.add(worker, OpKind::ForwardBackward, block_name("S", b), step, b, info);
  if (collective >= 0) {
    int id = bld.add(worker, OpKind::AllReduce, block_name("ar S", b), step, b, info);
    bld.at(id).collective = collective;
  }
  InstrInfo up = info;
  up.epoch_end = (step + 1) % d.steps_per_epoch == 0;
  bld.add(worker, OpKind::Update, block_name("U", b), step, b, up);
}

void build_dp(Builder& bld, DistillSchedule& d, const std::vector<int64_t>& row_bytes) {
  const int w = d.layout.workers;
  TD_CHECK(d.batch % w == 0, "DP shards each batch evenly over the workers: a batch of ", d.batch,
           " rows does not split over ", w, " workers (use a multiple of ", w, ")");
  for (int b = 0; b < d.layout.blocks; ++b)
    for (int64_t step = d.start[b]; step < d.end[b]; ++step) {
      int collective = w > 1 ? bld.next_collective() : -1;
      for (int k = 0; k < w; ++k) add_block_step(bld, d, k, b, step, d.batch / w, w, collective, row_bytes);
    }
}

void build_ls(Builder& bld, DistillSchedule& d, const std::vector<int64_t>& row_bytes) {
  for (int k = 0; k < d.layout.workers; ++k)
    for (int b : d.layout.bins[k])
      for (int64_t step = d.start[b]; step < d.end[b]; ++step)
        add_block_step(bld, d, k, b, step, d.batch, 1, -1, row_bytes);
}

void build_pipeline(Builder& bld, DistillSchedule& d, const std::vector<int64_t>& row_bytes) {
  const Layout& l = d.layout;
  const std::vector<Stage>& stages = l.plan.stages;
  const std::vector<std::vector<int>> ranks = l.plan.stage_ranks();
  const bool barrier = l.strategy == Strategy::TR;
  const int64_t first = d.start[0];
  for (int64_t s : d.start)
    TD_CHECK(s == first,
             "a pipelined run needs every block at the same step, but the checkpoints hold blocks at steps ",
             d.start[0], " and ", s, " (resume with DP or LS, or start afresh)");
  // Recv ids of the previous step per (sender worker, receiver worker): DPU's one-step-ahead limit.
  std::map<std::pair<int, int>, int> last_recv, this_recv;
  for (int64_t step = first; step < d.end[0]; ++step) {
    this_recv.clear();
    int barrier_key = barrier ? bld.next_collective() : -1;
    for (size_t si = 0; si < stages.size(); ++si) {
      const Stage& st = stages[si];
      const int g = st.replicas;
      std::vector<int> ar_keys;
      if (g > 1)
        for (int b = st.first; b <= st.last; ++b) ar_keys.push_back(bld.next_collective());
      std::vector<RelaySlice> in, out;
      if (si > 0) in = relay_slices(stages[si - 1].replicas, g, d.batch);
      if (si + 1 < stages.size()) out = relay_slices(g, stages[si + 1].replicas, d.batch);
      for (int q = 0; q < g; ++q) {
        const int w = ranks[si][q];
        const data::RowRange mine = data::rows_for(q, g, d.batch);
        const InstrInfo info = rows_info(mine.count, g);
        // The consumers this worker feeds must have taken its previous step's relay.
        std::vector<int> ahead;
        if (!barrier)
          for (const RelaySlice& r : out) {
            auto it = last_recv.find({w, ranks[si + 1][r.receiver]});
            if (r.sender == q && it != last_recv.end()) ahead.push_back(it->second);
          }
        bool first_instr = true;
        auto add = [&](OpKind kind, const std::string& label, int block, const InstrInfo& i) {
          int id = bld.add(w, kind, label, step, block, i);
          bld.at(id).stage = static_cast<int>(si);
          if (first_instr) bld.at(id).deps = ahead;
          first_instr = false;
          return id;
        };
        if (si == 0) {
          int id = add(OpKind::LoadBatch, "load", st.first, info);
          bld.at(id).bytes = mine.count * row_bytes[0];
        }
        for (const RelaySlice& r : in) {
          if (r.receiver != q) continue;
          const int from = ranks[si - 1][r.sender];
          InstrInfo ri = info;
          ri.offset = r.begin - mine.begin;
          ri.count = r.count;
          int id = add(OpKind::Recv, "recv a" + std::to_string(st.first) + "<-w" + std::to_string(from), st.first, ri);
          bld.at(id).peer = from;
          bld.at(id).bytes = r.count * row_bytes[st.first];
          this_recv[{from, w}] = id;
        }
        int last_teacher = -1;
        for (int b = st.first; b <= st.last; ++b) last_teacher = add(OpKind::Forward, block_name("T", b), b, info);
        for (const RelaySlice& r : out) {
          if (r.sender != q) continue;
          const int to = ranks[si + 1][r.receiver];
          InstrInfo si_info = info;
          si_info.offset = r.begin - mine.begin;
          si_info.count = r.count;
          int id = bld.add(w, OpKind::Send, "send a" + std::to_string(st.last + 1) + "->w" + std::to_string(to), step,
                           st.last + 1, si_info, kCommLane);
          bld.at(id).stage = static_cast<int>(si);
          bld.at(id).peer = to;
          bld.at(id).bytes = r.count * row_bytes[st.last + 1];
          bld.at(id).deps = {last_teacher};
        }
        for (int b = st.first; b <= st.last; ++b) {
          add(OpKind::ForwardBackward, block_name("S", b), b, info);
          if (g > 1) {
            InstrInfo ar = info;
            ar.group = static_cast<int>(si);
            int id = add(OpKind::AllReduce, block_name("ar S", b), b, ar);
            bld.at(id).collective = ar_keys[b - st.first];
          }
        }
        if (barrier) {
          int id = add(OpKind::Barrier, "barrier", -1, info);
          bld.at(id).collective = barrier_key;
        }
        InstrInfo up = info;
        up.epoch_end = (step + 1) % d.steps_per_epoch == 0;
        up.group = static_cast<int>(si);
        add(OpKind::Update, "U", -1, up);
      }
    }
    last_recv = this_recv;
  }
}

}  // namespace

DistillSchedule build_schedule(const Layout& layout, int64_t batch, int64_t steps, int64_t steps_per_epoch,
                               const std::vector<int64_t>& row_bytes, const std::vector<int64_t>& start,
                               int64_t max_steps) {
  TD_CHECK(batch >= 1 && steps >= 0 && steps_per_epoch >= 1, "a schedule needs a positive batch (got ", batch,
           ") and steps per epoch (got ", steps_per_epoch, ")");
  TD_CHECK(static_cast<int>(row_bytes.size()) == layout.blocks + 1, "row_bytes needs ", layout.blocks + 1,
           " entries (the input and each block's output), got ", row_bytes.size());
  TD_CHECK(start.empty() || static_cast<int>(start.size()) == layout.blocks, "start needs one step per block");
  if (layout.pipelined())
    for (const Stage& s : layout.plan.stages)
      TD_CHECK(s.replicas <= batch, "a stage of ", s.replicas, " replicas needs a batch of at least ", s.replicas,
               " rows, got ", batch);
  else
    TD_CHECK(layout.strategy != Strategy::DP || layout.workers <= batch, "DP on ", layout.workers,
             " workers needs a batch of at least ", layout.workers, " rows, got ", batch);
  DistillSchedule d;
  d.layout = layout;
  d.batch = batch;
  d.steps = steps;
  d.steps_per_epoch = steps_per_epoch;
  d.start = start.empty() ? std::vector<int64_t>(static_cast<size_t>(layout.blocks), 0) : start;
  TD_CHECK(max_steps >= 0, "max_steps must be non-negative, got ", max_steps);
  for (int64_t s : d.start) {
    TD_CHECK(s >= 0 && s <= steps, "start step ", s, " is outside 0..", steps);
    d.end.push_back(max_steps > 0 ? std::min(steps, s + max_steps) : steps);
  }
  d.schedule = Schedule(layout.workers);
  Builder bld(d);
  switch (layout.strategy) {
    case Strategy::DP: build_dp(bld, d, row_bytes); break;
    case Strategy::LS: build_ls(bld, d, row_bytes); break;
    default: build_pipeline(bld, d, row_bytes); break;
  }
  d.schedule.validate();
  return d;
}

void apply_costs(DistillSchedule& d, const BlockProfile& p) {
  TD_CHECK(p.blocks() == d.layout.blocks, "the profile has ", p.blocks(), " blocks but the schedule ", d.layout.blocks);
  for (size_t id = 0; id < d.schedule.size(); ++id) {
    Instr& i = d.schedule.at(static_cast<int>(id));
    const InstrInfo& info = d.info[id];
    TD_CHECK(info.factor >= 1 && info.factor <= p.max_replicas(), "the profile covers replication factors 1..",
             p.max_replicas(), " but the schedule needs ", info.factor, " (profile with more workers)");
    const int g = info.factor - 1;
    switch (i.kind) {
      case OpKind::LoadBatch: i.cost_s = p.load_s.empty() ? 0 : p.load_s[g]; break;
      case OpKind::Forward: i.cost_s = p.teacher_s[g][i.block]; break;
      case OpKind::ForwardBackward: i.cost_s = p.student_s[g][i.block]; break;
      case OpKind::AllReduce: i.cost_s = p.allreduce_s[g][i.block]; break;
      case OpKind::Send:
        i.cost_s = p.relay_s[i.block - 1] * static_cast<double>(info.count) / static_cast<double>(d.batch);
        break;
      default: i.cost_s = 0; break;
    }
  }
}

double host_work_s(const DistillSchedule& d, const BlockProfile& p) {
  if (p.teacher_host_s.empty()) return 0;
  double s = 0;
  for (size_t id = 0; id < d.schedule.size(); ++id) {
    const Instr& i = d.schedule.at(static_cast<int>(id));
    const int g = d.info[id].factor - 1;
    if (i.kind == OpKind::Forward) s += p.teacher_host_s[g][i.block];
    if (i.kind == OpKind::ForwardBackward) s += p.student_host_s[g][i.block];
  }
  return s;
}

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
