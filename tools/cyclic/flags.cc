// tools:cyclic's flags and their help text.
#include "tools/cyclic/flags.h"

#include "parallel/executor.h"
#include "tools/costmodel/gpu.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace cyclic_tool {

Flags parse_flags(int argc, char** argv) {
  Flags f;
  flags::Parser p(
      "cyclic", "cyclic [flags]",
      "Trains a ResNet with Cyclic Data Parallelism (Fournier & Oyallon 2024) or plain DP on CPU threads or GPUs:\n"
      "N micro-batches per round through a model cut into S stages, under the DP, CDP-v1 or CDP-v2 update rule.\n"
      "Logs loss, accuracy and step time, activation-memory and communication curves, and writes a trace.");
  p.group("model and data");
  p.text("--model", "SPEC", &f.model,
         "resnet18 or resnet50 with options (default resnet18:cifar,width=16):\n"
         "cifar (3x3 stem, no max-pool) or not (ImageNet stem), width=C (first-stage channels)");
  p.text("--dataset", "SPEC", &f.dataset,
         "any open_dataset spec (default fashion-mnist; cifar10:DIR, folder:DIR, synthetic...)");
  p.text("--train-transform", "SPEC", &f.train_transform,
         "data/transforms.h pipeline (default: cifar-train for CIFAR,\n"
         "normalize:fashion-mnist for Fashion-MNIST, none otherwise)");
  p.text("--test-transform", "SPEC", &f.test_transform,
         "data/transforms.h pipeline (default: cifar-eval for CIFAR,\n"
         "normalize:fashion-mnist for Fashion-MNIST, none otherwise)");
  p.integer("--subset", "N", &f.subset, "train on the first N samples only (default: all)", 1);
  p.integer("--test-subset", "N", &f.test_subset, "evaluate on the first N test samples only (default: all)", 1);
  p.group("cyclic data parallelism");
  p.text("--rule", "R", &f.rule, "dp, cdp-v1 (default) or cdp-v2");
  // N and S: any integer here; the trainer names their ranges.
  p.integer("--micro-batches", "N", &f.micro_batches, "micro-batches per round, 1..64 (default 4)");
  p.integer("--stages", "S", &f.stages, "stages the model is cut into, 1..its units (default 4)");
  p.text("--mode", "M", &f.mode,
         "dp-workers (default: N workers, one per micro-batch), mp (S workers, one per stage,\n"
         "shared by all micro-batches) or zero (N workers, model states sharded by stage)");
  p.text("--sync", "G", &f.sync,
         "dp-workers' gradient averaging: auto (default: chain for CDP, all-reduce for DP),\n"
         "all-reduce or chain");
  p.text("--split", "LIST", &f.split,
         "stage starts as unit indices or names (e.g. conv1,layer2.0,layer3.0,layer4.0);\n"
         "default: balanced by FLOPs");
  p.text("--workers", "SPEC", &f.workers, "cpu:K, cuda:I-J, cuda:I/P, best:K (default cpu:<workers the mode needs>)");
  p.group("optimization (defaults: the paper's CIFAR-10 recipe)");
  p.integer("--batch", "B", &f.batch, "samples per micro-batch (default 64)", 1);
  p.number("--lr", "X", &f.lr, "learning rate (default 0.05)", 0);
  p.number("--momentum", "X", &f.momentum, "SGD momentum (default 0.9)", 0);
  p.number("--weight-decay", "X", &f.weight_decay, "(default 5e-4)", 0);
  p.flag("--nesterov", &f.nesterov, true, "Nesterov momentum");
  p.custom(
      "--precision", "P", [&](const std::string& v) { f.precision = parse_precision(v); },
      "f32 (default) or bf16 for every worker: convolutions and matrix products in bf16,\n"
      "activations and activation gradients between stages in bf16, f32 weights, weight\n"
      "gradients and optimizer (runtime/tensor/precision.h)");
  p.text("--lr-schedule", "SPEC", &f.lr_schedule,
         "constant | step:EPOCHS[:GAMMA] | multistep:E1,E2[:GAMMA] | cosine[:MIN]\n"
         "| warmup:EPOCHS[:START]+<any> (default step:30:0.2)");
  p.number("--epochs", "E", &f.epochs, "epochs (fractions allowed; default 1)", 0);
  p.integer("--max-rounds", "K", &f.max_rounds, "stop after K rounds", 1);
  p.integer("--seed", "S", &f.seed, "model initialization and data order (default 0)");
  p.group("output");
  p.text("--out", "DIR", &f.out, "write log.csv, eval.csv, memory.csv, comm.csv, trace.json, summary.json there");
  p.integer("--log-every", "K", &f.log_every, "rounds per timeline and log line (default 50)", 1);
  p.integer("--record-rounds", "K", &f.record_rounds,
            "rounds recorded for the memory/communication curves and the trace (the first\n"
            "timeline; default: --log-every)",
            1);
  p.number("--eval-every", "E", &f.eval_every,
           "evaluate on the test split every E epochs (default 1; 0: only at the end)", 0);
  p.text("--checkpoint", "PATH", &f.checkpoint, "safetensors checkpoint, written after every epoch and at the end");
  p.text("--resume", "PATH", &f.resume, "continue from a checkpoint of the same configuration");
  p.integer("--loader-threads", "K", &f.loader_threads, "data loading threads (default 2)", 0);
  p.group("simulation");
  p.flag("--simulate", &f.simulate, true,
         "write the unit-time timelines of DP and CDP (stage x time-step cells, stored\n"
         "activations, gradient traffic) for --micro-batches/--stages to --out, no training");
  p.integer("--simulate-rounds", "K", &f.simulate_rounds, "rounds simulated (default 3)", 1);
  p.custom(
      "--gpu", "NAME", [&](const std::string& v) { f.gpu = costmodel::gpu_spec(v).name; },
      "with --simulate: project DP, CDP-v1 and CDP-v2 (dp-workers and mp modes) on modelled\n"
      "h100 or h200 GPUs joined by NVLink, with stage costs from the cost model (tools/costmodel;\n"
      "needs the simulated GPU) for --model, --batch, --micro-batches and --stages, and print step\n"
      "times, activation memory and GPUs beside the paper's unit-time figures (--out optional)");
  p.integer("--input", "S", &f.input, "with --gpu: input size (default 32 for CIFAR models, 224 otherwise)", 8);
  p.footer(
      "Exit status: 0 on success, 2 for a bad flag or configuration (N or S out of range, S larger than the\n"
      "model's units, a mode the workers cannot host), 1 for other errors (e.g. unreadable data).");
  bool cuda_graph = false;
  p.flag("--cuda-graph", &cuda_graph, true, "refused, with the reason: the schedules are not captured (README)");
  p.parse(argc, argv);
  if (f.precision != Precision::F32 && f.simulate && !f.gpu.empty())
    p.fail("--precision bf16 with --simulate --gpu: the cost model predicts f32 stages only");
  if (cuda_graph) p.fail(std::string("--cuda-graph: ") + parallel::kScheduleCaptureLimits);
  return f;
}

}  // namespace cyclic_tool
}  // namespace tandem
