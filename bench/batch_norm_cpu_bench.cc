// Batch norm + residual add + ReLU/ReLU6 on the CPU, forward and backward in training: the fused batch_norm_act
// against batch_norm, add and relu as separate ops, alternated repetition by repetition so that both meet the same
// load; prints each one's minimum and median wall milliseconds and its minimum process CPU milliseconds (the
// minimum resists other processes' noise; CPU time, with one thread, their preemptions too).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "runtime/base/parallel_for.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace {

struct Layer {
  const char* name;
  Shape shape;
  bool residual;
  BnActivation act;
};

double cpu_ms() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

struct Times {
  double wall, cpu;  // milliseconds
};

// One forward and backward.
Times step(const Layer& l, bool fused, const std::vector<Tensor>& in) {
  Tensor x = in[0].clone().set_requires_grad(), w = in[1].clone().set_requires_grad();
  Tensor b = in[2].clone().set_requires_grad(), rm = in[3].clone(), rv = in[4].clone();
  Tensor r = l.residual ? in[5].clone().set_requires_grad() : Tensor();
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = cpu_ms();
  Tensor y;
  if (fused) {
    y = batch_norm_act(x, w, b, rm, rv, r, l.act, true, 0.1, 1e-5);
  } else {
    y = batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
    if (l.residual) y = add(y, r);
    y = l.act == BnActivation::Relu6 ? relu6(y) : relu(y);
  }
  y.backward(in[6]);
  return {std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(), cpu_ms() - c0};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double least(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

int run(int64_t reps) {
  // ResNet's last batch norm of a block at 56x56 and 28x28 (batch 8), MobileNetV2's bn-relu6 at 16x16.
  const Layer layers[] = {{"bn+add+relu 8x64x56x56", {8, 64, 56, 56}, true, BnActivation::Relu},
                          {"bn+add+relu 8x128x28x28", {8, 128, 28, 28}, true, BnActivation::Relu},
                          {"bn+relu6 8x96x16x16", {8, 96, 16, 16}, false, BnActivation::Relu6}};
  std::printf("threads %d, %lld repetitions each; milliseconds\n%-26s %10s %10s %10s %10s %8s %10s %10s %8s\n",
              intra_op_threads(), static_cast<long long>(reps), "layer (f32 NCHW)", "fused min", "fused med",
              "unf. min", "unf. med", "min f/u", "cpu fused", "cpu unf.", "cpu f/u");
  Generator gen(20261128);
  for (const Layer& l : layers) {
    const int64_t c = l.shape[1];
    std::vector<Tensor> in{randn(l.shape, gen), randn({c}, gen),     randn({c}, gen),    zeros({c}),
                           ones({c}),           randn(l.shape, gen), randn(l.shape, gen)};
    std::vector<double> fused, unfused, fused_cpu, unfused_cpu;
    for (int64_t i = 0; i < reps + 1; ++i) {
      const Times f = step(l, true, in), u = step(l, false, in);
      if (i == 0) continue;  // warm-up
      fused.push_back(f.wall);
      unfused.push_back(u.wall);
      fused_cpu.push_back(f.cpu);
      unfused_cpu.push_back(u.cpu);
    }
    std::printf("%-26s %10.3f %10.3f %10.3f %10.3f %8.3f %10.3f %10.3f %8.3f\n", l.name, least(fused), median(fused),
                least(unfused), median(unfused), least(fused) / least(unfused), least(fused_cpu), least(unfused_cpu),
                least(fused_cpu) / least(unfused_cpu));
  }
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  int64_t reps = 20;
  tandem::flags::Parser p("batch_norm_cpu_bench", "batch_norm_cpu_bench [--reps=N]",
                          "Milliseconds of batch norm + add + ReLU(6) forward and backward (training, f32 NCHW) on\n"
                          "the CPU: fused batch_norm_act against the separate ops. TANDEM_NUM_THREADS sets threads.");
  p.integer("--reps", "N", &reps, "timed repetitions of each (default 20)", 1);
  p.parse(argc, argv);
  return tandem::flags::run_reporting_errors("batch_norm_cpu_bench", [&] { return tandem::run(reps); });
}
