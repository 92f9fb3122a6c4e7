// Cutting a model into stages: units and their FLOPs against hand counts (a small model of every kind of layer
// the partitioner meets, and ResNet-18 from torchvision's architecture), and balanced splits against an
// exhaustive search.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "models/layers.h"
#include "models/registry.h"
#include "models/sequential.h"
#include "models/zoo/resnet.h"
#include "parallel/cyclic/partition.h"
#include "runtime/base/error.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace cyclic {
namespace {

// stem conv (bias) - bn - relu - layer {Residual with a 1x1 shortcut, BasicBlock with a downsample} - depthwise
// conv - max pool - global average pool - linear (bias), on [1, 3, 8, 8].
std::shared_ptr<models::Sequential> small_model(Generator& gen) {
  using namespace models;
  auto body = std::make_shared<Sequential>();
  body->add(std::make_shared<Conv2d>(Conv2dSpec{4, 4, 3, 1, 1, 1, 1, false}, gen));
  body->add(std::make_shared<BatchNorm2d>(4));
  auto layer = std::make_shared<Sequential>();
  layer->add(
      std::make_shared<Residual>(body, std::make_shared<Conv2d>(Conv2dSpec{4, 4, 1, 1, 0, 1, 1, false}, gen), true));
  layer->add(std::make_shared<BasicBlock>(4, 8, 2, false, gen));
  auto m = std::make_shared<Sequential>();
  m->add("stem", std::make_shared<Conv2d>(Conv2dSpec{3, 4, 3, 1, 1, 1, 1, true}, gen));
  m->add("bn", std::make_shared<BatchNorm2d>(4));
  m->add("relu", std::make_shared<ReLU>());
  m->add("layer", layer);
  m->add("dw", std::make_shared<Conv2d>(Conv2dSpec{8, 8, 3, 1, 1, 1, 8, false}, gen));
  m->add("pool", std::make_shared<MaxPool2d>(2, 2));
  m->add("gap", std::make_shared<GlobalAvgPool>());
  m->add("fc", std::make_shared<Linear>(8, 10, true, gen));
  return m;
}

TEST(Partition, UnitsAndFlopsOfASmallModelMatchHandCounts) {
  Generator gen(testing::fresh_seed());
  std::vector<Unit> units = model_units(*small_model(gen), {1, 3, 8, 8});
  // Multiply-accumulates per output element times outputs; norm and pooling: one per input element.
  const std::vector<std::pair<std::string, double>> want = {
      {"stem", 8 * 8 * 4 * (3 * 3 * 3 + 1)},  // 7168
      {"bn", 4 * 8 * 8},                      // 256
      {"relu", 0},
      {"layer.0", 8 * 8 * 4 * (4 * 9) + 4 * 8 * 8 + 8 * 8 * 4 * 4},  // body conv + bn, 1x1 shortcut: 10496
      // conv 3x3 stride 2 to 8 channels, bn, conv 3x3, bn; downsample 1x1 stride 2 + bn, on 4x4 outputs
      {"layer.1", 4 * 4 * 8 * (4 * 9) + 128 + 4 * 4 * 8 * (8 * 9) + 128 + 4 * 4 * 8 * 4 + 128},  // 14720
      {"dw", 4 * 4 * 8 * 9},  // depthwise: one input channel per output
      {"pool", 8 * 4 * 4},
      {"gap", 8 * 2 * 2},
      {"fc", 10 * (8 + 1)},
  };
  ASSERT_EQ(units.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(units[i].name, want[i].first);
    EXPECT_EQ(units[i].flops, want[i].second) << want[i].first;
  }
  EXPECT_EQ(units[3].input, (Shape{1, 4, 8, 8}));
  EXPECT_EQ(units[4].output, (Shape{1, 8, 4, 4}));
  EXPECT_EQ(units.back().output, (Shape{1, 10}));
  // Residual blocks stay whole; a plain Sequential of one item is not opened.
  auto one = std::make_shared<models::Sequential>();
  one->add("wrap",
           std::make_shared<models::Sequential>(std::vector<models::ModulePtr>{std::make_shared<models::ReLU>()}));
  EXPECT_EQ(model_units(*one, {1, 3, 8, 8}).at(0).name, "wrap");
  EXPECT_THROW(model_units(*small_model(gen), {1, 5, 8, 8}), ShapeError);
}

// torchvision's ResNet-18 on CIFAR (3x3 stem, no max-pool), width w, 32x32 inputs, 10 classes.
std::vector<double> resnet18_cifar_flops(int64_t w) {
  auto block = [](int64_t in, int64_t c, int64_t hw, bool down) {
    double f = hw * hw * c * (in * 9.0) + hw * hw * c + hw * hw * c * (c * 9.0) + hw * hw * c;
    if (down) f += hw * hw * c * in + hw * hw * c;
    return f;
  };
  std::vector<double> f = {32 * 32 * w * 27.0, 32 * 32 * w * 1.0, 0};
  int64_t in = w;
  for (int s = 0; s < 4; ++s) {
    const int64_t c = w << s, hw = 32 >> s;
    f.push_back(block(in, c, hw, in != c));
    f.push_back(block(c, c, hw, false));
    in = c;
  }
  f.push_back(8.0 * w * 4 * 4);     // global average pool over 8w x 4 x 4
  f.push_back(10.0 * (8 * w + 1));  // fc
  return f;
}

TEST(Partition, ResNet18UnitsFollowItsArchitecture) {
  for (int64_t w : {4, 16}) {
    auto spec = models::parse_model_spec("resnet18:cifar,width=" + std::to_string(w) + ",classes=10");
    auto model = std::static_pointer_cast<models::Sequential>(models::make_model(spec.first, spec.second));
    std::vector<Unit> units = model_units(*model, {1, 3, 32, 32});
    const std::vector<double> want = resnet18_cifar_flops(w);
    ASSERT_EQ(units.size(), 13u);
    EXPECT_EQ(units[3].name, "layer1.0");
    EXPECT_EQ(units[10].name, "layer4.1");
    for (size_t i = 0; i < units.size(); ++i) EXPECT_EQ(units[i].flops, want[i]) << units[i].name;
  }
}

// The smallest largest-stage FLOPs over every contiguous split of `f` into `stages`, and how many splits reach it.
std::pair<double, int> best_by_search(const std::vector<double>& f, int stages) {
  double best = std::numeric_limits<double>::infinity();
  int count = 0;
  std::vector<size_t> starts;
  std::function<void(size_t, double)> go = [&](size_t from, double worst) {
    if (static_cast<int>(starts.size()) == stages - 1) {
      double last = 0;
      for (size_t i = from; i < f.size(); ++i) last += f[i];
      const double v = std::max(worst, last);
      if (v < best)
        best = v, count = 1;
      else if (v == best)
        ++count;
      return;
    }
    double stage = 0;
    for (size_t end = from + 1; end + (stages - 1 - starts.size()) <= f.size(); ++end) {
      stage += f[end - 1];
      starts.push_back(end);
      go(end, std::max(worst, stage));
      starts.pop_back();
    }
  };
  go(0, 0);
  return {best, count};
}

TEST(Partition, BalancedSplitsAreOptimal) {
  std::mt19937_64 rng(testing::fresh_seed());
  for (int trial = 0; trial < 40; ++trial) {
    const size_t n = 1 + rng() % 9;
    std::vector<Unit> units(n);
    std::vector<double> f(n);
    for (size_t i = 0; i < n; ++i) units[i].flops = f[i] = static_cast<double>(rng() % 1000);
    for (int s = 1; s <= static_cast<int>(n); ++s) {
      std::vector<size_t> starts = balanced_split(units, s);
      ASSERT_EQ(starts.size(), static_cast<size_t>(s));
      EXPECT_EQ(starts[0], 0u);
      double worst = 0;
      for (int k = 0; k < s; ++k) {
        const size_t end = k + 1 < s ? starts[k + 1] : n;
        ASSERT_GT(end, starts[k]);
        double stage = 0;
        for (size_t i = starts[k]; i < end; ++i) stage += f[i];
        worst = std::max(worst, stage);
      }
      EXPECT_EQ(worst, best_by_search(f, s).first) << n << " units, " << s << " stages";
    }
    EXPECT_THROW(balanced_split(units, static_cast<int>(n) + 1), ValueError);
  }
  // ResNet-18's units (hand-counted above) into 2..6 stages.
  std::vector<double> f = resnet18_cifar_flops(16);
  std::vector<Unit> units(f.size());
  for (size_t i = 0; i < f.size(); ++i) units[i].flops = f[i];
  for (int s = 2; s <= 6; ++s) {
    const double best = best_by_search(f, s).first;
    std::vector<size_t> starts = balanced_split(units, s);
    double worst = 0;
    for (int k = 0; k < s; ++k) {
      double stage = 0;
      for (size_t i = starts[k]; i < (k + 1 < s ? starts[k + 1] : f.size()); ++i) stage += f[i];
      worst = std::max(worst, stage);
    }
    EXPECT_EQ(worst, best) << s << " stages";
  }
}

// Given splits: unit indices or names, refused with the reason (malformed numbers, unknown names, order).
TEST(Partition, ParsesGivenSplits) {
  std::vector<Unit> units(5);
  const char* names[] = {"conv1", "layer1", "layer2.0", "layer2.1", "fc"};
  for (size_t i = 0; i < units.size(); ++i) units[i].name = names[i];
  EXPECT_EQ(parse_split("0,2,4", units), (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(parse_split("conv1,layer2.0,4", units), (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(parse_split("0", units), (std::vector<size_t>{0}));
  const std::pair<const char*, const char*> bad[] = {
      {"", "must start at the first unit"},
      {"1,2", "must start at the first unit"},
      {"0,3,2", "stage starts must increase"},
      {"0,2,2", "stage starts must increase"},
      {"0,5", "unit index '5' is not an integer in [0, 4]"},
      {"0,-1", "unit index '-1' is not an integer in [0, 4]"},
      {"0,99999999999999999999", "unit index '99999999999999999999' is not an integer in [0, 4]"},
      {"0,+2", "no unit named '+2' (units: conv1, layer1, layer2.0, layer2.1, fc)"},
      {"0, 2", "no unit named ' 2'"},
      {"0,2x", "no unit named '2x'"},
      {"0,,2", "empty item 2"},
      {"0,2,", "empty item 3"},
  };
  for (const auto& b : bad) {
    SCOPED_TRACE(b.first);
    testing::expect_error<ValueError>([&] { parse_split(b.first, units); },
                                      {std::string("split '") + b.first, b.second});
  }
}

}  // namespace
}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
