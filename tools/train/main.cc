// tools:train: trains a registry model on a dataset; see --help.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <string>

#include "models/registry.h"
#include "runtime/error.h"
#include "tools/train/trainer.h"

namespace tandem {
namespace train {
namespace {

const char kUsage[] =
    "usage: train [--model SPEC] [--dataset SPEC] [--epochs N] [--batch N] [--lr X] [--optimizer NAME]\n"
    "             [--schedule SPEC] [--device DEV] [--checkpoint PATH] [--resume PATH] [--seed N] [flags]\n"
    "\n"
    "Supervised training of a model of the registry; prints the parameter count and memory plan, progress\n"
    "with images/s, and per epoch the loss and train/test accuracy.\n"
    "\n"
    "  --model SPEC        NAME[:key=value,...], NAME one of resnet18, resnet34, resnet50, mobilenet_v2,\n"
    "                      vgg16_bn; keys cifar, width, width_mult, classes, in_channels, dropout, separable,\n"
    "                      seed (default resnet18:cifar; classes and in_channels follow the dataset)\n"
    "  --dataset SPEC      an open_dataset spec: fashion-mnist (default), cifar10:DIR, folder:DIR, packed:PATH,\n"
    "                      synthetic[:n=N,classes=K,h=H,w=W,c=C,seed=S], ...\n"
    "  --epochs N          epochs to train (default 1)\n"
    "  --stop-after N      stop after N epochs of this run (continue later with --resume)\n"
    "  --batch N           batch size (default 128)\n"
    "  --lr X              initial learning rate (default 0.1)\n"
    "  --optimizer NAME    sgd (momentum 0.9, Nesterov; default), adam, adamw\n"
    "  --momentum X        SGD momentum (default 0.9; 0 turns it off)\n"
    "  --weight-decay X    weight decay (default 5e-4)\n"
    "  --label-smoothing X cross-entropy label smoothing (default 0)\n"
    "  --schedule SPEC     constant | step:EPOCHS[:GAMMA] | multistep:E1,E2[:GAMMA] | cosine[:MIN]\n"
    "                      | warmup:EPOCHS[:START]+<schedule> (default cosine, per step)\n"
    "  --transform SPEC    training transform (data/transforms.h; default auto: by dataset)\n"
    "  --device DEV        cpu, cuda or cuda:N (default: the best device present)\n"
    "  --checkpoint PATH   save a safetensors checkpoint after every epoch\n"
    "  --resume PATH       continue from a checkpoint (same model, dataset, batch and schedule)\n"
    "  --seed N            initialization, shuffling and augmentation seed (default 0)\n"
    "  --workers N         data loader threads (default 2)\n"
    "  --steps-per-epoch N at most N steps per epoch (default: the whole dataset)\n"
    "  --log-every N       progress line every N steps (default 50; 0: none)\n"
    "  --no-eval           skip the test-set evaluation\n"
    "  --eval-only PATH    only evaluate these weights (a checkpoint of tools:train or tools:distill, or a\n"
    "                      torchvision-layout safetensors file) on the test split and print the accuracy\n"
    "  --help              this text\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "train: %s\n\n%s", message.c_str(), kUsage);
  std::exit(2);
}

int64_t integer(const std::string& flag, const std::string& v, int64_t min) {
  char* end = nullptr;
  long long i = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || i < min)
    usage_error(flag + " needs an integer >= " + std::to_string(min) + ", got '" + v + "'");
  return i;
}

double number(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(d >= 0)) usage_error(flag + " needs a non-negative number, got '" + v + "'");
  return d;
}

TrainOptions parse(int argc, char** argv) {
  TrainOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--no-eval") {
      o.evaluate = false;
      continue;
    }
    if (flag.rfind("--", 0) != 0) usage_error("unexpected argument '" + flag + "'");
    if (i + 1 >= argc) usage_error(flag + " needs a value");
    std::string v = argv[++i];
    if (flag == "--model") o.model = v;
    else if (flag == "--dataset") o.dataset = v;
    else if (flag == "--epochs") o.epochs = integer(flag, v, 1);
    else if (flag == "--stop-after") o.stop_after = integer(flag, v, 1);
    else if (flag == "--batch") o.batch = integer(flag, v, 1);
    else if (flag == "--lr") o.lr = number(flag, v);
    else if (flag == "--optimizer") o.optimizer = v;
    else if (flag == "--momentum") o.momentum = number(flag, v);
    else if (flag == "--weight-decay") o.weight_decay = number(flag, v);
    else if (flag == "--label-smoothing") o.label_smoothing = number(flag, v);
    else if (flag == "--schedule") o.schedule = v;
    else if (flag == "--transform") o.transform = v;
    else if (flag == "--device") o.device = v;
    else if (flag == "--checkpoint") o.checkpoint = v;
    else if (flag == "--resume") o.resume = v;
    else if (flag == "--eval-only") o.eval_only = v;
    else if (flag == "--seed") o.seed = static_cast<uint64_t>(integer(flag, v, 0));
    else if (flag == "--workers") o.workers = static_cast<int>(integer(flag, v, 0));
    else if (flag == "--steps-per-epoch") o.steps_per_epoch = integer(flag, v, 1);
    else if (flag == "--log-every") o.log_every = integer(flag, v, 0);
    else usage_error("unknown flag '" + flag + "'");
  }
  if (o.optimizer != "sgd" && o.optimizer != "adam" && o.optimizer != "adamw")
    usage_error("--optimizer must be sgd, adam or adamw, got '" + o.optimizer + "'");
  try {
    models::parse_model_spec(o.model);
  } catch (const Error& e) {
    usage_error("--model: " + e.message());
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
    tandem::train::usage_error(e.message());  // a flag's value does not fit (spec, schedule, checkpoint)
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
