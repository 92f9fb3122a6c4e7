// Modelled Pipe-BD block profiles and Pipe-BD calibration points.
#include "tools/costmodel/bd/bd_profile.h"

#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "parallel/bd/profiler.h"
#include "parallel/bd/projection.h"
#include "parallel/bd/strategy.h"
#include "parallel/bd/warmup.h"
#include "runtime/base/error.h"
#include "runtime/memory/memory.h"
#include "runtime/memory/stream.h"
#include "runtime/optim/optim.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/rng.h"
#include "tools/costmodel/counters.h"
#include "tools/costmodel/scaling.h"

namespace tandem {
namespace costmodel {

namespace {

using parallel::bd::BlockProfile;

// Block b's teacher forward and student step at `rows` rows, each after an unrecorded warm-up (algorithm
// searches for these shapes; gradients and optimizer state coming into being).
void record_block(const parallel::bd::Workload& w, const parallel::bd::TrainOptions& train,
                  const models::ModulePtr& teacher, int b, int which, BlockRecords::Block* out) {
  const Device gpu = Device::cuda(0);
  const int64_t rows = BlockRecords::kRows[which];
  Generator gen(static_cast<uint64_t>(rows));
  const Tensor x = randn(w.activation_shape(b, rows), gen, TensorOptions().with_device(gpu));
  Tensor y;
  auto forward = [&] {
    autograd::NoGradGuard no_grad;
    y = teacher->forward(x);
  };
  {
    SkipArithmetic warm_up;
    forward();
    current_stream(gpu).synchronize();
  }
  {
    Recording rec(true);
    forward();
    out->teacher[which] = rec.take();
  }
  // A fresh student at every row count: the same weights and path samples.
  auto tracker = std::make_shared<MemoryTracker>("model profile");
  {
    MemoryScope scope(tracker);
    models::ModulePtr student = w.make_students({b})[0];
    auto opt = optim::make_optimizer(train.optimizer, student->named_parameters(models::ParamKind::Weight));
    auto step = [&] {
      student->zero_grad();
      parallel::bd::block_loss(b, w.blocks(), student->forward(x), y).backward();
      opt->step();
    };
    {
      SkipArithmetic warm_up;
      step();
      current_stream(gpu).synchronize();
    }
    Recording rec(true);
    step();
    out->student[which] = rec.take();
    double grads = 0;
    for (const Tensor& p : student->parameters(models::ParamKind::Weight)) grads += static_cast<double>(p.nbytes());
    out->gradient_bytes = grads;
  }
  out->memory[which] = static_cast<double>(tracker->counters().total_peak + parallel::bd::param_bytes(*teacher) +
                                           static_cast<int64_t>(x.nbytes() + y.nbytes()));
}

// A ring all-reduce of `bytes` over `ranks` workers, or a message of `bytes`, as one NCCL call (model.cc).
double link_seconds(const char* op_class, double bytes, int ranks, const GpuSpec& gpu, const Constants& c) {
  OpCounts op;
  op.kind = OpKind::Library;
  op.op_class = op_class;
  op.bytes_read = op.bytes_written = bytes;
  op.ranks = ranks;
  return predict(op, gpu, c).seconds;
}

Json ops_json(const std::vector<OpCounts>& ops) {
  Json a = Json::array();
  for (const OpCounts& op : ops) a.push_back(op_to_json(op));
  return a;
}
std::vector<OpCounts> ops_from(const Json& a) {
  std::vector<OpCounts> ops;
  for (const Json& op : json_array(a, "block ops")) ops.push_back(op_from_json(op));
  return ops;
}

// One Pipe-BD run's points: the records and, for the last constants asked, every strategy's epoch.
class PipeBdRun {
 public:
  PipeBdRun(const Measurement& m, BlockRecords r) : m_(m), records_(std::move(r)) {}
  const BlockRecords& records() const { return records_; }
  double seconds(const std::string& strategy, const GpuSpec& gpu, const Constants& c) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cached_ || !same(c, constants_) || gpu.name != gpu_) {
      const GpuSpec worker = m_.sm_partitions ? partition(gpu, m_.workers) : gpu;
      const BlockProfile p = block_profile(records_, m_.batch, m_.workers, worker, c);
      epochs_.clear();
      for (const parallel::bd::Projection& q : parallel::bd::project(p, {m_.workers}, m_.steps, records_.row_bytes))
        epochs_[parallel::bd::strategy_name(q.strategy)] = q.makespan_s;
      constants_ = c;
      gpu_ = gpu.name;
      cached_ = true;
    }
    auto it = epochs_.find(strategy);
    TD_CHECK(it != epochs_.end(), m_.run_label(), ": no projection of strategy '", strategy, "'");
    return it->second;
  }

 private:
  static bool same(const Constants& a, const Constants& b) { return std::memcmp(&a, &b, sizeof(Constants)) == 0; }
  Measurement m_;
  BlockRecords records_;
  mutable std::mutex mu_;
  mutable bool cached_ = false;
  mutable Constants constants_;
  mutable std::string gpu_;
  mutable std::map<std::string, double> epochs_;
};

class PipeBdPoint : public PointModel {
 public:
  PipeBdPoint(std::shared_ptr<const PipeBdRun> run, std::string strategy)
      : run_(std::move(run)), strategy_(std::move(strategy)) {}
  double predict_s(const GpuSpec& gpu, const Constants& c) const override { return run_->seconds(strategy_, gpu, c); }
  Json to_json() const override { return run_->records().to_json(); }

 private:
  std::shared_ptr<const PipeBdRun> run_;
  std::string strategy_;
};

// The runs recorded or read so far (their strategies' points share them), by run label.
std::mutex g_runs_mu;
std::map<std::string, std::shared_ptr<const PipeBdRun>>& runs() {
  static auto* m = new std::map<std::string, std::shared_ptr<const PipeBdRun>>();
  return *m;
}

std::shared_ptr<const PointModel> point_of(const Measurement& m, const std::function<BlockRecords()>& make) {
  parallel::bd::parse_strategies(m.strategy);  // a known strategy
  std::lock_guard<std::mutex> lock(g_runs_mu);
  std::shared_ptr<const PipeBdRun>& run = runs()[m.run_label()];
  if (!run) run = std::make_shared<PipeBdRun>(m, make());
  return std::make_shared<PipeBdPoint>(run, m.strategy);
}

}  // namespace

parallel::bd::WorkloadSpec paper_workload(const std::string& name, int64_t input, int64_t cells,
                                          const std::string& teacher) {
  TD_CHECK(name == "nas" || name == "compression", "the paper's workloads are nas and compression, not '", name, "'");
  const bool cifar = input <= 64;
  parallel::bd::WorkloadSpec w;
  if (name == "nas") {
    w.teacher = !teacher.empty() ? teacher : cifar ? "mobilenet_v2:cifar,classes=10" : "mobilenet_v2";
    w.student = "supernet";
    w.supernet_cells = cells;
  } else {
    w.teacher = !teacher.empty() ? teacher : cifar ? "resnet18:cifar,classes=10" : "resnet18";
    w.student = "separable";
  }
  w.sample = {3, input, input};
  return w;
}

Json BlockRecords::to_json() const {
  Json j = Json::object();
  Json bs = Json::array();
  for (const Block& b : blocks) {
    Json e = Json::object();
    for (int i = 0; i < 2; ++i) {
      const std::string rows = std::to_string(kRows[i]);
      e["teacher_" + rows] = ops_json(b.teacher[i]);
      e["student_" + rows] = ops_json(b.student[i]);
      e["memory_" + rows] = b.memory[i];
    }
    e["gradient_bytes"] = b.gradient_bytes;
    bs.push_back(e);
  }
  j["blocks"] = bs;
  j["row_bytes"] = row_bytes;
  return j;
}

BlockRecords BlockRecords::from_json(const Json& j) {
  BlockRecords r;
  for (const Json& e : json_array(json_at(j, "blocks"), "block records")) {
    Block b;
    for (int i = 0; i < 2; ++i) {
      const std::string rows = std::to_string(kRows[i]);
      b.teacher[i] = ops_from(json_at(e, "teacher_" + rows));
      b.student[i] = ops_from(json_at(e, "student_" + rows));
      b.memory[i] = json_number(json_at(e, "memory_" + rows), "block memory");
    }
    b.gradient_bytes = json_number(json_at(e, "gradient_bytes"), "block gradient_bytes");
    r.blocks.push_back(b);
  }
  for (const Json& v : json_array(json_at(j, "row_bytes"), "row_bytes"))
    r.row_bytes.push_back(json_int(v, "row_bytes"));
  TD_CHECK(r.row_bytes.size() == r.blocks.size() + 1, "block records: ", r.row_bytes.size(), " row sizes for ",
           r.blocks.size(), " blocks");
  return r;
}

BlockRecords record_blocks(const parallel::bd::Workload& w, const parallel::bd::TrainOptions& train) {
  TD_CHECK(counters_available(), "a modelled block profile: ", counters_unavailable_reason());
  DeviceGuard on_gpu(Device::cuda(0));
  const std::vector<models::ModulePtr> teacher = w.make_teacher_blocks(train.teacher_bn);
  BlockRecords r;
  r.row_bytes = w.row_bytes();
  r.blocks.resize(static_cast<size_t>(w.blocks()));
  for (int b = 0; b < w.blocks(); ++b)
    for (int which = 0; which < 2; ++which) record_block(w, train, teacher[b], b, which, &r.blocks[b]);
  return r;
}

BlockProfile block_profile(const BlockRecords& r, int64_t batch, int max_g, const GpuSpec& worker, const Constants& c) {
  TD_CHECK(max_g >= 1 && batch >= max_g, "a modelled profile of up to ", max_g,
           " replicas needs a batch of at least as many rows, got ", batch);
  const int k = static_cast<int>(r.blocks.size());
  const double r0 = static_cast<double>(BlockRecords::kRows[0]), r1 = static_cast<double>(BlockRecords::kRows[1]);
  BlockProfile p;
  p.batch = batch;
  for (int g = 1; g <= max_g; ++g) {
    const double rows = static_cast<double>(batch) / g;
    std::vector<double> te, st, ar, te_host, st_host;
    std::vector<int64_t> mem;
    for (const BlockRecords::Block& b : r.blocks) {
      const std::vector<OpCounts> teacher = extrapolate(b.teacher[0], r0, b.teacher[1], r1, rows);
      const std::vector<OpCounts> student = extrapolate(b.student[0], r0, b.student[1], r1, rows);
      te.push_back(gpu_seconds(teacher, worker, c));
      st.push_back(gpu_seconds(student, worker, c));
      te_host.push_back(host_seconds(teacher, c));
      st_host.push_back(host_seconds(student, c));
      ar.push_back(g == 1 ? 0.0 : link_seconds("all_reduce", b.gradient_bytes, g, worker, c));
      mem.push_back(static_cast<int64_t>(b.memory[0] + (b.memory[1] - b.memory[0]) / (r1 - r0) * (rows - r0)));
    }
    p.teacher_s.push_back(te);
    p.student_s.push_back(st);
    p.allreduce_s.push_back(ar);
    p.memory.push_back(mem);
    p.teacher_host_s.push_back(te_host);
    p.student_host_s.push_back(st_host);
  }
  for (int b = 0; b < k; ++b)
    p.relay_s.push_back(b + 1 < k ? link_seconds("send", static_cast<double>(r.row_bytes[b + 1] * batch), 2, worker, c)
                                  : 0.0);
  return p;
}

BlockProfile model_block_profile(const parallel::bd::Workload& w, const parallel::bd::TrainOptions& train, int max_g,
                                 const GpuSpec& worker, const Constants& c) {
  return block_profile(record_blocks(w, train), train.batch, max_g, worker, c);
}

std::shared_ptr<const PointModel> record_pipe_bd_point(const Measurement& m) {
  return point_of(m, [&] {
    parallel::bd::TrainOptions train;
    train.batch = m.batch;
    return record_blocks(parallel::bd::Workload(paper_workload(m.workload, m.input)), train);
  });
}

std::shared_ptr<const PointModel> read_pipe_bd_point(const Measurement& m, const Json& j) {
  return point_of(m, [&] { return BlockRecords::from_json(j); });
}

}  // namespace costmodel
}  // namespace tandem
