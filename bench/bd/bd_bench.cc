// bench/bd: the speedup of each Pipe-BD strategy over DP on the same workers, for both workloads (NAS-like:
// MobileNetV2 -> supernet; compression: ResNet-18 -> depthwise-separable), measured on the workers and
// projected by the simulator to more workers.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "parallel/bd/projection.h"
#include "parallel/bd/session.h"
#include "runtime/error.h"
#include "runtime/files.h"
#include "runtime/json.h"

namespace tandem {
namespace {

using namespace parallel::bd;

const char kUsage[] =
    "usage: bd_bench [--workload nas|compression|both] [--input 32|224] [--batch N] [--workers SPEC] [--steps N]\n"
    "                [--nas-teacher SPEC] [--compression-teacher SPEC] [--cells N] [--project W1,W2,...]\n"
    "                [--profile-trials N] [--plan-model tandem|pipe-bd] [--json PATH]\n"
    "\n"
    "Runs DP, LS, TR, TR+DPU and TR+DPU+AHD for --steps steps per block on synthetic images of the input size,\n"
    "same models, data and hyperparameters, and prints each one's time per epoch and speedup over DP (measured,\n"
    "and simulated from the profile), then the simulator's projection of the speedups to more workers.\n"
    "\n"
    "  --workload W          nas (MobileNetV2 teacher -> MBConv supernet student, 6 blocks), compression\n"
    "                        (ResNet-18 teacher -> depthwise-separable student, 4 blocks) or both (default)\n"
    "  --input S             32 (CIFAR variants, default) or 224 (ImageNet variants)\n"
    "  --batch N             global batch (default 256)\n"
    "  --workers SPEC        default best:4 (cuda:0/4, four SM partitions of GPU 0, when a GPU is present)\n"
    "  --steps N             steps per block per run (default 8)\n"
    "  --nas-teacher SPEC    override the NAS teacher (default mobilenet_v2:cifar,classes=10 / mobilenet_v2)\n"
    "  --compression-teacher SPEC  override (default resnet18:cifar,classes=10 / resnet18)\n"
    "  --cells N             cells per supernet block (default 2)\n"
    "  --project LIST        worker counts for the simulator's projection (default 4,8,16,64)\n"
    "  --profile-trials N    timed trials per profile entry (default 5)\n"
    "  --plan-model M        the planners' cost model, tandem or pipe-bd (the paper code's; see tools:distill)\n"
    "  --json PATH           write everything (reports, profiles, projections) as JSON for tools/plots\n";

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

[[noreturn]] void usage_error(const std::string& m) {
  std::fprintf(stderr, "bd_bench: %s\n\n%s", m.c_str(), kUsage);
  std::exit(2);
}

int64_t integer(const std::string& flag, const std::string& v, int64_t min) {
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < min) usage_error(flag + " needs an integer >= " + std::to_string(min));
  return x;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) usage_error(flag + " needs a value");
    const std::string v = argv[++i];
    if (flag == "--workload") o.workload = v;
    else if (flag == "--input") o.input = integer(flag, v, 8);
    else if (flag == "--batch") o.batch = integer(flag, v, 1);
    else if (flag == "--workers") o.workers = v;
    else if (flag == "--steps") o.steps = integer(flag, v, 1);
    else if (flag == "--nas-teacher") o.nas_teacher = v;
    else if (flag == "--compression-teacher") o.compression_teacher = v;
    else if (flag == "--cells") o.cells = integer(flag, v, 1);
    else if (flag == "--profile-trials") o.trials = static_cast<int>(integer(flag, v, 1));
    else if (flag == "--json") o.json = v;
    else if (flag == "--plan-model") {
      try {
        o.plan_model = parse_plan_model(v);
      } catch (const Error& e) {
        usage_error(e.message());
      }
    }
    else if (flag == "--project") {
      o.project.clear();
      std::stringstream items(v);
      std::string item;
      while (std::getline(items, item, ',')) o.project.push_back(static_cast<int>(integer(flag, item, 1)));
    } else {
      usage_error("unknown option '" + flag + "'");
    }
  }
  if (o.workload != "nas" && o.workload != "compression" && o.workload != "both")
    usage_error("--workload must be nas, compression or both");
  return o;
}

Json run_workload(const Options& o, const std::string& name) {
  const bool cifar = o.input <= 64;
  SessionOptions so;
  if (name == "nas") {
    so.workload.teacher = !o.nas_teacher.empty() ? o.nas_teacher : cifar ? "mobilenet_v2:cifar,classes=10" : "mobilenet_v2";
    so.workload.student = "supernet";
    so.workload.supernet_cells = o.cells;
  } else {
    so.workload.teacher = !o.compression_teacher.empty() ? o.compression_teacher
                          : cifar                         ? "resnet18:cifar,classes=10"
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
  std::printf("simulator projection (speedup over DP on as many workers; pipelines use at most one worker per "
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
      if (found) std::printf(" %7.2fx", found->speedup);
      else std::printf(" %8s", "-");
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
    e["peak_memory"] = static_cast<double>(p.peak_memory);
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
    write_text(o.json, out.dump(1));
    std::printf("wrote %s\n", o.json.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  tandem::Options o = tandem::parse(argc, argv);
  try {
    return tandem::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bd_bench: %s\n", e.what());
    return 1;
  }
}
