// bench/bd: the speedup of each Pipe-BD strategy over DP on the same workers, for both workloads (NAS-like:
// MobileNetV2 -> supernet; compression: ResNet-18 -> depthwise-separable), measured on the workers and
// projected by the simulator to more workers.
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parallel/bd/projection.h"
#include "parallel/bd/session.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/formats/json.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace {

using namespace parallel::bd;

struct Options {
  std::string workload = "both";
  int64_t input = 32, batch = 256, steps = 8, cells = 2;
  std::string workers = "best:4";
  std::string nas_teacher, compression_teacher;
  std::vector<int> project = {4, 8, 16, 64};
  int trials = 5;
  PlanModel plan_model = kDefaultPlanModel;
  std::string json;
};

Options parse(int argc, char** argv) {
  Options o;
  flags::Parser p(
      "bd_bench",
      "bd_bench [--workload nas|compression|both] [--input 32|224] [--batch N] [--workers SPEC] [--steps N]\n"
      "                [--nas-teacher SPEC] [--compression-teacher SPEC] [--cells N] [--project W1,W2,...]\n"
      "                [--profile-trials N] [--plan-model tandem|pipe-bd] [--json PATH]",
      "Runs DP, LS, TR, TR+DPU and TR+DPU+AHD for --steps steps per block on synthetic images of the input size,\n"
      "same models, data and hyperparameters, and prints each one's time per epoch and speedup over DP (measured,\n"
      "and simulated from the profile), then the simulator's projection of the speedups to more workers.");
  p.text("--workload", "W", &o.workload,
         "nas (MobileNetV2 teacher -> MBConv supernet student, 6 blocks), compression\n"
         "(ResNet-18 teacher -> depthwise-separable student, 4 blocks) or both (default)");
  p.integer("--input", "S", &o.input, "32 (CIFAR variants, default) or 224 (ImageNet variants)", 8);
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
  p.text("--json", "PATH", &o.json, "write everything (reports, profiles, projections) as JSON for tools/plots");
  p.parse(argc, argv);
  o.project.assign(project.begin(), project.end());
  if (o.workload != "nas" && o.workload != "compression" && o.workload != "both")
    p.fail("--workload must be nas, compression or both");
  return o;
}

Json run_workload(const Options& o, const std::string& name) {
  const bool cifar = o.input <= 64;
  SessionOptions so;
  if (name == "nas") {
    so.workload.teacher = !o.nas_teacher.empty() ? o.nas_teacher
                          : cifar                ? "mobilenet_v2:cifar,classes=10"
                                                 : "mobilenet_v2";
    so.workload.student = "supernet";
    so.workload.supernet_cells = o.cells;
  } else {
    so.workload.teacher = !o.compression_teacher.empty() ? o.compression_teacher
                          : cifar                        ? "resnet18:cifar,classes=10"
                                                         : "resnet18";
    so.workload.student = "separable";
  }
  const std::string size = std::to_string(o.input);
  so.dataset = "synthetic:n=" + std::to_string(o.batch * o.steps) + ",h=" + size + ",w=" + size + ",c=3,classes=10";
  so.train.batch = o.batch;
  so.train.epochs = 1;
  so.train.steps_per_epoch = o.steps;
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

  const Workload workload([&] {
    WorkloadSpec s = so.workload;
    s.sample = {3, o.input, o.input};
    return s;
  }());
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

int run(const Options& o) {
  Json out = Json::object();
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
  return tandem::flags::run_reporting_errors("bd_bench", [&] { return tandem::run(o); });
}
