// tools:distill: blockwise distillation of a teacher into a student with the five Pipe-BD strategies.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "parallel/bd/session.h"
#include "runtime/base/error.h"
#include "runtime/tensor/precision.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace {

using parallel::bd::SessionOptions;
using parallel::bd::SessionReport;

Precision g_precision = Precision::F32;  // --precision

const char kProgram[] = "distill";

// A size in bytes, or with a KiB/MiB/GiB suffix.
int64_t bytes(const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  const std::string unit = end ? end : "";
  const double scale = unit.empty() || unit == "B" ? 1
                       : unit == "KiB"             ? 1024.0
                       : unit == "MiB"             ? 1048576.0
                       : unit == "GiB"             ? 1073741824.0
                                                   : -1;
  TD_CHECK(!v.empty() && end != v.c_str() && scale > 0 && x > 0,
           "--memory-limit needs a positive size such as 512MiB or 2GiB, got '", v, "'");
  return static_cast<int64_t>(x * scale);
}

SessionOptions parse(int argc, char** argv) {
  SessionOptions o;
  o.workers = "best:4";
  o.live_progress = true;
  flags::Parser p(
      kProgram, "distill --teacher SPEC --dataset SPEC [options]",
      "Trains a student block by block against a frozen teacher (blockwise distillation): student block i learns\n"
      "to map the teacher's block i-1 output to its block i output (MSE; the last block: soft-target cross-entropy\n"
      "against the teacher's softmax). Runs any of five strategies on the same models, data and hyperparameters:\n"
      "  dp   DNA's baseline: blocks one after another, each data-parallel over all workers (gradient all-reduce)\n"
      "  ls   whole blocks per worker by bin packing on profiled costs, full batch each, no communication\n"
      "  tr   teacher relaying: one pipeline stage per worker, activations relayed, barrier before each update\n"
      "  dpu  tr with decoupled parameter updates (no barrier; a stage runs at most one step ahead)\n"
      "  ahd  dpu on the automatic hybrid plan: stages replicated over several workers split the batch by rows\n"
      "The blocks are profiled on the workers first; the planners use the profile (and --memory-limit).");
  p.group("model and data");
  p.text("--teacher", "SPEC", &o.workload.teacher,
         "registry spec, e.g. mobilenet_v2:cifar,classes=10 or resnet18:cifar,width=16");
  p.text("--teacher-weights", "F", &o.workload.teacher_weights,
         "the teacher's safetensors checkpoint (e.g. from tools:train); default: untrained");
  p.text("--student", "KIND", &o.workload.student,
         "supernet (MBConv supernet cells, a path sampled per step), separable (the teacher\n"
         "with depthwise-separable convolutions), or a registry spec with as many blocks\n"
         "(default supernet)");
  p.integer("--cells", "N", &o.workload.supernet_cells, "cells per supernet block (default 2)", 1);
  p.integer("--student-seed", "N", &o.workload.student_seed, "student initialization and path sampling (default 0)");
  p.text("--dataset", "SPEC", &o.dataset,
         "data::open_dataset spec (training split), e.g. fashion-mnist, cifar10:DIR,\n"
         "synthetic:n=2048,h=32,w=32,c=3");
  p.integer("--subset", "N", &o.subset, "use the first N training samples only", 1);
  p.text("--augment", "SPEC", &o.train.augment, "transform pipeline (default none), e.g. cifar-train");
  p.group("training (the same for every strategy; each block has its own optimizer and schedule)");
  p.integer("--batch", "N", &o.train.batch, "global batch (default 256)", 1);
  p.integer("--epochs", "N", &o.train.epochs, "epochs per block (default 1)", 1);
  p.integer("--stop-after", "N", &o.train.stop_after, "stop after N epochs of this run (continue later with --resume)",
            1);
  p.integer("--steps-per-epoch", "N", &o.train.steps_per_epoch, "at most N steps per epoch (default: every full batch)",
            1);
  p.text("--optimizer", "K", &o.train.optimizer.kind, "sgd, adam or adamw (default sgd)");
  p.number("--lr", "X", &o.train.optimizer.lr, "initial learning rate (default 0.025)", 0);
  p.number("--momentum", "X", &o.train.optimizer.momentum, "SGD momentum (default 0.9)", 0);
  p.flag("--no-nesterov", &o.train.optimizer.nesterov, false, "plain momentum instead of Nesterov's");
  p.custom(
      "--precision", "P", [](const std::string& v) { g_precision = parse_precision(v); },
      "f32 (default) or bf16 for every worker: teacher and student convolutions in bf16,\n"
      "relayed activations in bf16, f32 weights and optimizer (runtime/tensor/precision.h)");
  p.number("--weight-decay", "X", &o.train.optimizer.weight_decay, "(default 4e-5)", 0);
  p.text("--lr-schedule", "SPEC", &o.train.lr_schedule,
         "constant | step:E[:G] | multistep:E1,E2[:G] | cosine[:MIN] | warmup:E[:S]+<any>\n"
         "stepped once per optimizer step (default cosine)");
  p.custom(
      "--teacher-bn", "MODE", [&](const std::string& v) { o.train.teacher_bn = parallel::bd::parse_teacher_bn(v); },
      "eval (default: running statistics) or train (batch statistics, as Pipe-BD's code)");
  p.integer("--seed", "N", &o.train.data_seed, "data order and augmentation (default 0)");
  p.integer("--loader-threads", "N", &o.train.loader_threads, "data threads per loading worker (default 1)", 0);
  p.flag("--cuda-graph", &o.train.cuda_graph, true,
         "CUDA workers replay each teacher forward and student step from a CUDA graph\n"
         "captured per block, shape and supernet path (the first of each runs eagerly;\n"
         "messages, all-reduces and updates stay eager; the profile is of eager steps)");
  p.group("parallelism");
  p.custom(
      "--strategy", "S", [&](const std::string& v) { o.strategies = parallel::bd::parse_strategies(v); },
      "dp, ls, tr, dpu, ahd, a comma list, or all (default all)");
  p.text("--workers", "SPEC", &o.workers,
         "cpu:N, cuda:I, cuda:I-J, cuda:I/P (P SM partitions), best:N (default best:4)");
  p.text("--comm", "C", &o.comm,
         "auto (default: mpi/nccl under mpirun, else local), local, mpi, nccl, or\n"
         "local-ordered (local, pairing messages in issue order as NCCL does: a CPU check)");
  p.custom(
      "--memory-limit", "M", [&](const std::string& v) { o.memory_limit = bytes(v); },
      "per-worker memory for the planners, bytes or with KiB/MiB/GiB (default none;\n"
      "tandem plan model only)");
  p.custom(
      "--plan-model", "M", [&](const std::string& v) { o.plan_model = parallel::bd::parse_plan_model(v); },
      std::string("the AHD planner's cost model: tandem (the relay into a replicated stage split\n"
                  "over its replicas; memory limit honoured) or pipe-bd (the paper code's planner:\n"
                  "the full-batch relay charged to the receiving stage, its order among equal\n"
                  "plans, no memory limit); default ") +
          parallel::bd::plan_model_name(parallel::bd::kDefaultPlanModel));
  p.text("--plan", "FILE", &o.plan_path, "the AHD plan (JSON, as written to OUT/plan.json) instead of the planner's");
  p.text("--profile", "FILE", &o.profile_path, "a saved profile (OUT/profile.json) instead of profiling");
  p.integer("--profile-trials", "N", &o.profile.trials, "timed trials per measurement (default 5; the median counts)",
            1);
  p.group("output");
  p.text("--out", "DIR", &o.out_dir,
         "writes profile.json, plan.json, summary.json, and per strategy DIR/<s>/block<i>\n"
         ".safetensors (checkpoints, each epoch), student.safetensors (the stitched\n"
         "student; tools:train --model <its tandem.model> evaluates it) and trace.json");
  p.flag("--resume", &o.resume, true, "continue from the block checkpoints in DIR/<s>/");
  p.footer("Several processes: mpirun -np 4 distill --workers cpu:4 ... (or cuda:0-3: NCCL bootstrapped through MPI).");
  p.parse(argc, argv);
  if (o.train.cuda_graph && o.workers.rfind("cpu", 0) == 0)
    p.fail("--cuda-graph needs CUDA workers (--workers cuda:..., or best:N on a machine with a GPU)");
  if (o.workload.teacher.empty()) p.fail("--teacher is required");
  if (o.dataset.empty()) p.fail("--dataset is required");
  if (o.resume && o.out_dir.empty()) p.fail("--resume needs --out DIR (where the checkpoints are)");
  if (o.memory_limit > 0 && o.plan_model != parallel::bd::PlanModel::Tandem)
    p.fail("--memory-limit needs --plan-model tandem (the pipe-bd model, the paper's planner, has none)");
  const std::string& opt = o.train.optimizer.kind;
  if (opt != "sgd" && opt != "adam" && opt != "adamw") p.fail("--optimizer must be sgd, adam or adamw");
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
  PrecisionGuard policy(g_precision);
  if (g_precision != Precision::F32) std::printf("precision: %s\n", precision_name(g_precision));
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
    std::printf(
        "wrote %s/{profile,plan,summary}.json and per strategy <s>/{block<i>,student}.safetensors, "
        "<s>/trace.json\n",
        o.out_dir.c_str());
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  return tandem::flags::run_reporting_errors("distill", [&] { return tandem::run(argc, argv); });
}
