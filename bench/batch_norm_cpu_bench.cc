// Batch norm + residual add + ReLU/ReLU6 on the CPU, forward and backward in training: the fused batch_norm_act
// against batch_norm, add and relu as separate ops, alternated repetition by repetition so that both meet the same
// load; prints each one's minimum and median milliseconds (the minimum resists other processes' noise).
#include <algorithm>
#include <chrono>
#include <cstdio>
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

// One forward and backward; returns its milliseconds.
double step(const Layer& l, bool fused, const std::vector<Tensor>& in) {
  Tensor x = in[0].clone().set_requires_grad(), w = in[1].clone().set_requires_grad();
  Tensor b = in[2].clone().set_requires_grad(), rm = in[3].clone(), rv = in[4].clone();
  Tensor r = l.residual ? in[5].clone().set_requires_grad() : Tensor();
  const auto t0 = std::chrono::steady_clock::now();
  Tensor y;
  if (fused) {
    y = batch_norm_act(x, w, b, rm, rv, r, l.act, true, 0.1, 1e-5);
  } else {
    y = batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
    if (l.residual) y = add(y, r);
    y = l.act == BnActivation::Relu6 ? relu6(y) : relu(y);
  }
  y.backward(in[6]);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(int64_t reps) {
  // ResNet's last batch norm of a block at 56x56 and 28x28 (batch 8), MobileNetV2's bn-relu6 at 16x16.
  const Layer layers[] = {{"bn+add+relu 8x64x56x56", {8, 64, 56, 56}, true, BnActivation::Relu},
                          {"bn+add+relu 8x128x28x28", {8, 128, 28, 28}, true, BnActivation::Relu},
                          {"bn+relu6 8x96x16x16", {8, 96, 16, 16}, false, BnActivation::Relu6}};
  std::printf("threads %d, %lld repetitions each\n%-26s %12s %12s %12s %12s %9s\n", intra_op_threads(),
              static_cast<long long>(reps), "layer (f32 NCHW)", "fused min", "fused med", "unfused min", "unfused med",
              "min f/u");
  Generator gen(20261128);
  for (const Layer& l : layers) {
    const int64_t c = l.shape[1];
    std::vector<Tensor> in{randn(l.shape, gen), randn({c}, gen),     randn({c}, gen),    zeros({c}),
                           ones({c}),           randn(l.shape, gen), randn(l.shape, gen)};
    std::vector<double> fused, unfused;
    for (int64_t i = 0; i < reps + 1; ++i) {
      const double f = step(l, true, in), u = step(l, false, in);
      if (i == 0) continue;  // warm-up
      fused.push_back(f);
      unfused.push_back(u);
    }
    const double fmin = *std::min_element(fused.begin(), fused.end());
    const double umin = *std::min_element(unfused.begin(), unfused.end());
    std::printf("%-26s %12.3f %12.3f %12.3f %12.3f %9.3f\n", l.name, fmin, median(fused), umin, median(unfused),
                fmin / umin);
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
