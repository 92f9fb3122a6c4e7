// tools:train: trains a registry model on a dataset; see --help.
#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <string>

#include "models/registry.h"
#include "runtime/base/config.h"
#include "runtime/base/error.h"
#include "tools/flags/flags.h"
#include "tools/train/trainer.h"

namespace tandem {
namespace train {
namespace {

const char kProgram[] = "train";

TrainOptions parse(int argc, char** argv) {
  TrainOptions o;
  flags::Parser p(
      kProgram,
      "train [--model SPEC] [--dataset SPEC] [--epochs N] [--batch N] [--lr X] [--optimizer NAME]\n"
      "             [--schedule SPEC] [--device DEV] [--checkpoint PATH] [--resume PATH] [--seed N] [flags]",
      "Supervised training of a model of the registry; prints the parameter count and memory plan, "
      "progress\nwith images/s, and per epoch the loss and train/test accuracy.");
  p.text("--model", "SPEC", &o.model,
         "NAME[:key=value,...], NAME one of resnet18, resnet34, resnet50, mobilenet_v2,\n"
         "vgg16_bn; keys cifar, width, width_mult, classes, in_channels, dropout, separable,\n"
         "seed (default resnet18:cifar; classes and in_channels follow the dataset)");
  p.text("--dataset", "SPEC", &o.dataset,
         "an open_dataset spec: fashion-mnist (default), cifar10:DIR, folder:DIR, packed:PATH,\n"
         "synthetic[:n=N,classes=K,h=H,w=W,c=C,seed=S], ...");
  p.integer("--epochs", "N", &o.epochs, "epochs to train (default 1)", 1);
  p.integer("--stop-after", "N", &o.stop_after, "stop after N epochs of this run (continue later with --resume)", 1);
  p.integer("--batch", "N", &o.batch, "batch size (default 128)", 1);
  p.number("--lr", "X", &o.lr, "initial learning rate (default 0.1)", 0);
  p.text("--optimizer", "NAME", &o.optimizer, "sgd (momentum 0.9, Nesterov; default), adam, adamw");
  p.number("--momentum", "X", &o.momentum, "SGD momentum (default 0.9; 0 turns it off)", 0);
  p.number("--weight-decay", "X", &o.weight_decay, "weight decay (default 5e-4)", 0);
  p.number("--label-smoothing", "X", &o.label_smoothing, "cross-entropy label smoothing (default 0)", 0);
  p.text("--schedule", "SPEC", &o.schedule,
         "constant | step:EPOCHS[:GAMMA] | multistep:E1,E2[:GAMMA] | cosine[:MIN]\n"
         "| warmup:EPOCHS[:START]+<schedule> (default cosine, per step)");
  p.text("--transform", "SPEC", &o.transform, "training transform (data/transforms.h; default auto: by dataset)");
  p.text("--device", "DEV", &o.device, "cpu, cuda or cuda:N (default: the best device present)");
  p.text("--checkpoint", "PATH", &o.checkpoint, "save a safetensors checkpoint after every epoch");
  p.text("--resume", "PATH", &o.resume, "continue from a checkpoint (same model, dataset, batch and schedule)");
  p.integer("--seed", "N", &o.seed, "initialization, shuffling and augmentation seed (default 0)");
  p.integer("--workers", "N", &o.workers, "data loader threads (default 2)", 0);
  p.integer("--steps-per-epoch", "N", &o.steps_per_epoch, "at most N steps per epoch (default: the whole dataset)", 1);
  p.integer("--log-every", "N", &o.log_every, "progress line every N steps (default 50; 0: none)", 0);
  p.custom(
      "--precision", "P", [&o](const std::string& v) { o.precision = parse_precision(v); },
      "f32 (default) or bf16: convolutions and matrix products in bf16 with f32 accumulation,\n"
      "f32 master weights, loss and optimizer (rounding points: runtime/tensor/precision.h)");
  p.flag("--no-eval", &o.evaluate, false, "skip the test-set evaluation");
  p.integer("--profile-steps", "N", &o.profile_steps,
            "profile steps 2..N+1 of the first epoch (after the warm-up step) and print the time\n"
            "per op and per kernel (CUPTI on a GPU when libcupti loads, else host timers)",
            1);
  p.text("--profile-trace", "PATH", &o.profile_trace,
         "with --profile-steps, also write that profile as a Chrome trace (chrome://tracing,\n"
         "Perfetto) to PATH");
  p.flag("--cuda-graph", &o.cuda_graph, true,
         "on a GPU: run the first step eagerly, capture the second (forward, backward,\n"
         "optimizer) as a CUDA graph and replay it for every later step of the same batch shape");
  bool benchmark = false;
  p.flag("--cudnn-benchmark", &benchmark, true,
         "choose cuDNN convolution algorithms by timing them all (slower first steps,\n"
         "sometimes faster ones; TANDEM_CUDNN_BENCHMARK=1 does the same); default: cuDNN's\n"
         "heuristics. Either way the choices are kept in ~/.cache/tandem ($TANDEM_CACHE_DIR)");
  p.text("--eval-only", "PATH", &o.eval_only,
         "only evaluate these weights (a checkpoint of tools:train or tools:distill, or a\n"
         "torchvision-layout safetensors file) on the test split and print the accuracy");
  p.parse(argc, argv);
  if (benchmark) set_cudnn_benchmark(true);
  if (!o.profile_trace.empty() && o.profile_steps == 0) p.fail("--profile-trace needs --profile-steps");
  if (o.optimizer != "sgd" && o.optimizer != "adam" && o.optimizer != "adamw")
    p.fail("--optimizer must be sgd, adam or adamw, got '" + o.optimizer + "'");
  try {
    models::parse_model_spec(o.model);
  } catch (const Error& e) {
    p.fail("--model: " + e.message());
  }
  return o;
}

}  // namespace
}  // namespace train
}  // namespace tandem

int main(int argc, char** argv) {
  tandem::train::TrainOptions o = tandem::train::parse(argc, argv);
  o.live_progress = true;
  std::unique_ptr<tandem::train::Trainer> trainer;
  try {
    trainer = std::make_unique<tandem::train::Trainer>(o, std::cout);
  } catch (const tandem::ValueError& e) {
    tandem::flags::usage_error(e.message());  // a flag's value does not fit (spec, schedule, checkpoint)
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "train: %s\n", e.message().c_str());
    return 1;
  }
  try {
    if (!o.eval_only.empty()) {
      std::printf("test accuracy of %s: %.2f%%\n", o.eval_only.c_str(), 100 * trainer->test_accuracy());
      return 0;
    }
    trainer->run();
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "train: %s\n", e.message().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: %s\n", e.what());
    return 1;
  }
  return 0;
}
