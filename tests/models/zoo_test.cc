// The model zoo: torchvision's key names and shapes (a torchvision-layout file loads unchanged), parameter
// counts, shapes against the forward, initialization, the registry, and gradients of the zoo's blocks.
#include <gtest/gtest.h>

#include <cmath>

#include "models/checkpoint.h"
#include "models/init.h"
#include "models/registry.h"
#include "models/zoo/mobilenet_v2.h"
#include "models/zoo/resnet.h"
#include "models/zoo/supernet.h"
#include "runtime/base/error.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "tests/harness/module_gradients.h"
#include "tests/testing.h"

namespace tandem {
namespace models {
namespace {

using tandem::testing::expect_module_gradients;
using tandem::testing::fresh_seed;

using Layout = std::vector<std::pair<std::string, Shape>>;

void add_bn(Layout& l, const std::string& p, int64_t c) {
  for (const char* n : {"weight", "bias", "running_mean", "running_var"}) l.push_back({p + "." + n, {c}});
  l.push_back({p + ".num_batches_tracked", {}});
}

// torchvision's ResNet state_dict layout, written out from its architecture (width 64 is torchvision's).
Layout torchvision_resnet(int depth, int64_t classes, int64_t width = 64) {
  bool bottleneck = depth == 50;
  std::vector<int> counts = depth == 18 ? std::vector<int>{2, 2, 2, 2} : std::vector<int>{3, 4, 6, 3};
  int64_t expansion = bottleneck ? 4 : 1, inplanes = width;
  Layout l = {{"conv1.weight", {width, 3, 7, 7}}};
  add_bn(l, "bn1", width);
  for (int s = 0; s < 4; ++s) {
    int64_t planes = width << s;
    for (int b = 0; b < counts[s]; ++b) {
      std::string p = "layer" + std::to_string(s + 1) + "." + std::to_string(b) + ".";
      int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      if (bottleneck) {
        l.push_back({p + "conv1.weight", {planes, inplanes, 1, 1}});
        add_bn(l, p + "bn1", planes);
        l.push_back({p + "conv2.weight", {planes, planes, 3, 3}});
        add_bn(l, p + "bn2", planes);
        l.push_back({p + "conv3.weight", {planes * 4, planes, 1, 1}});
        add_bn(l, p + "bn3", planes * 4);
      } else {
        l.push_back({p + "conv1.weight", {planes, inplanes, 3, 3}});
        add_bn(l, p + "bn1", planes);
        l.push_back({p + "conv2.weight", {planes, planes, 3, 3}});
        add_bn(l, p + "bn2", planes);
      }
      if (b == 0 && (stride != 1 || inplanes != planes * expansion)) {
        l.push_back({p + "downsample.0.weight", {planes * expansion, inplanes, 1, 1}});
        add_bn(l, p + "downsample.1", planes * expansion);
      }
      inplanes = planes * expansion;
    }
  }
  l.push_back({"fc.weight", {classes, 8 * width * expansion}});
  l.push_back({"fc.bias", {classes}});
  return l;
}

// torchvision's MobileNetV2 (width 1.0) state_dict layout.
Layout torchvision_mobilenet_v2(int64_t classes) {
  const int64_t settings[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                  {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  Layout l = {{"features.0.0.weight", {32, 3, 3, 3}}};
  add_bn(l, "features.0.1", 32);
  int64_t in = 32, idx = 1;
  for (const auto& s : settings)
    for (int64_t i = 0; i < s[2]; ++i, ++idx) {
      std::string p = "features." + std::to_string(idx) + ".conv.";
      int64_t hidden = in * s[0], out = s[1];
      int j = 0;
      if (s[0] != 1) {
        l.push_back({p + "0.0.weight", {hidden, in, 1, 1}});
        add_bn(l, p + "0.1", hidden);
        j = 1;
      }
      l.push_back({p + std::to_string(j) + ".0.weight", {hidden, 1, 3, 3}});
      add_bn(l, p + std::to_string(j) + ".1", hidden);
      l.push_back({p + std::to_string(j + 1) + ".weight", {out, hidden, 1, 1}});
      add_bn(l, p + std::to_string(j + 2), out);
      in = out;
    }
  l.push_back({"features.18.0.weight", {1280, 320, 1, 1}});
  add_bn(l, "features.18.1", 1280);
  l.push_back({"classifier.1.weight", {classes, 1280}});
  l.push_back({"classifier.1.bias", {classes}});
  return l;
}

void expect_layout(const Module& m, const Layout& expected, const std::string& what) {
  NamedTensors sd = m.state_dict();
  ASSERT_EQ(sd.size(), expected.size()) << what;
  for (size_t i = 0; i < sd.size(); ++i) {
    EXPECT_EQ(sd[i].first, expected[i].first) << what << " key " << i;
    EXPECT_EQ(sd[i].second.shape(), expected[i].second) << what << " " << expected[i].first;
  }
}

// Writes random tensors under torchvision's names, as PyTorch's safetensors.torch.save_file would.
std::string write_torchvision_file(const Layout& layout, const std::string& name, Generator& gen) {
  NamedTensors tensors;
  for (const auto& kv : layout) {
    bool counter = kv.first.find("num_batches_tracked") != std::string::npos;
    tensors.emplace_back(kv.first, counter ? full({}, 17.0, DType::I64) : randn(kv.second, gen));
  }
  std::string path = ::testing::TempDir() + name;
  save_safetensors(path, tensors, {{"format", "pt"}});
  return path;
}

void expect_loads(const std::string& path, Module& model) {
  load_weights(path, model);
  SafetensorsContents c = load_safetensors(path);
  NamedTensors sd = model.state_dict();
  for (const auto& kv : sd) {
    const Tensor* t = c.find(kv.first);
    ASSERT_NE(t, nullptr) << kv.first;
    tandem::testing::expect_bitwise_equal(kv.second, *t, kv.first);
  }
}

TEST(Zoo, ResNetsHaveTorchvisionLayoutAndCounts) {
  ModelOptions o;
  auto r18 = make_model("resnet18", o);
  expect_layout(*r18, torchvision_resnet(18, 1000), "resnet18");
  EXPECT_EQ(r18->num_parameters(), 11689512);
  Generator gen(fresh_seed());
  expect_loads(write_torchvision_file(torchvision_resnet(18, 1000), "tv_resnet18.safetensors", gen), *r18);
  auto r50 = make_model("resnet50", o);
  expect_layout(*r50, torchvision_resnet(50, 1000), "resnet50");
  EXPECT_EQ(r50->num_parameters(), 25557032);
  ModelOptions narrow;
  narrow.width = 8;
  expect_layout(*make_model("resnet34", narrow), torchvision_resnet(34, 1000, 8), "resnet34 width 8");
}

TEST(Zoo, MobileNetV2HasTorchvisionLayoutAndCount) {
  auto m = make_model("mobilenet_v2");
  expect_layout(*m, torchvision_mobilenet_v2(1000), "mobilenet_v2");
  EXPECT_EQ(m->num_parameters(), 3504872);
  Generator gen(fresh_seed());
  expect_loads(write_torchvision_file(torchvision_mobilenet_v2(1000), "tv_mnv2.safetensors", gen), *m);
  // The CIFAR variant keeps the names and shapes (only strides change).
  ModelOptions c;
  c.cifar = true;
  c.num_classes = 10;
  expect_layout(*make_model("mobilenet_v2", c), torchvision_mobilenet_v2(10), "mobilenet_v2 cifar");
}

TEST(Zoo, TorchvisionFileForAnotherModelIsRefused) {
  Generator gen(fresh_seed());
  std::string path = write_torchvision_file(torchvision_resnet(18, 1000, 8), "tv_resnet18_w8.safetensors", gen);
  ModelOptions ten;
  ten.num_classes = 10;
  ten.width = 8;
  auto r = make_model("resnet18", ten);
  try {
    load_weights(path, *r);
    ADD_FAILURE();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("key 'fc.weight' has shape [1000, 64]"), std::string::npos) << e.what();
  }
  auto m = make_model("mobilenet_v2", ten);
  try {
    load_weights(path, *m);
    ADD_FAILURE();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("missing keys 'features.0.0.weight'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unexpected keys"), std::string::npos) << e.what();
  }
}

struct TinyCase {
  std::string spec;
  Shape input;
};

const TinyCase kTiny[] = {
    {"resnet18:cifar,width=4,classes=10", {2, 3, 16, 16}},
    {"resnet34:width=4,classes=5", {2, 3, 32, 32}},
    {"resnet50:cifar,width=4,classes=10", {2, 3, 16, 16}},
    {"resnet18:cifar,width=4,classes=10,in_channels=1", {2, 1, 28, 28}},
    {"mobilenet_v2:width_mult=0.25,classes=10", {2, 3, 32, 32}},
    {"mobilenet_v2:cifar,width_mult=0.25,classes=10", {2, 3, 16, 16}},
    {"vgg16_bn:cifar,width=4,classes=10", {2, 3, 32, 32}},
    {"vgg16_bn:width=2,classes=3", {1, 3, 224, 224}},
};

TEST(Zoo, ForwardMatchesShapeInferenceAndIsFinite) {
  for (const TinyCase& c : kTiny) {
    auto spec = parse_model_spec(c.spec);
    auto net = make_model(spec.first, spec.second);
    Generator gen(fresh_seed());
    Tensor x = randn(c.input, gen);
    Tensor y = net->forward(x);
    EXPECT_EQ(y.shape(), net->output_shape(c.input)) << c.spec;
    EXPECT_EQ(y.shape(), (Shape{c.input[0], spec.second.num_classes})) << c.spec;
    for (float v : y.to_vector<float>()) ASSERT_TRUE(std::isfinite(v)) << c.spec;
    // Backward reaches every parameter.
    sum(y).backward();
    for (const auto& p : net->named_parameters()) EXPECT_TRUE(p.second.grad().defined()) << c.spec << " " << p.first;
  }
}

TEST(Zoo, InitializesLikeTorchvision) {
  auto r = make_model("resnet18");
  NamedTensors p = r->named_parameters();
  auto w = p[0].second.to_vector<double>();  // conv1 [64, 3, 7, 7]: std sqrt(2 / (64 * 49))
  double sq = 0;
  for (double v : w) sq += v * v / w.size();
  EXPECT_NEAR(std::sqrt(sq), std::sqrt(2.0 / (64 * 49)), 0.05 * std::sqrt(2.0 / (64 * 49)));
  for (double v : p[1].second.to_vector<double>()) EXPECT_EQ(v, 1.0);                                 // bn1.weight
  for (double v : p[2].second.to_vector<double>()) EXPECT_EQ(v, 0.0);                                 // bn1.bias
  for (double v : p.back().second.to_vector<double>()) EXPECT_LE(std::abs(v), 1 / std::sqrt(512.0));  // fc.bias
  auto m = make_model("mobilenet_v2");
  NamedTensors mp = m->named_parameters();
  auto fc = mp[mp.size() - 2].second.to_vector<double>();
  sq = 0;
  for (double v : fc) sq += v * v / fc.size();
  EXPECT_NEAR(std::sqrt(sq), 0.01, 0.0005);  // classifier.1.weight ~ normal(0, 0.01)
  for (double v : mp.back().second.to_vector<double>()) EXPECT_EQ(v, 0.0);
  // Same seed, same weights; another seed, other weights.
  ModelOptions a, b;
  a.seed = b.seed = 5;
  a.width = b.width = 8;
  tandem::testing::expect_bitwise_equal(make_model("resnet18", a)->named_parameters()[0].second,
                                        make_model("resnet18", b)->named_parameters()[0].second, "seeded init");
  b.seed = 6;
  EXPECT_GT(tandem::testing::max_rel_error(make_model("resnet18", a)->named_parameters()[0].second,
                                           make_model("resnet18", b)->named_parameters()[0].second),
            0.0);
}

TEST(Zoo, MakeDivisibleFollowsTorchvision) {
  EXPECT_EQ(make_divisible(32 * 0.25), 8);
  EXPECT_EQ(make_divisible(16 * 0.35), 8);
  EXPECT_EQ(make_divisible(24 * 0.75), 24);  // 18 -> 16 is more than 10% below, so 24
  EXPECT_EQ(make_divisible(1280 * 1.4), 1792);
  EXPECT_EQ(make_divisible(96 * 0.5), 48);
}

TEST(Registry, BuildsByNameAndRefusesUnknownOnes) {
  EXPECT_EQ(model_names(), (std::vector<std::string>{"resnet18", "resnet34", "resnet50", "mobilenet_v2", "vgg16_bn"}));
  try {
    make_model("resnet19");
    ADD_FAILURE();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown model 'resnet19'; known models: resnet18, resnet34, resnet50, "
                                         "mobilenet_v2, vgg16_bn"),
              std::string::npos)
        << e.what();
  }
  auto s = parse_model_spec("mobilenet_v2:cifar,width_mult=0.5,classes=100,dropout=0,seed=3,separable=0");
  EXPECT_EQ(s.first, "mobilenet_v2");
  EXPECT_TRUE(s.second.cifar);
  EXPECT_EQ(s.second.width_mult, 0.5);
  EXPECT_EQ(s.second.num_classes, 100);
  EXPECT_EQ(s.second.dropout, 0.0);
  EXPECT_EQ(s.second.seed, 3u);
  EXPECT_FALSE(s.second.separable);
  EXPECT_EQ(make_model(s.first, s.second)->model_name(), "mobilenet_v2");
  for (const char* bad : {"resnet19", "resnet18:width", "resnet18:width=x", "resnet18:depth=3", "resnet18:cifar=2"})
    EXPECT_THROW(parse_model_spec(bad), ValueError) << bad;
  // Malformed numbers and items, refused with the spec, the key and what it should be.
  const std::pair<const char*, const char*> malformed[] = {
      {"resnet18:width=99999999999999999999", "width '99999999999999999999' is not an integer"},
      {"resnet18:width=16.0", "width '16.0' is not an integer"},
      {"resnet18:width=+16", "width '+16' is not an integer"},
      {"resnet18:seed=1e3", "seed '1e3' is not an integer"},
      {"mobilenet_v2:width_mult=nan", "width_mult 'nan' is not a finite number"},
      {"mobilenet_v2:width_mult=1e999", "width_mult '1e999' is not a finite number"},
      {"resnet18:dropout=inf", "dropout 'inf' is not a finite number"},
      {"resnet18:dropout=0.5x", "dropout '0.5x' is not a finite number"},
      {"resnet18:cifar,", "empty item 2"},
      {"resnet18:", "nothing follows the ':'"},
      {"resnet18:depth=3",
       "unknown key 'depth' (known: cifar, separable, width, width_mult, classes, in_channels, "
       "dropout, supernet, image, seed)"},
  };
  for (const auto& m : malformed)
    tandem::testing::expect_error<ValueError>([&] { parse_model_spec(m.first); },
                                              {std::string("model spec '") + m.first + "': " + m.second});
  // The last of repeated keys counts (Pipe-BD appends the student's seed to a spec that may have one).
  auto twice = parse_model_spec("resnet18:cifar,seed=3,width=8,seed=7,width=16");
  EXPECT_EQ(twice.second.width, 16);
  EXPECT_EQ(twice.second.seed, 7u);
  ModelOptions o;
  o.num_classes = 0;
  EXPECT_THROW(make_model("resnet18", o), ValueError);
}

TEST(ZooBlocks, Gradients) {
  Generator gen(fresh_seed());
  BasicBlock basic(3, 4, 2, false, gen);
  basic.to(DType::F64);
  expect_module_gradients(basic, randn({2, 3, 5, 5}, gen), fresh_seed(), 8);
  Bottleneck bottle(4, 2, 1, false, gen);
  bottle.to(DType::F64);
  expect_module_gradients(bottle, randn({2, 4, 4, 4}, gen), fresh_seed(), 8);
  BasicBlock separable(3, 3, 1, true, gen);
  EXPECT_EQ(separable.named_parameters()[0].first, "conv1.0.weight");
  EXPECT_EQ(separable.named_parameters()[0].second.shape(), (Shape{3, 1, 3, 3}));  // depthwise
  separable.to(DType::F64);
  expect_module_gradients(separable, randn({2, 3, 4, 4}, gen), fresh_seed(), 8);
  InvertedResidual ir(4, 4, 1, 3, 5, true, gen);
  EXPECT_TRUE(ir.has_residual());
  ir.to(DType::F64);
  expect_module_gradients(ir, randn({2, 4, 5, 5}, gen), fresh_seed(), 8);
  SupernetCellSpec cs;
  cs.in = cs.out = 3;
  cs.sample_seed = fresh_seed();
  SupernetCell cell(cs, gen);
  cell.to(DType::F64);
  // alpha's gradient is an estimator (the output does not depend on alpha's value): checked on its own below.
  cell.alpha.set_requires_grad(false);
  for (int i = 0; i < 3; ++i) expect_module_gradients(cell, randn({2, 3, 4, 4}, gen), fresh_seed(), 6);
}

TEST(Supernet, SamplesFromSoftmaxAlphaReproducibly) {
  Generator g1(1), g2(2);
  SupernetCellSpec cs;
  cs.in = cs.out = 4;
  cs.sample_seed = fresh_seed();
  SupernetCell a(cs, g1), b(cs, g2);
  EXPECT_EQ(a.num_candidates(), 7u);
  int bns = 0;
  for (auto& m : a.named_modules())
    if (auto* bn = dynamic_cast<BatchNorm2d*>(m.second)) {
      EXPECT_EQ(bn->spec().eps, 1e-3) << m.first << ": ProxylessNAS's batch norm";
      ++bns;
    }
  EXPECT_EQ(bns, 6 * 3);
  EXPECT_EQ(a.candidate_name(0), "mb3_e3");
  EXPECT_EQ(a.candidate_name(5), "mb7_e6");
  EXPECT_EQ(a.candidate_name(6), "zero");
  Tensor x = randn({1, 4, 3, 3}, g1);
  std::vector<int> counts(7, 0);
  {
    autograd::NoGradGuard ng;
    for (int i = 0; i < 700; ++i) {
      a.forward(x);
      b.forward(x);
      ASSERT_EQ(a.active(), b.active()) << "cells seeded alike must sample alike (step " << i << ")";
      ++counts[a.active()];
    }
  }
  for (int c : counts) EXPECT_NEAR(c, 100, 40);  // uniform at alpha = 0
  // A skewed alpha skews the choice; evaluation takes the most likely path.
  {
    autograd::NoGradGuard ng;
    a.alpha.copy_(from_vector<float>({0, 0, 0, 3, 0, 0, 0}, {7}));
  }
  int picked = 0;
  {
    autograd::NoGradGuard ng;
    for (int i = 0; i < 600; ++i) {
      a.forward(x);
      picked += a.active() == 3;
    }
  }
  double p3 = std::exp(3.0) / (std::exp(3.0) + 6);
  EXPECT_NEAR(picked / 600.0, p3, 0.08);  // 4.6 standard deviations
  a.eval();
  a.forward(x);
  EXPECT_EQ(a.active(), 3u);
  EXPECT_EQ(a.most_likely(), 3u);
  a.fix_path(6);
  tandem::testing::expect_bitwise_equal(a.forward(x), x, "the zero candidate leaves the shortcut");
  EXPECT_THROW(a.fix_path(7), ValueError);
  // Strided cells have no shortcut and so no zero candidate.
  SupernetCellSpec strided = cs;
  strided.stride = 2;
  EXPECT_EQ(SupernetCell(strided, g1).num_candidates(), 6u);
}

TEST(Supernet, AlphaGradientIsTheBinaryGateGradientOfTheSampledPath) {
  Generator gen(fresh_seed());
  SupernetCellSpec cs;
  cs.in = 3;
  cs.out = 5;  // no shortcut
  cs.sample_seed = fresh_seed();
  SupernetCell cell(cs, gen);
  cell.to(DType::F64);
  {
    autograd::NoGradGuard ng;
    normal_(cell.alpha, 0.0, 1.0, gen);
  }
  Tensor x = randn({2, 3, 4, 4}, gen, DType::F64);
  Tensor w = randn({2, 5, 4, 4}, gen, DType::F64);
  Tensor y = cell.forward(x);
  size_t s = cell.active();
  sum(mul(y, w)).backward();
  // <dL/dy, o_s> where o_s is the sampled candidate's output (y itself: the gate's value is 1).
  double g_dot_o = sum(mul(y.detach(), w)).item<double>();
  std::vector<double> p = cell.probabilities();
  auto got = cell.alpha.grad().to_vector<double>();
  for (size_t k = 0; k < p.size(); ++k) EXPECT_NEAR(got[k], g_dot_o * p[s] * ((k == s ? 1.0 : 0.0) - p[k]), 1e-10) << k;
}

}  // namespace
}  // namespace models
}  // namespace tandem
