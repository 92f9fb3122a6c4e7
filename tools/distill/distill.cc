// tools:distill: blockwise distillation of a teacher into a student with the five Pipe-BD strategies.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "parallel/bd/session.h"
#include "runtime/error.h"

namespace tandem {
namespace {

using parallel::bd::SessionOptions;
using parallel::bd::SessionReport;

const char kUsage[] =
    "usage: distill --teacher SPEC --dataset SPEC [options]\n"
    "\n"
    "Trains a student block by block against a frozen teacher (blockwise distillation): student block i learns\n"
    "to map the teacher's block i-1 output to its block i output (MSE; the last block: soft-target cross-entropy\n"
    "against the teacher's softmax). Runs any of five strategies on the same models, data and hyperparameters:\n"
    "  dp   DNA's baseline: blocks one after another, each data-parallel over all workers (gradient all-reduce)\n"
    "  ls   whole blocks per worker by bin packing on profiled costs, full batch each, no communication\n"
    "  tr   teacher relaying: one pipeline stage per worker, activations relayed, barrier before each update\n"
    "  dpu  tr with decoupled parameter updates (no barrier; a stage runs at most one step ahead)\n"
    "  ahd  dpu on the automatic hybrid plan: stages replicated over several workers split the batch by rows\n"
    "The blocks are profiled on the workers first; the planners use the profile (and --memory-limit).\n"
    "\n"
    "model and data:\n"
    "  --teacher SPEC        registry spec, e.g. mobilenet_v2:cifar,classes=10 or resnet18:cifar,width=16\n"
    "  --teacher-weights F   the teacher's safetensors checkpoint (e.g. from tools:train); default: untrained\n"
    "  --student KIND        supernet (MBConv supernet cells, a path sampled per step), separable (the teacher\n"
    "                        with depthwise-separable convolutions), or a registry spec with as many blocks\n"
    "                        (default supernet)\n"
    "  --cells N             cells per supernet block (default 2)\n"
    "  --student-seed N      student initialization and path sampling (default 0)\n"
    "  --dataset SPEC        data::open_dataset spec (training split), e.g. fashion-mnist, cifar10:DIR,\n"
    "                        synthetic:n=2048,h=32,w=32,c=3\n"
    "  --subset N            use the first N training samples only\n"
    "  --augment SPEC        transform pipeline (default none), e.g. cifar-train\n"
    "training (the same for every strategy; each block has its own optimizer and schedule):\n"
    "  --batch N             global batch (default 256)\n"
    "  --epochs N            epochs per block (default 1)\n"
    "  --stop-after N        stop after N epochs of this run (continue later with --resume)\n"
    "  --steps-per-epoch N   at most N steps per epoch (default: every full batch)\n"
    "  --optimizer K         sgd, adam or adamw (default sgd)\n"
    "  --lr X                initial learning rate (default 0.025)\n"
    "  --momentum X          SGD momentum (default 0.9)\n"
    "  --no-nesterov         plain momentum instead of Nesterov's\n"
    "  --weight-decay X      (default 4e-5)\n"
    "  --lr-schedule SPEC    constant | step:E[:G] | multistep:E1,E2[:G] | cosine[:MIN] | warmup:E[:S]+<any>\n"
    "                        stepped once per optimizer step (default cosine)\n"
    "  --teacher-bn MODE     eval (default: running statistics) or train (batch statistics, as Pipe-BD's code)\n"
    "  --seed N              data order and augmentation (default 0)\n"
    "  --loader-threads N    data threads per loading worker (default 1)\n"
    "parallelism:\n"
    "  --strategy S          dp, ls, tr, dpu, ahd, a comma list, or all (default all)\n"
    "  --workers SPEC        cpu:N, cuda:I, cuda:I-J, cuda:I/P (P SM partitions), best:N (default best:4)\n"
    "  --comm C              auto (default: mpi/nccl under mpirun, else local), local, mpi, nccl, or\n"
    "                        local-ordered (local, pairing messages in issue order as NCCL does: a CPU check)\n"
    "  --memory-limit M      per-worker memory for the planners, bytes or with KiB/MiB/GiB (default none;\n"
    "                        tandem plan model only)\n"
    "  --plan-model M        the AHD planner's cost model: tandem (the relay into a replicated stage split\n"
    "                        over its replicas; memory limit honoured) or pipe-bd (the paper code's planner:\n"
    "                        the full-batch relay charged to the receiving stage, its order among equal\n"
    "                        plans, no memory limit); default %s\n"
    "  --plan FILE           the AHD plan (JSON, as written to OUT/plan.json) instead of the planner's\n"
    "  --profile FILE        a saved profile (OUT/profile.json) instead of profiling\n"
    "  --profile-trials N    timed trials per measurement (default 5; the median counts)\n"
    "output:\n"
    "  --out DIR             writes profile.json, plan.json, summary.json, and per strategy DIR/<s>/block<i>\n"
    "                        .safetensors (checkpoints, each epoch), student.safetensors (the stitched\n"
    "                        student; tools:train --model <its tandem.model> evaluates it) and trace.json\n"
    "  --resume              continue from the block checkpoints in DIR/<s>/\n"
    "  --help                this text\n"
    "\n"
    "Several processes: mpirun -np 4 distill --workers cpu:4 ... (or cuda:0-3: NCCL bootstrapped through MPI).\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "distill: %s\n(run distill --help for the options)\n", message.c_str());
  std::exit(2);
}

int64_t integer(const std::string& flag, const std::string& v, int64_t min) {
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < min)
    usage_error(flag + " needs an integer of at least " + std::to_string(min) + ", got '" + v + "'");
  return x;
}

double number(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= 0)) usage_error(flag + " needs a non-negative number, got '" + v + "'");
  return x;
}

int64_t bytes(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  std::string unit = end ? end : "";
  double scale = unit.empty() || unit == "B" ? 1 : unit == "KiB" ? 1024.0 : unit == "MiB" ? 1048576.0
                 : unit == "GiB" ? 1073741824.0 : -1;
  if (v.empty() || end == v.c_str() || scale < 0 || !(x > 0))
    usage_error(flag + " needs a positive size such as 512MiB or 2GiB, got '" + v + "'");
  return static_cast<int64_t>(x * scale);
}

SessionOptions parse(int argc, char** argv) {
  SessionOptions o;
  o.workers = "best:4";
  o.live_progress = true;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf(kUsage, parallel::bd::plan_model_name(parallel::bd::kDefaultPlanModel));
      std::exit(0);
    }
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--teacher") o.workload.teacher = value();
    else if (flag == "--teacher-weights") o.workload.teacher_weights = value();
    else if (flag == "--student") o.workload.student = value();
    else if (flag == "--cells") o.workload.supernet_cells = integer(flag, value(), 1);
    else if (flag == "--student-seed") o.workload.student_seed = static_cast<uint64_t>(integer(flag, value(), 0));
    else if (flag == "--dataset") o.dataset = value();
    else if (flag == "--subset") o.subset = integer(flag, value(), 1);
    else if (flag == "--augment") o.train.augment = value();
    else if (flag == "--batch") o.train.batch = integer(flag, value(), 1);
    else if (flag == "--epochs") o.train.epochs = integer(flag, value(), 1);
    else if (flag == "--stop-after") o.train.stop_after = integer(flag, value(), 1);
    else if (flag == "--steps-per-epoch") o.train.steps_per_epoch = integer(flag, value(), 1);
    else if (flag == "--optimizer") o.train.optimizer.kind = value();
    else if (flag == "--lr") o.train.optimizer.lr = number(flag, value());
    else if (flag == "--momentum") o.train.optimizer.momentum = number(flag, value());
    else if (flag == "--no-nesterov") o.train.optimizer.nesterov = false;
    else if (flag == "--weight-decay") o.train.optimizer.weight_decay = number(flag, value());
    else if (flag == "--lr-schedule") o.train.lr_schedule = value();
    else if (flag == "--teacher-bn") {
      try {
        o.train.teacher_bn = parallel::bd::parse_teacher_bn(value());
      } catch (const Error& e) {
        usage_error(e.message());
      }
    } else if (flag == "--seed") o.train.data_seed = static_cast<uint64_t>(integer(flag, value(), 0));
    else if (flag == "--loader-threads") o.train.loader_threads = static_cast<int>(integer(flag, value(), 0));
    else if (flag == "--strategy") {
      try {
        o.strategies = parallel::bd::parse_strategies(value());
      } catch (const Error& e) {
        usage_error(e.message());
      }
    } else if (flag == "--workers") o.workers = value();
    else if (flag == "--comm") o.comm = value();
    else if (flag == "--memory-limit") o.memory_limit = bytes(flag, value());
    else if (flag == "--plan-model") {
      try {
        o.plan_model = parallel::bd::parse_plan_model(value());
      } catch (const Error& e) {
        usage_error(e.message());
      }
    } else if (flag == "--plan") o.plan_path = value();
    else if (flag == "--profile") o.profile_path = value();
    else if (flag == "--profile-trials") o.profile.trials = static_cast<int>(integer(flag, value(), 1));
    else if (flag == "--out") o.out_dir = value();
    else if (flag == "--resume") o.resume = true;
    else usage_error("unknown option '" + flag + "'");
  }
  if (o.workload.teacher.empty()) usage_error("--teacher is required");
  if (o.dataset.empty()) usage_error("--dataset is required");
  if (o.resume && o.out_dir.empty()) usage_error("--resume needs --out DIR (where the checkpoints are)");
  if (o.memory_limit > 0 && o.plan_model != parallel::bd::PlanModel::Tandem)
    usage_error("--memory-limit needs --plan-model tandem (the pipe-bd model, the paper's planner, has none)");
  const std::string& opt = o.train.optimizer.kind;
  if (opt != "sgd" && opt != "adam" && opt != "adamw") usage_error("--optimizer must be sgd, adam or adamw");
  return o;
}

void print_losses(const SessionReport& r) {
  for (const auto& x : r.results) {
    std::printf("%s: loss per block (rows) and epoch (columns)\n", parallel::bd::strategy_title(x.strategy));
    for (size_t b = 0; b < x.loss.size(); ++b) {
      std::printf("  block %zu:", b);
      for (double l : x.loss[b]) std::printf(" %.5f", l);
      std::printf("\n");
    }
    std::printf("  per worker: busy");
    for (double f : x.busy_fraction) std::printf(" %.0f%%", f * 100);
    std::printf(", peak memory");
    for (int64_t m : x.peak_memory) std::printf(" %.1f MiB", m / 1048576.0);
    std::printf("\n");
  }
}

int run(int argc, char** argv) {
  SessionOptions o = parse(argc, argv);
  SessionReport r;
  try {
    r = parallel::bd::run_session(o, [](const std::string& line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    });
  } catch (const ValueError& e) {
    std::fprintf(stderr, "distill: %s\n", e.message().c_str());
    return 2;
  }
  if (!r.root) return 0;
  std::printf("\n%s on %s; %s; %lld steps per epoch of %lld rows; teacher BN %s\n", r.workload.c_str(),
              r.device.c_str(), r.data.c_str(), static_cast<long long>(r.steps_per_epoch),
              static_cast<long long>(o.train.batch), parallel::bd::teacher_bn_name(o.train.teacher_bn));
  print_losses(r);
  std::printf("\n%s", parallel::bd::report_table(r).c_str());
  if (!o.out_dir.empty())
    std::printf("wrote %s/{profile,plan,summary}.json and per strategy <s>/{block<i>,student}.safetensors, "
                "<s>/trace.json\n",
                o.out_dir.c_str());
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  try {
    return tandem::run(argc, argv);
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "distill: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distill: %s\n", e.what());
    return 1;
  }
}
