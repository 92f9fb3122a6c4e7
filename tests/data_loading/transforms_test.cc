// Transforms: each step against a plain reference, the random draws' ranges, determinism, and spec parsing.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "data/transforms.h"
#include "runtime/base/error.h"
#include "runtime/base/philox.h"
#include "tests/testing.h"

namespace tandem {
namespace data {
namespace {

Image random_image(int64_t h, int64_t w, int64_t c, uint64_t seed) {
  Image im{h, w, c, std::vector<uint8_t>(static_cast<size_t>(h * w * c))};
  for (size_t i = 0; i < im.hwc.size(); ++i) im.hwc[i] = static_cast<uint8_t>(philox::generate(seed, i).x[1] >> 24);
  return im;
}

int px(const Image& im, int64_t y, int64_t x, int64_t c) {
  if (y < 0 || x < 0 || y >= im.height || x >= im.width) return 0;
  return im.hwc[(y * im.width + x) * im.channels + c];
}

TEST(Transforms, RandomCropIsAWindowOfThePaddedImage) {
  uint64_t seed = testing::fresh_seed();
  Image im = random_image(10, 12, 3, seed);
  std::set<std::pair<int, int>> offsets;
  // 1000 draws: the chance that one of the 56 offsets never occurs is about 1e-6.
  for (int t = 0; t < 1000; ++t) {
    Generator gen(seed, static_cast<uint64_t>(t) * 100);
    Image out = random_crop(im, 8, 9, 2, gen);
    ASSERT_EQ(out.height, 8);
    ASSERT_EQ(out.width, 9);
    // Find the offset (top, left) in the padded image that reproduces out.
    int found = 0;
    for (int top = 0; top <= 10 + 4 - 8; ++top)
      for (int left = 0; left <= 12 + 4 - 9; ++left) {
        bool same = true;
        for (int y = 0; y < 8 && same; ++y)
          for (int x = 0; x < 9 && same; ++x)
            for (int c = 0; c < 3 && same; ++c)
              same = out.hwc[(y * 9 + x) * 3 + c] == px(im, top + y - 2, left + x - 2, c);
        if (same) {
          ++found;
          offsets.insert({top, left});
        }
      }
    ASSERT_GE(found, 1) << "trial " << t;
  }
  EXPECT_EQ(offsets.size(), 7u * 8u);  // every offset occurs
  Generator gen(seed);
  EXPECT_THROW(random_crop(im, 20, 5, 2, gen), ShapeError);
}

TEST(Transforms, FlipAndCenterCrop) {
  uint64_t seed = testing::fresh_seed();
  Image im = random_image(7, 9, 3, seed);
  Image f = hflip(im);
  for (int y = 0; y < 7; ++y)
    for (int x = 0; x < 9; ++x)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(px(f, y, x, c), px(im, y, 8 - x, c));
  // torchvision: top = round((H - h) / 2) with halves to even; padding when the crop is larger.
  struct Case {
    int64_t h, w, top, left;
  } cases[] = {{4, 4, 2, 2}, {6, 8, 0, 0}, {5, 6, 1, 2}, {7, 9, 0, 0}, {9, 11, -1, -1}, {10, 12, -1, -1}};
  for (const Case& k : cases) {
    Image c = center_crop(im, k.h, k.w);
    ASSERT_EQ(c.height, k.h);
    for (int y = 0; y < k.h; ++y)
      for (int x = 0; x < k.w; ++x)
        for (int ch = 0; ch < 3; ++ch)
          ASSERT_EQ(px(c, y, x, ch), px(im, y + k.top, x + k.left, ch)) << k.h << "x" << k.w << " at " << y << "," << x;
  }
}

// Bilinear resize with half-pixel centers, in double, written independently.
double bilinear_ref(const Image& im, CropBox b, int64_t oh, int64_t ow, int64_t y, int64_t x, int64_t c) {
  auto coord = [](int64_t o, int64_t n, int64_t out, int64_t& i0, int64_t& i1, double& f) {
    double s = (o + 0.5) * n / static_cast<double>(out) - 0.5;
    s = std::max(0.0, s);
    i0 = std::min<int64_t>(static_cast<int64_t>(std::floor(s)), n - 1);
    i1 = std::min<int64_t>(i0 + 1, n - 1);
    f = s - i0;
  };
  int64_t y0, y1, x0, x1;
  double fy, fx;
  coord(y, b.height, oh, y0, y1, fy);
  coord(x, b.width, ow, x0, x1, fx);
  auto at = [&](int64_t yy, int64_t xx) { return static_cast<double>(px(im, b.top + yy, b.left + xx, c)); };
  return (1 - fy) * ((1 - fx) * at(y0, x0) + fx * at(y0, x1)) + fy * ((1 - fx) * at(y1, x0) + fx * at(y1, x1));
}

TEST(Transforms, BilinearResizeMatchesAReference) {
  uint64_t seed = testing::fresh_seed();
  Image im = random_image(23, 31, 3, seed);
  for (auto [box, oh, ow] : {std::tuple<CropBox, int64_t, int64_t>{CropBox{0, 0, 23, 31}, 11, 40},
                             {CropBox{3, 5, 15, 20}, 32, 32},
                             {CropBox{1, 2, 7, 9}, 7, 9},
                             {CropBox{0, 0, 23, 31}, 5, 3}}) {
    Image out = resize_bilinear(im, box, oh, ow);
    ASSERT_EQ(out.height, oh);
    ASSERT_EQ(out.width, ow);
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t x = 0; x < ow; ++x)
        for (int64_t c = 0; c < 3; ++c) {
          double ref = bilinear_ref(im, box, oh, ow, y, x, c);
          // Rounding to 8 bits, plus the 1/2048 steps of the fixed-point weights.
          ASSERT_LE(std::abs(px(out, y, x, c) - ref), 0.5 + 0.25) << y << "," << x << " of " << oh << "x" << ow;
        }
  }
  Image shorter = resize_shorter(im, 10);
  EXPECT_EQ(shorter.height, 10);
  EXPECT_EQ(shorter.width, 10 * 31 / 23);
}

TEST(Transforms, ResizedCropBoxesFollowScaleAndRatio) {
  uint64_t seed = testing::fresh_seed();
  int fallback = 0;
  for (int t = 0; t < 2000; ++t) {
    Generator gen(seed, static_cast<uint64_t>(t) * 64);
    CropBox b = sample_resized_crop_box(375, 500, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, gen);
    ASSERT_GE(b.top, 0);
    ASSERT_GE(b.left, 0);
    ASSERT_LE(b.top + b.height, 375);
    ASSERT_LE(b.left + b.width, 500);
    double area = static_cast<double>(b.height) * b.width / (375.0 * 500.0);
    double ratio = static_cast<double>(b.width) / b.height;
    if (b.height == 375 && b.width == 500) {
      ++fallback;
      continue;
    }
    // Rounding of the sides widens the bounds slightly.
    EXPECT_GE(area, 0.08 * 0.95);
    EXPECT_LE(area, 1.0);
    EXPECT_GE(ratio, 0.75 * 0.95);
    EXPECT_LE(ratio, 4.0 / 3.0 * 1.05);
  }
  EXPECT_LT(fallback, 20);
  // A very wide image never fits the ratio: the fallback is a central crop with the ratio clamped.
  Generator gen(seed);
  CropBox b = sample_resized_crop_box(10, 200, 0.9, 1.0, 0.75, 4.0 / 3.0, gen);
  EXPECT_EQ(b.height, 10);
  EXPECT_EQ(b.width, 13);
  EXPECT_EQ(b.left, (200 - 13) / 2);
}

TEST(Transforms, NormalizeAndCutout) {
  uint64_t seed = testing::fresh_seed();
  Image im = random_image(5, 6, 3, seed);
  std::vector<float> mean = {0.1f, 0.5f, 0.9f}, std = {0.2f, 0.3f, 0.4f};
  std::vector<float> out(90);
  to_normalized_chw(im, mean, std, out.data());
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 5; ++y)
      for (int x = 0; x < 6; ++x) {
        double ref = (px(im, y, x, c) / 255.0 - mean[c]) / std[c];
        ASSERT_NEAR(out[(c * 5 + y) * 6 + x], ref, 1e-5);
      }
  EXPECT_THROW(to_normalized_chw(im, {0.5f}, {0.5f}, out.data()), ValueError);
  std::vector<float> ones(3 * 20 * 20, 1.0f);
  Generator gen(seed);
  cutout(ones.data(), 3, 20, 20, 6, gen);
  int zeros = 0, min_y = 99, max_y = -1, min_x = 99, max_x = -1;
  for (int y = 0; y < 20; ++y)
    for (int x = 0; x < 20; ++x)
      if (ones[y * 20 + x] == 0.0f) {
        ++zeros;
        min_y = std::min(min_y, y);
        max_y = std::max(max_y, y);
        min_x = std::min(min_x, x);
        max_x = std::max(max_x, x);
        EXPECT_EQ(ones[2 * 400 + y * 20 + x], 0.0f);
      }
  ASSERT_GT(zeros, 0);
  EXPECT_LE(zeros, 36);
  EXPECT_EQ(zeros, (max_y - min_y + 1) * (max_x - min_x + 1));  // one rectangle
}

TEST(Pipeline, PresetsShapesAndDeterminism) {
  uint64_t seed = testing::fresh_seed();
  Image im = random_image(32, 32, 3, seed);
  Image big = random_image(300, 400, 3, seed + 1);
  Image gray = random_image(28, 28, 1, seed + 2);
  EXPECT_EQ(Pipeline::parse("cifar-train").output_shape(32, 32, 3), (Shape{3, 32, 32}));
  EXPECT_EQ(Pipeline::parse("imagenet-train").output_shape(300, 400, 3), (Shape{3, 224, 224}));
  EXPECT_EQ(Pipeline::parse("imagenet-eval").output_shape(300, 400, 3), (Shape{3, 224, 224}));
  EXPECT_EQ(Pipeline::parse("resize:size=64").output_shape(300, 400, 3), (Shape{3, 64, 85}));
  EXPECT_EQ(Pipeline().output_shape(28, 28, 1), (Shape{1, 28, 28}));
  for (const char* spec : {"cifar-train", "cifar-eval,cutout:size=8", "none"}) {
    Pipeline p = Pipeline::parse(spec);
    std::vector<float> a(3 * 32 * 32), b(a.size()), c(a.size());
    Generator g1 = sample_generator(seed, 3, 17), g2 = sample_generator(seed, 3, 17),
              g3 = sample_generator(seed, 4, 17);
    p.apply(im, g1, a.data());
    p.apply(im, g2, b.data());
    p.apply(im, g3, c.data());
    EXPECT_EQ(a, b) << spec;
    if (std::string(spec) != "none") {
      // Another epoch draws another augmentation (nearly always: crop offset, flip and cutout position).
      std::vector<float> d(a.size());
      Generator g4 = sample_generator(seed, 5, 17);
      p.apply(im, g4, d.data());
      EXPECT_TRUE(a != c || a != d) << spec;
    }
  }
  // "none" is x / 255 exactly as in float arithmetic.
  std::vector<float> none(3 * 32 * 32);
  Generator g = sample_generator(seed, 0, 0);
  Pipeline().apply(im, g, none.data());
  EXPECT_EQ(none[5], static_cast<float>(im.hwc[5 * 3]) / 255.0f);
  // imagenet presets on a large image; cifar presets on gray images (averaged statistics).
  std::vector<float> out(3 * 224 * 224);
  Pipeline::parse("imagenet-train").apply(big, g, out.data());
  Pipeline::parse("imagenet-eval").apply(big, g, out.data());
  std::vector<float> gout(28 * 28);
  Pipeline::parse("cifar-train").apply(gray, g, gout.data());
  Pipeline::parse("normalize:mean=0.5:std=0.25").apply(gray, g, gout.data());
  EXPECT_NEAR(gout[3], (gray.hwc[3] / 255.0 - 0.5) / 0.25, 1e-5);
  Pipeline two = Pipeline::parse("normalize:mean=0.5/0.5:std=0.2/0.2");
  EXPECT_THROW(two.apply(im, g, out.data()), ShapeError);
}

TEST(Pipeline, FusedFlipEqualsFlipThenNormalize) {
  uint64_t seed = testing::fresh_seed();
  Image im = random_image(9, 13, 3, seed);
  std::vector<float> mean = {0.4f, 0.5f, 0.6f}, std = {0.2f, 0.25f, 0.3f};
  std::vector<float> fused(3 * 9 * 13), ref(fused.size());
  Generator g(seed);
  Pipeline::parse("flip:p=1,normalize:mean=0.4/0.5/0.6:std=0.2/0.25/0.3").apply(im, g, fused.data());
  to_normalized_chw(hflip(im), mean, std, ref.data());
  EXPECT_EQ(fused, ref);
  // A flip before a crop is applied before it: flip, then the centered window of the mirrored image.
  std::vector<float> a(3 * 5 * 6), b(a.size());
  Pipeline::parse("flip:p=1,center-crop:size=5x6").apply(im, g, a.data());
  to_normalized_chw(center_crop(hflip(im), 5, 6), {0.0f, 0.0f, 0.0f}, {1.0f, 1.0f, 1.0f}, b.data());
  EXPECT_EQ(a, b);
}

TEST(Pipeline, ParseErrorsNameTheItem) {
  auto msg = [](const std::string& spec) -> std::string {
    try {
      Pipeline::parse(spec);
    } catch (const ValueError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(msg("cifar-train,blur").find("unknown transform 'blur'"), std::string::npos);
  EXPECT_NE(msg("random-crop:pad=x").find("transform 'random-crop:pad=x': pad 'x' is not an integer in [0, 999999]"),
            std::string::npos);
  EXPECT_NE(msg("random-resized-crop").find("needs size"), std::string::npos);
  EXPECT_NE(msg("random-resized-crop:size=224:scale=0.5-2").find("scale"), std::string::npos);
  EXPECT_NE(msg("flip:p=2").find("p '2' is not a finite number in [0, 1]"), std::string::npos);
  EXPECT_NE(msg("normalize:cifar11").find("unknown statistics 'cifar11'"), std::string::npos);
  EXPECT_NE(msg("normalize:mean=1/2:std=1").find("needs statistics"), std::string::npos);
  EXPECT_NE(msg("cifar-train:x=1").find("takes no arguments"), std::string::npos);
  EXPECT_NE(msg("cutout:size=0").find("size '0' is not an integer in [1, 999999]"), std::string::npos);
  EXPECT_NE(msg("resize:sz=3").find("unknown key 'sz' (known: size)"), std::string::npos);
  EXPECT_NE(msg("flip,,flip").find("empty item"), std::string::npos);
  // Malformed numbers are refused wherever they appear: fractions or exponents for whole numbers, a '+' or a
  // space, infinity and NaN, values beyond a float.
  const std::pair<const char*, const char*> numbers[] = {
      {"random-crop:pad=4.0", "pad '4.0' is not an integer"},
      {"random-crop:pad=1e300", "pad '1e300' is not an integer"},
      {"random-crop:size=+8", "size '+8' is not an integer"},
      {"center-crop:size=8x 8", "size ' 8' is not an integer"},
      {"resize:size=1e2", "size '1e2' is not an integer"},
      {"flip:p=nan", "p 'nan' is not a finite number"},
      {"random-resized-crop:size=8:scale=0.1-inf", "scale 'inf' is not a finite number"},
      {"random-resized-crop:size=8:ratio=1", "ratio '1' is not a range A-B"},
      {"normalize:mean=1e300:std=1", "mean '1e300' is not a finite number in"},
      {"normalize:mean=0.5/:std=1/1", "empty item 2 in '0.5/'"},
      {"flip:", "nothing follows the ':'"},
  };
  for (const auto& n : numbers)
    EXPECT_NE(msg(n.first).find(n.second), std::string::npos) << n.first << ": " << msg(n.first);
  // Repeated keys: the last counts.
  EXPECT_NE(Pipeline::parse("random-crop:pad=9:pad=2").describe().find("pad 2"), std::string::npos);
  EXPECT_NE(Pipeline::parse("cifar-train,cutout:size=16").describe().find("cutout 16"), std::string::npos);
}

}  // namespace
}  // namespace data
}  // namespace tandem
