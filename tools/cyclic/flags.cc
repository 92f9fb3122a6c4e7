// tools:cyclic's flag parsing.
#include "tools/cyclic/flags.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>

namespace tandem {
namespace cyclic_tool {

const char kUsage[] =
    "usage: cyclic [flags]\n"
    "\n"
    "Trains a ResNet with Cyclic Data Parallelism (Fournier & Oyallon 2024) or plain DP on CPU threads or GPUs:\n"
    "N micro-batches per round through a model cut into S stages, under the DP, CDP-v1 or CDP-v2 update rule.\n"
    "Logs loss, accuracy and step time, activation-memory and communication curves, and writes a trace.\n"
    "\n"
    "model and data\n"
    "  --model SPEC           resnet18 or resnet50 with options (default resnet18:cifar,width=16):\n"
    "                         cifar (3x3 stem, no max-pool) or not (ImageNet stem), width=C (first-stage channels)\n"
    "  --dataset SPEC         any open_dataset spec (default fashion-mnist; cifar10:DIR, folder:DIR, synthetic...)\n"
    "  --train-transform SPEC, --test-transform SPEC\n"
    "                         data/transforms.h pipelines (default: cifar-train/cifar-eval for CIFAR,\n"
    "                         normalize:fashion-mnist for Fashion-MNIST, none otherwise)\n"
    "  --subset N             train on the first N samples only (default: all)\n"
    "  --test-subset N        evaluate on the first N test samples only (default: all)\n"
    "\n"
    "cyclic data parallelism\n"
    "  --rule R               dp, cdp-v1 (default) or cdp-v2\n"
    "  --micro-batches N      micro-batches per round, 1..64 (default 4)\n"
    "  --stages S             stages the model is cut into, 1..its units (default 4)\n"
    "  --mode M               dp-workers (default: N workers, one per micro-batch), mp (S workers, one per stage,\n"
    "                         shared by all micro-batches) or zero (N workers, model states sharded by stage)\n"
    "  --sync G               dp-workers' gradient averaging: auto (default: chain for CDP, all-reduce for DP),\n"
    "                         all-reduce or chain\n"
    "  --split LIST           stage starts as unit indices or names (e.g. conv1,layer2.0,layer3.0,layer4.0);\n"
    "                         default: balanced by FLOPs\n"
    "  --workers SPEC         cpu:K, cuda:I-J, cuda:I/P, best:K (default cpu:<workers the mode needs>)\n"
    "\n"
    "optimization (defaults: the paper's CIFAR-10 recipe)\n"
    "  --batch B              samples per micro-batch (default 64)\n"
    "  --lr X                 learning rate (default 0.05)\n"
    "  --momentum X           SGD momentum (default 0.9)\n"
    "  --weight-decay X       (default 5e-4)\n"
    "  --nesterov             Nesterov momentum\n"
    "  --lr-schedule SPEC     constant | step:EPOCHS[:GAMMA] | multistep:E1,E2[:GAMMA] | cosine[:MIN]\n"
    "                         | warmup:EPOCHS[:START]+<any> (default step:30:0.2)\n"
    "  --epochs E             epochs (fractions allowed; default 1)\n"
    "  --max-rounds K         stop after K rounds\n"
    "  --seed S               model initialization and data order (default 0)\n"
    "\n"
    "output\n"
    "  --out DIR              write log.csv, eval.csv, memory.csv, comm.csv, trace.json, summary.json there\n"
    "  --log-every K          rounds per timeline and log line (default 50)\n"
    "  --record-rounds K      rounds recorded for the memory/communication curves and the trace (the first\n"
    "                         timeline; default: --log-every)\n"
    "  --eval-every E         evaluate on the test split every E epochs (default 1; 0: only at the end)\n"
    "  --checkpoint PATH      safetensors checkpoint, written after every epoch and at the end\n"
    "  --resume PATH          continue from a checkpoint of the same configuration\n"
    "  --loader-threads K     data loading threads (default 2)\n"
    "\n"
    "  --simulate             write the unit-time timelines of DP and CDP (stage x time-step cells, stored\n"
    "                         activations, gradient traffic) for --micro-batches/--stages to --out, no training\n"
    "  --simulate-rounds K    rounds simulated (default 3)\n"
    "  --help                 this text\n"
    "\n"
    "Exit status: 0 on success, 2 for a bad flag or configuration (N or S out of range, S larger than the\n"
    "model's units, a mode the workers cannot host), 1 for other errors (e.g. unreadable data).\n";

void usage_error(const std::string& message) {
  std::fprintf(stderr, "cyclic: %s\n(run with --help for the flags)\n", message.c_str());
  std::exit(2);
}

namespace {
int64_t to_int(const std::string& flag, const std::string& v, int64_t lo) {
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < lo)
    usage_error(flag + " needs an integer >= " + std::to_string(lo) + ", got '" + v + "'");
  return x;
}
double to_double(const std::string& flag, const std::string& v, double lo) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= lo)) usage_error(flag + " needs a number >= " + std::to_string(lo) + ", got '" + v + "'");
  return x;
}
}  // namespace

Flags parse_flags(int argc, char** argv) {
  Flags f;
  using Setter = std::function<void(const std::string&, const std::string&)>;
  const std::map<std::string, Setter> with_value = {
      {"--model", [&](const std::string&, const std::string& v) { f.model = v; }},
      {"--dataset", [&](const std::string&, const std::string& v) { f.dataset = v; }},
      {"--train-transform", [&](const std::string&, const std::string& v) { f.train_transform = v; }},
      {"--test-transform", [&](const std::string&, const std::string& v) { f.test_transform = v; }},
      {"--subset", [&](const std::string& k, const std::string& v) { f.subset = to_int(k, v, 1); }},
      {"--test-subset", [&](const std::string& k, const std::string& v) { f.test_subset = to_int(k, v, 1); }},
      {"--rule", [&](const std::string&, const std::string& v) { f.rule = v; }},
      {"--mode", [&](const std::string&, const std::string& v) { f.mode = v; }},
      {"--sync", [&](const std::string&, const std::string& v) { f.sync = v; }},
      {"--micro-batches", [&](const std::string& k, const std::string& v) {
         f.micro_batches = static_cast<int>(to_int(k, v, -1000000));
       }},
      {"--stages", [&](const std::string& k, const std::string& v) {
         f.stages = static_cast<int>(to_int(k, v, -1000000));
       }},
      {"--split", [&](const std::string&, const std::string& v) { f.split = v; }},
      {"--workers", [&](const std::string&, const std::string& v) { f.workers = v; }},
      {"--batch", [&](const std::string& k, const std::string& v) { f.batch = to_int(k, v, 1); }},
      {"--lr", [&](const std::string& k, const std::string& v) { f.lr = to_double(k, v, 0); }},
      {"--momentum", [&](const std::string& k, const std::string& v) { f.momentum = to_double(k, v, 0); }},
      {"--weight-decay", [&](const std::string& k, const std::string& v) { f.weight_decay = to_double(k, v, 0); }},
      {"--lr-schedule", [&](const std::string&, const std::string& v) { f.lr_schedule = v; }},
      {"--epochs", [&](const std::string& k, const std::string& v) { f.epochs = to_double(k, v, 0); }},
      {"--max-rounds", [&](const std::string& k, const std::string& v) { f.max_rounds = to_int(k, v, 1); }},
      {"--log-every", [&](const std::string& k, const std::string& v) { f.log_every = to_int(k, v, 1); }},
      {"--record-rounds", [&](const std::string& k, const std::string& v) { f.record_rounds = to_int(k, v, 1); }},
      {"--eval-every", [&](const std::string& k, const std::string& v) { f.eval_every = to_double(k, v, 0); }},
      {"--seed", [&](const std::string& k, const std::string& v) { f.seed = static_cast<uint64_t>(to_int(k, v, 0)); }},
      {"--loader-threads", [&](const std::string& k, const std::string& v) {
         f.loader_threads = static_cast<int>(to_int(k, v, 0));
       }},
      {"--out", [&](const std::string&, const std::string& v) { f.out = v; }},
      {"--checkpoint", [&](const std::string&, const std::string& v) { f.checkpoint = v; }},
      {"--resume", [&](const std::string&, const std::string& v) { f.resume = v; }},
      {"--simulate-rounds", [&](const std::string& k, const std::string& v) { f.simulate_rounds = to_int(k, v, 1); }},
  };
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--nesterov") {
      f.nesterov = true;
      continue;
    }
    if (flag == "--simulate") {
      f.simulate = true;
      continue;
    }
    std::string value;
    size_t eq = flag.find('=');
    bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    auto it = with_value.find(flag);
    if (it == with_value.end()) usage_error("unknown flag " + flag);
    if (!inline_value) {
      if (i + 1 >= argc) usage_error(flag + " needs a value");
      value = argv[++i];
    }
    it->second(flag, value);
  }
  return f;
}

}  // namespace cyclic_tool
}  // namespace tandem
