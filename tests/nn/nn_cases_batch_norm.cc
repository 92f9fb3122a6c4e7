// batch_norm cases against an f64 reference: training (batch statistics, and the running statistics' update
// with the unbiased variance) and evaluation (running statistics), affine or not, 4-D NCHW and channels-last
// and 2-D.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "runtime/nn/nn_ops.h"
#include "tests/nn/nn_cases.h"

namespace tandem {
namespace testing {

namespace {

struct Stats {
  std::vector<double> mean, var;  // biased variance
};

// Row-major x [n, c, hw...] as (sample, channel, position).
int64_t positions(const HostTensor& x) { return x.numel() / (x.shape[0] * x.shape[1]); }

Stats batch_stats(const HostTensor& x) {
  const int64_t n = x.shape[0], c = x.shape[1], hw = positions(x);
  Stats s{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  const double m = static_cast<double>(n * hw);
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < hw; ++p) s.mean[ch] += x.v[(i * c + ch) * hw + p];
    s.mean[ch] /= m;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < hw; ++p) {
        const double d = x.v[(i * c + ch) * hw + p] - s.mean[ch];
        s.var[ch] += d * d;
      }
    s.var[ch] /= m;
  }
  return s;
}

// (x - mean) / sqrt(var + eps) * w + b.
HostTensor normalize(const HostTensor& x, const Stats& s, const HostTensor* w, const HostTensor* b, double eps) {
  const int64_t n = x.shape[0], c = x.shape[1], hw = positions(x);
  HostTensor y(x.shape);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p) {
        const int64_t k = (i * c + ch) * hw + p;
        y.v[k] = (x.v[k] - s.mean[ch]) / std::sqrt(s.var[ch] + eps) * (w ? w->v[ch] : 1.0) + (b ? b->v[ch] : 0.0);
      }
  return y;
}

struct BnShape {
  const char* name;
  Shape shape;
  bool channels_last;
};

const double kMomentum = 0.3, kTrainEps = 1e-5, kEvalEps = 1e-3;

// Values of mean 0.5 and standard deviation 2 (statistics away from the standard normal's).
Sampler shifted_normal() {
  Sampler normal = normal_values(2.0);
  return [normal](Generator& gen, int64_t n, const std::vector<HostTensor>& earlier) {
    std::vector<double> v = normal(gen, n, earlier);
    for (double& x : v) x += 0.5;
    return v;
  };
}

// Inputs: x, then (affine) weight and bias, then (with_stats) running mean and running variance.
std::vector<InputSpec> bn_inputs(const BnShape& k, bool affine, bool with_stats) {
  const int64_t c = k.shape[1];
  InputSpec x = float_in(k.shape, shifted_normal());
  std::vector<InputSpec> in = {k.channels_last ? in_channels_last(x) : x};
  if (affine) {
    in.push_back(float_in({c}));
    in.push_back(float_in({c}));
  }
  if (with_stats) {
    in.push_back(float_in({c}, normal_values(), false));
    in.push_back(float_in({c}, uniform_values(0.5, 1.5), false));
  }
  return in;
}

// batch_norm on the case's inputs; the running statistics are copies (batch_norm updates them in place), returned
// after the output.
TV run_bn(const TV& in, const BnShape& k, bool affine, bool with_stats, bool training) {
  const size_t s = affine ? 3 : 1;
  Tensor rm = with_stats ? in[s].clone() : Tensor(), rv = with_stats ? in[s + 1].clone() : Tensor();
  EXPECT_EQ(is_channels_last(in[0]), k.channels_last);
  Tensor y = batch_norm(in[0], affine ? in[1] : Tensor(), affine ? in[2] : Tensor(), rm, rv, training, kMomentum,
                        training ? kTrainEps : kEvalEps);
  EXPECT_EQ(is_channels_last(y), k.channels_last) << "batch_norm's output keeps the input's memory format";
  if (!training) {
    expect_bitwise_equal(rm, in[s], "running mean in evaluation");
    expect_bitwise_equal(rv, in[s + 1], "running variance in evaluation");
    return TV{y};
  }
  return with_stats ? TV{y, rm, rv} : TV{y};
}
// Per element of x: the statistics in training (an add for the mean; a subtract, multiply and add for the
// variance), the normalization (a subtract and a multiply) and the affine transform (a multiply and an add).
FlopsFn bn_flops(bool training, bool affine) {
  const double per_element = (training ? 4.0 : 0.0) + 2.0 + (affine ? 2.0 : 0.0);
  return [per_element](const std::vector<Shape>& in, const std::vector<Shape>&) {
    return per_element * shape_elements(in.at(0));
  };
}
// ResNet's last batch norm of a block (and MobileNet's with ReLU6), fused: act(batch_norm(x) + residual) in
// training, affine. The residual is drawn so that each pre-activation lies at least 0.1 from the activation's
// kinks (0, and 6 for ReLU6): the finite differences and the f32 run then see the same side of each.
Sampler residual_away_from_kinks(BnActivation act) {
  const Sampler target = act == BnActivation::Relu6 ? avoiding({0.0, 6.0}, -2.0, 8.0) : avoiding({0.0}, -2.0, 2.0);
  return [target](Generator& gen, int64_t n, const std::vector<HostTensor>& earlier) {
    const HostTensor& x = earlier.at(0);
    const HostTensor bn = normalize(x, batch_stats(x), &earlier.at(1), &earlier.at(2), kTrainEps);
    std::vector<double> v = target(gen, n, earlier);
    for (int64_t i = 0; i < n; ++i) v[i] -= bn.v[i];
    return v;
  };
}

void add_batch_norm_act(std::vector<OpCase>& cs) {
  const BnShape nchw{"4d", {3, 4, 5, 6}, false}, nhwc{"4d_channels_last", {3, 4, 5, 6}, true};
  for (const auto& [k, act] : {std::pair<BnShape, BnActivation>{nchw, BnActivation::Relu},
                               {nhwc, BnActivation::Relu},
                               {nchw, BnActivation::Relu6}}) {
    std::vector<InputSpec> in = bn_inputs(k, true, false);
    const InputSpec r = float_in(k.shape, residual_away_from_kinks(act));
    in.push_back(k.channels_last ? in_channels_last(r) : r);
    const double top = act == BnActivation::Relu6 ? 6.0 : std::numeric_limits<double>::infinity();
    cs.push_back(make_case(
        std::string("batch_norm_add_") + (act == BnActivation::Relu6 ? "relu6_" : "relu_") + k.name, in,
        [k = k, act = act](const TV& t, DType) {
          EXPECT_EQ(is_channels_last(t[0]) && is_channels_last(t[3]), k.channels_last);
          return TV{batch_norm_act(t[0], t[1], t[2], Tensor(), Tensor(), t[3], act, true, kMomentum, kTrainEps)};
        },
        [top](const HV& t) {
          HostTensor y = normalize(t[0], batch_stats(t[0]), &t[1], &t[2], kTrainEps);
          for (size_t i = 0; i < y.v.size(); ++i) y.v[i] = std::min(std::max(y.v[i] + t[3].v[i], 0.0), top);
          return HV{y};
        }));
    // Batch norm's, then the residual's add and the activation's compare (ReLU6: two).
    const double extra = act == BnActivation::Relu6 ? 3.0 : 2.0;
    const FlopsFn bn = bn_flops(true, true);
    cs.back().flops = [bn, extra](const std::vector<Shape>& i, const std::vector<Shape>& o) {
      return bn(i, o) + extra * shape_elements(i.at(0));
    };
    cs.back().batch_inputs = {0, 3};
  }
}
}  // namespace

std::vector<OpCase> batch_norm_cases() {
  const std::vector<BnShape> shapes = {
      {"4d", {3, 4, 5, 6}, false}, {"4d_channels_last", {3, 4, 5, 6}, true}, {"2d", {9, 5}, false}};
  std::vector<OpCase> cs;
  for (const BnShape& k : shapes)
    for (bool affine : {true, false}) {
      const std::string suffix = std::string(k.name) + (affine ? "_affine" : "");
      // Training with running statistics: the output and the statistics' update (not differentiable: the
      // statistics change in place without autograd).
      cs.push_back(make_case(
          "batch_norm_train_stats_" + suffix, bn_inputs(k, affine, true),
          [k, affine](const TV& in, DType) { return run_bn(in, k, affine, true, true); },
          [affine](const HV& in) {
            const size_t s = affine ? 3 : 1;
            const Stats st = batch_stats(in[0]);
            const double m = static_cast<double>(in[0].numel() / in[0].shape[1]);
            HostTensor rm = in[s], rv = in[s + 1];
            for (size_t ch = 0; ch < rm.v.size(); ++ch) {
              rm.v[ch] = (1 - kMomentum) * rm.v[ch] + kMomentum * st.mean[ch];
              rv.v[ch] = (1 - kMomentum) * rv.v[ch] + kMomentum * st.var[ch] * m / (m - 1);
            }
            return HV{normalize(in[0], st, affine ? &in[1] : nullptr, affine ? &in[2] : nullptr, kTrainEps), rm, rv};
          },
          false));
      cs.back().flops = bn_flops(true, affine);
      cs.back().batch_inputs = {0};
      // Training without running statistics: every evaluation is the same function, for the gradients.
      cs.push_back(make_case(
          "batch_norm_train_" + suffix, bn_inputs(k, affine, false),
          [k, affine](const TV& in, DType) { return run_bn(in, k, affine, false, true); },
          [affine](const HV& in) {
            return HV{
                normalize(in[0], batch_stats(in[0]), affine ? &in[1] : nullptr, affine ? &in[2] : nullptr, kTrainEps)};
          }));
      cs.back().flops = bn_flops(true, affine);
      cs.back().batch_inputs = {0};
      // Evaluation: normalized by the running statistics, which stay as they were.
      cs.push_back(make_case(
          "batch_norm_eval_" + suffix, bn_inputs(k, affine, true),
          [k, affine](const TV& in, DType) { return run_bn(in, k, affine, true, false); },
          [affine](const HV& in) {
            const size_t s = affine ? 3 : 1;
            return HV{normalize(in[0], Stats{in[s].v, in[s + 1].v}, affine ? &in[1] : nullptr,
                                affine ? &in[2] : nullptr, kEvalEps)};
          }));
      cs.back().flops = bn_flops(false, affine);
      cs.back().batch_inputs = {0};
    }
  add_batch_norm_act(cs);
  return cs;
}

}  // namespace testing
}  // namespace tandem
