// bench/bd: the speedup of each Pipe-BD strategy over DP on the same workers, for both workloads (NAS-like:
// MobileNetV2 -> supernet; compression: ResNet-18 -> depthwise-separable), measured on the workers and
// projected by the simulator to more workers; or (--project-gpus N --gpu NAME) projected from the cost model
// on N modelled GPUs (or SM partitions of one) at the paper's settings, beside the paper's figures.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parallel/bd/projection.h"
#include "parallel/bd/session.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/formats/json.h"
#include "runtime/tensor/precision.h"
#include "tools/costmodel/bd/bd_profile.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace {

using namespace parallel::bd;

struct Options {
  std::string workload = "both";
  int64_t input = 0, batch = 256, steps = 8, cells = 2;  // input 0: not given
  std::string workers = "best:4";
  std::string nas_teacher, compression_teacher;
  std::vector<int> project = {4, 8, 16, 64};
  int trials = 5;
  PlanModel plan_model = kDefaultPlanModel;
  std::string json;
  int project_gpus = 0;      // > 0: project from the cost model on this many modelled workers
  std::string gpu = "h100";  // the modelled GPU
  bool sm_partitions = false;
  Precision precision = Precision::F32;
  bool cuda_graph = false;
};

Options parse(int argc, char** argv) {
  Options o;
  flags::Parser p(
      "bd_bench",
      "bd_bench [--workload nas|compression|both] [--input 32|224] [--batch N] [--workers SPEC] [--steps N]\n"
      "                [--nas-teacher SPEC] [--compression-teacher SPEC] [--cells N] [--project W1,W2,...]\n"
      "                [--profile-trials N] [--plan-model tandem|pipe-bd] [--precision f32|bf16] [--cuda-graph]\n"
      "                [--json PATH]\n"
      "       bd_bench --project-gpus N [--gpu h100|h200] [--sm-partitions] [--workload W] [--input S] ...",
      "Runs DP, LS, TR, TR+DPU and TR+DPU+AHD for --steps steps per block on synthetic images of the input size,\n"
      "same models, data and hyperparameters, and prints each one's time per epoch and speedup over DP (measured,\n"
      "and simulated from the profile), then the simulator's projection of the speedups to more workers.");
  p.text("--workload", "W", &o.workload,
         "nas (MobileNetV2 teacher -> MBConv supernet student, 6 blocks), compression\n"
         "(ResNet-18 teacher -> depthwise-separable student, 4 blocks) or both (default)");
  p.integer("--input", "S", &o.input,
            "32 (CIFAR variants, default) or 224 (ImageNet variants); with --project-gpus, both\n"
            "unless given",
            8);
  p.integer("--batch", "N", &o.batch, "global batch (default 256)", 1);
  p.text("--workers", "SPEC", &o.workers,
         "default best:4 (cuda:0/4, four SM partitions of GPU 0, when a GPU is present)");
  p.integer("--steps", "N", &o.steps, "steps per block per run (default 8)", 1);
  p.text("--nas-teacher", "SPEC", &o.nas_teacher,
         "override the NAS teacher (default mobilenet_v2:cifar,classes=10 / mobilenet_v2)");
  p.text("--compression-teacher", "SPEC", &o.compression_teacher,
         "override (default resnet18:cifar,classes=10 / resnet18)");
  p.integer("--cells", "N", &o.cells, "cells per supernet block (default 2)", 1);
  std::vector<int64_t> project(o.project.begin(), o.project.end());
  p.integers("--project", "LIST", &project, "worker counts for the simulator's projection (default 4,8,16,64)", 1);
  p.integer("--profile-trials", "N", &o.trials, "timed trials per profile entry (default 5)", 1);
  p.custom(
      "--plan-model", "M", [&](const std::string& v) { o.plan_model = parse_plan_model(v); },
      "the planners' cost model, tandem or pipe-bd (the paper code's; see tools:distill)");
  p.custom(
      "--precision", "P", [&](const std::string& v) { o.precision = parse_precision(v); },
      "f32 (default) or bf16 for every worker: teacher and student convolutions in bf16,\n"
      "relayed activations in bf16, f32 weights and optimizer (runtime/tensor/precision.h)");
  p.flag("--cuda-graph", &o.cuda_graph, true,
         "CUDA workers replay each teacher forward and student step from a CUDA graph (as\n"
         "tools:distill --cuda-graph); the profile stays eager");
  p.text("--json", "PATH", &o.json, "write everything (reports, profiles, projections) as JSON for tools/plots");
  p.group("projections from the cost model (no workers run; needs the simulated GPU)");
  p.integer("--project-gpus", "N", &o.project_gpus,
            "project every strategy on N modelled GPUs joined by NVLink, from block costs the cost\n"
            "model predicts (tools/costmodel), beside the paper's figures",
            1);
  p.custom(
      "--gpu", "NAME", [&](const std::string& v) { o.gpu = costmodel::gpu_spec(v).name; },
      "the modelled GPU: h100 (default) or h200");
  p.flag("--sm-partitions", &o.sm_partitions, true,
         "the N modelled workers are SM partitions of one GPU (green contexts), as in the H200 run");
  p.parse(argc, argv);
  o.project.assign(project.begin(), project.end());
  if (o.precision != Precision::F32 && o.project_gpus > 0)
    p.fail("--precision bf16 with --project-gpus: the cost model predicts f32 blocks only");
  if (o.cuda_graph && o.project_gpus > 0) p.fail("--cuda-graph with --project-gpus: projections run no workers");
  if (o.workload != "nas" && o.workload != "compression" && o.workload != "both")
    p.fail("--workload must be nas, compression or both");
  return o;
}

WorkloadSpec workload_spec(const Options& o, const std::string& name, int64_t input) {
  return costmodel::paper_workload(name, input, o.cells, name == "nas" ? o.nas_teacher : o.compression_teacher);
}

Json run_workload(const Options& o, const std::string& name) {
  SessionOptions so;
  so.workload = workload_spec(o, name, o.input);
  so.workload.sample = {};
  const std::string size = std::to_string(o.input);
  so.dataset = "synthetic:n=" + std::to_string(o.batch * o.steps) + ",h=" + size + ",w=" + size + ",c=3,classes=10";
  so.train.batch = o.batch;
  so.train.epochs = 1;
  so.train.steps_per_epoch = o.steps;
  so.train.cuda_graph = o.cuda_graph;
  so.workers = o.workers;
  so.comm = "local";
  so.profile.trials = o.trials;
  so.plan_model = o.plan_model;
  so.live_progress = true;  // the figures run this bench: a sign of life during each strategy
  std::printf("== %s: %s -> %s student, %s inputs, batch %lld, %lld steps per block, workers %s\n", name.c_str(),
              so.workload.teacher.c_str(), so.workload.student.c_str(), (size + "x" + size).c_str(),
              static_cast<long long>(o.batch), static_cast<long long>(o.steps), o.workers.c_str());
  std::fflush(stdout);
  SessionReport r = run_session(so, [](const std::string& line) {
    std::printf("  %s\n", line.c_str());
    std::fflush(stdout);
  });
  std::printf("\n%s\n", report_table(r).c_str());

  const Workload workload(workload_spec(o, name, o.input));
  std::vector<Projection> proj = project(r.profile, o.project, o.steps, workload.row_bytes(), 0, o.plan_model);
  std::printf(
      "simulator projection (speedup over DP on as many workers; pipelines use at most one worker per "
      "block):\n%-11s",
      "strategy");
  for (int w : o.project) std::printf(" %8d", w);
  std::printf("\n");
  Json pj = Json::array();
  for (Strategy s : all_strategies()) {
    std::printf("%-11s", strategy_title(s));
    for (int w : o.project) {
      const Projection* found = nullptr;
      for (const Projection& p : proj)
        if (p.workers == w && p.strategy == s) found = &p;
      if (found)
        std::printf(" %7.2fx", found->speedup);
      else
        std::printf(" %8s", "-");
    }
    std::printf("\n");
  }
  for (const Projection& p : proj) {
    Json e = Json::object();
    e["workers"] = p.workers;
    e["used"] = p.used;
    e["strategy"] = strategy_name(p.strategy);
    e["title"] = strategy_title(p.strategy);
    e["layout"] = p.layout;
    e["makespan_s"] = p.makespan_s;
    e["speedup"] = p.speedup;
    e["peak_memory"] = p.peak_memory;
    pj.push_back(e);
  }
  std::printf("\n");
  Json j = Json::object();
  j["name"] = name;
  j["teacher"] = so.workload.teacher;
  j["student"] = so.workload.student;
  j["report"] = report_json(r);
  j["projections"] = pj;
  return j;
}

// The Pipe-BD poster's speedups over DP on 4 GPUs (shared/papers/pipe-bd.md, section 3; most read off its bar
// chart, to about 0.05) and the H200 run's on 4 SM partitions of one GPU (shared/notes/gpu-run-h200.md), in
// the order of all_strategies(): DP, LS, TR, TR+DPU, TR+DPU+AHD.
struct Reference {
  const char* workload;
  int64_t input;
  const char* source;
  double speedup[5];
};
const Reference kReferences[] = {
    {"nas", 32, "paper, 4 GPUs (~)", {1.0, 1.9, 2.4, 3.05, 3.05}},
    {"nas", 224, "paper, 4 GPUs (~)", {1.0, 0.45, 3.0, 3.1, 4.37}},
    {"compression", 32, "paper, 4 GPUs (~)", {1.0, 2.05, 5.6, 5.8, 7.35}},
    {"compression", 224, "paper, 4 GPUs (~)", {1.0, 0.5, 4.0, 4.2, 7.38}},
    {"compression", 32, "H200 run, 4 SM partitions", {1.0, 1.63, 1.82, 1.80, 2.23}},
};

// The strategies on o.project_gpus modelled workers at the paper's setting for one workload and input size,
// from block costs the cost model predicts.
Json project_workload(const Options& o, const std::string& name, int64_t input) {
  const int n = o.project_gpus;
  const costmodel::GpuSpec& gpu = costmodel::gpu_spec(o.gpu);
  const costmodel::GpuSpec worker = o.sm_partitions ? costmodel::partition(gpu, n) : gpu;
  const Workload workload(workload_spec(o, name, input));
  TrainOptions train;
  train.batch = o.batch;
  std::printf("== %s: %s, %lldx%lld inputs, batch %lld, on %d x %s%s\n", name.c_str(), workload.describe().c_str(),
              static_cast<long long>(input), static_cast<long long>(input), static_cast<long long>(o.batch), n,
              worker.title.c_str(), o.sm_partitions ? "" : " joined by NVLink");
  std::fflush(stdout);
  const BlockProfile profile =
      costmodel::model_block_profile(workload, train, n, worker, costmodel::fitted_constants());
  const std::vector<Projection> proj = project(profile, {n}, o.steps, workload.row_bytes(), 0, o.plan_model);
  std::vector<const Reference*> refs;
  for (const Reference& r : kReferences)
    if (name == r.workload && input == r.input && (r.source[0] == 'p') != o.sm_partitions) refs.push_back(&r);
  std::printf(
      "PROJECTED by the cost model (block costs predicted from the simulated GPU's counters, the\n"
      "strategies' schedules timed by the simulator, or the workers' launches from one host process where\n"
      "those take longer), not measured:\n%-11s %10s %16s",
      "strategy", "speedup", "memory/worker");
  for (const Reference* r : refs) std::printf("  %s", r->source);
  std::printf("\n");
  Json out = Json::array();
  const std::vector<Strategy> strategies = all_strategies();
  for (size_t i = 0; i < strategies.size(); ++i) {
    const Projection* found = nullptr;
    for (const Projection& p : proj)
      if (p.strategy == strategies[i]) found = &p;
    if (found == nullptr) continue;
    // DP and LS run whole blocks: a worker's memory is its largest block's at B/n rows (DP) or B rows (LS).
    int64_t memory = found->peak_memory;
    if (memory == 0)
      for (int64_t m : profile.memory[strategies[i] == Strategy::DP ? n - 1 : 0]) memory = std::max(memory, m);
    std::printf("%-11s %9.2fx %12.0f MiB", strategy_title(strategies[i]), found->speedup, memory / 1048576.0);
    for (const Reference* r : refs)
      std::printf("  %*.2fx", static_cast<int>(std::string(r->source).size()) - 1, r->speedup[i]);
    std::printf("   %s\n", found->layout.c_str());
    Json e = Json::object();
    e["strategy"] = strategy_name(strategies[i]);
    e["speedup"] = found->speedup;
    e["memory"] = memory;
    e["layout"] = found->layout;
    out.push_back(e);
  }
  std::printf("\n");
  Json j = Json::object();
  j["name"] = name;
  j["input"] = input;
  j["gpu"] = worker.title;
  j["workers"] = n;
  j["profile"] = profile.to_json();
  j["projections"] = out;
  return j;
}

int run_projections(const Options& o) {
  Json list = Json::array();
  const std::vector<int64_t> inputs = o.input > 0 ? std::vector<int64_t>{o.input} : std::vector<int64_t>{32, 224};
  for (const char* w : {"nas", "compression"})
    if (o.workload == "both" || o.workload == w)
      for (int64_t input : inputs) list.push_back(project_workload(o, w, input));
  if (!o.json.empty()) {
    Json out = Json::object();
    out["batch"] = o.batch;
    out["steps"] = o.steps;
    out["workloads"] = list;
    write_text(o.json, dump_json(out, 1));
    std::printf("wrote %s\n", o.json.c_str());
  }
  return 0;
}

int run(const Options& o) {
  PrecisionGuard policy(o.precision);
  if (o.precision != Precision::F32) std::printf("precision: %s\n", precision_name(o.precision));
  Json out = Json::object();
  out["precision"] = precision_name(o.precision);
  out["cuda_graph"] = o.cuda_graph;
  out["input"] = o.input;
  out["batch"] = o.batch;
  out["steps"] = o.steps;
  out["workers"] = o.workers;
  Json list = Json::array();
  for (const char* w : {"nas", "compression"})
    if (o.workload == "both" || o.workload == w) list.push_back(run_workload(o, w));
  out["workloads"] = list;
  if (!o.json.empty()) {
    write_text(o.json, dump_json(out, 1));
    std::printf("wrote %s\n", o.json.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  tandem::Options o = tandem::parse(argc, argv);
  if (o.project_gpus > 0) {
    setenv("TANDEM_CUDASIM_SMS", "132", 0);  // launches shaped as on an H100 or H200
    return tandem::flags::run_reporting_errors("bd_bench", [&] { return tandem::run_projections(o); });
  }
  if (o.input == 0) o.input = 32;
  return tandem::flags::run_reporting_errors("bd_bench", [&] { return tandem::run(o); });
}
