// Transforms: crops, flips, bilinear resize, normalization, cutout, and the Pipeline spec parser.
#include "data/transforms.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <sstream>

#include "runtime/base/error.h"
#include "runtime/base/philox.h"
#include "runtime/base/spec_reader.h"

namespace tandem {
namespace data {

Generator sample_generator(uint64_t seed, int64_t epoch, int64_t index) {
  // The key mixes seed and epoch through Philox itself; the counter space is split per sample
  // (2^20 counters = 4M values each, far more than any pipeline draws).
  philox::Block b = philox::generate(seed, 0xA11E0000000000ull ^ static_cast<uint64_t>(epoch));
  uint64_t key = (static_cast<uint64_t>(b.x[0]) << 32) | b.x[1];
  return Generator(key, static_cast<uint64_t>(index) << 20);
}

namespace {

Image blank(int64_t h, int64_t w, int64_t c) {
  Image out;
  out.height = h;
  out.width = w;
  out.channels = c;
  out.hwc.assign(static_cast<size_t>(h * w * c), 0);
  return out;
}

void check_image(const Image& im, const char* what) {
  TD_CHECK_SHAPE(im.height > 0 && im.width > 0 && im.channels > 0 &&
                     static_cast<int64_t>(im.hwc.size()) == im.height * im.width * im.channels,
                 what, ": malformed image ", im.height, "x", im.width, "x", im.channels, " with ", im.hwc.size(),
                 " bytes");
}

// Python's round(), which torchvision's box arithmetic uses.
int64_t round_half_even(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

int64_t random_int(Generator& gen, int64_t n) { return static_cast<int64_t>(gen.integer(static_cast<uint64_t>(n))); }

}  // namespace

namespace {
// The h x w window whose top-left corner is at (top, left) of the image; zeros outside the image.
Image window(const Image& image, int64_t top, int64_t left, int64_t h, int64_t w) {
  const int64_t c = image.channels;
  Image out = blank(h, w, c);
  int64_t x_lo = std::max<int64_t>(0, -left), x_hi = std::min<int64_t>(w, image.width - left);
  if (x_hi <= x_lo) return out;
  for (int64_t y = 0; y < h; ++y) {
    int64_t sy = top + y;
    if (sy < 0 || sy >= image.height) continue;
    const uint8_t* src = image.hwc.data() + (sy * image.width + left + x_lo) * c;
    std::memcpy(out.hwc.data() + (y * w + x_lo) * c, src, static_cast<size_t>((x_hi - x_lo) * c));
  }
  return out;
}
}  // namespace

Image pad_crop(const Image& image, int64_t top, int64_t left, int64_t h, int64_t w, int64_t padding) {
  check_image(image, "pad_crop");
  TD_CHECK(h > 0 && w > 0 && padding >= 0, "pad_crop: bad size ", h, "x", w, " or padding ", padding);
  TD_CHECK(top >= 0 && left >= 0 && top + h <= image.height + 2 * padding && left + w <= image.width + 2 * padding,
           "pad_crop: window ", h, "x", w, " at (", top, ", ", left, ") is outside the padded ", image.height, "x",
           image.width, " image (padding ", padding, ")");
  return window(image, top - padding, left - padding, h, w);
}

Image random_crop(const Image& image, int64_t h, int64_t w, int64_t padding, Generator& gen) {
  int64_t span_y = image.height + 2 * padding - h + 1, span_x = image.width + 2 * padding - w + 1;
  TD_CHECK_SHAPE(span_y > 0 && span_x > 0, "random crop ", h, "x", w, " does not fit a ", image.height, "x",
                 image.width, " image padded by ", padding);
  int64_t top = random_int(gen, span_y);
  int64_t left = random_int(gen, span_x);
  return pad_crop(image, top, left, h, w, padding);
}

Image hflip(const Image& image) {
  check_image(image, "hflip");
  Image out = blank(image.height, image.width, image.channels);
  const int64_t c = image.channels, w = image.width;
  for (int64_t y = 0; y < image.height; ++y) {
    const uint8_t* src = image.hwc.data() + y * w * c;
    uint8_t* dst = out.hwc.data() + y * w * c;
    for (int64_t x = 0; x < w; ++x) std::memcpy(dst + x * c, src + (w - 1 - x) * c, static_cast<size_t>(c));
  }
  return out;
}

namespace {
// Bilinear weights in fixed point: 11 fractional bits, so a 2-D blend of 8-bit values fits 32 bits and the
// result is the same integer on every machine.
constexpr int kWeightBits = 11;
constexpr uint32_t kOne = 1u << kWeightBits;

// For each output coordinate: the two source taps inside [lo, lo + n) and the weight of the second.
struct Taps {
  std::vector<int64_t> i0, i1;
  std::vector<uint32_t> w1;
};
Taps make_taps(int64_t lo, int64_t n, int64_t out, int64_t stride) {
  Taps t;
  t.i0.resize(out);
  t.i1.resize(out);
  t.w1.resize(out);
  double scale = static_cast<double>(n) / static_cast<double>(out);
  for (int64_t o = 0; o < out; ++o) {
    double src = (static_cast<double>(o) + 0.5) * scale - 0.5;
    if (src < 0) src = 0;
    int64_t i = static_cast<int64_t>(src);
    if (i > n - 1) i = n - 1;
    t.i0[o] = (lo + i) * stride;
    t.i1[o] = (lo + std::min(i + 1, n - 1)) * stride;
    t.w1[o] = static_cast<uint32_t>(std::lround((src - static_cast<double>(i)) * kOne));
  }
  return t;
}

template <int C>
void resize_rows(const Image& image, const Taps& ty, const Taps& tx, Image& out) {
  const int64_t h = out.height, w = out.width;
  for (int64_t y = 0; y < h; ++y) {
    const uint8_t* r0 = image.hwc.data() + ty.i0[y];
    const uint8_t* r1 = image.hwc.data() + ty.i1[y];
    const uint32_t wy1 = ty.w1[y], wy0 = kOne - wy1;
    uint8_t* dst = out.hwc.data() + y * w * C;
    for (int64_t x = 0; x < w; ++x) {
      const int64_t a = tx.i0[x], b = tx.i1[x];
      const uint32_t wx1 = tx.w1[x], wx0 = kOne - wx1;
      for (int k = 0; k < C; ++k) {
        uint32_t top = r0[a + k] * wx0 + r0[b + k] * wx1;
        uint32_t bot = r1[a + k] * wx0 + r1[b + k] * wx1;
        dst[x * C + k] =
            static_cast<uint8_t>((top * wy0 + bot * wy1 + (1u << (2 * kWeightBits - 1))) >> (2 * kWeightBits));
      }
    }
  }
}
}  // namespace

Image resize_bilinear(const Image& image, CropBox box, int64_t h, int64_t w) {
  check_image(image, "resize");
  TD_CHECK(h > 0 && w > 0, "resize: bad output size ", h, "x", w);
  TD_CHECK(box.top >= 0 && box.left >= 0 && box.height > 0 && box.width > 0 && box.top + box.height <= image.height &&
               box.left + box.width <= image.width,
           "resize: box ", box.height, "x", box.width, " at (", box.top, ", ", box.left, ") is outside the ",
           image.height, "x", image.width, " image");
  const int64_t c = image.channels;
  Taps ty = make_taps(box.top, box.height, h, image.width * c), tx = make_taps(box.left, box.width, w, c);
  Image out = blank(h, w, c);
  if (c == 3)
    resize_rows<3>(image, ty, tx, out);
  else if (c == 1)
    resize_rows<1>(image, ty, tx, out);
  else
    TD_THROW(ShapeError, "resize: images with ", c, " channels are not supported (1 or 3)");
  return out;
}

Image resize_bilinear(const Image& image, int64_t h, int64_t w) {
  return resize_bilinear(image, CropBox{0, 0, image.height, image.width}, h, w);
}

Image resize_shorter(const Image& image, int64_t size) {
  TD_CHECK(size > 0, "resize: bad size ", size);
  check_image(image, "resize");
  if (image.height <= image.width) {
    int64_t w = std::max<int64_t>(1, size * image.width / image.height);
    return resize_bilinear(image, size, w);
  }
  int64_t h = std::max<int64_t>(1, size * image.height / image.width);
  return resize_bilinear(image, h, size);
}

Image center_crop(const Image& image, int64_t h, int64_t w) {
  check_image(image, "center_crop");
  TD_CHECK(h > 0 && w > 0, "center_crop: bad size ", h, "x", w);
  // torchvision: top = round((H - h) / 2), halves to even; a smaller image is padded, the extra pixel of an
  // odd padding going to the bottom/right.
  auto offset = [](int64_t in, int64_t out) {
    if (in >= out) return static_cast<int64_t>(std::nearbyint(static_cast<double>(in - out) / 2.0));
    return -((out - in) / 2);
  };
  return window(image, offset(image.height, h), offset(image.width, w), h, w);
}

CropBox sample_resized_crop_box(int64_t height, int64_t width, double scale_min, double scale_max, double ratio_min,
                                double ratio_max, Generator& gen) {
  TD_CHECK(height > 0 && width > 0, "random resized crop of an empty image");
  TD_CHECK(0 < scale_min && scale_min <= scale_max && scale_max <= 1.0, "random resized crop: scale range [", scale_min,
           ", ", scale_max, "] must lie in (0, 1]");
  TD_CHECK(0 < ratio_min && ratio_min <= ratio_max, "random resized crop: bad ratio range [", ratio_min, ", ",
           ratio_max, "]");
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_lo = std::log(ratio_min), log_hi = std::log(ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    double target = area * (scale_min + (scale_max - scale_min) * gen.uniform());
    double aspect = std::exp(log_lo + (log_hi - log_lo) * gen.uniform());
    int64_t w = round_half_even(std::sqrt(target * aspect));
    int64_t h = round_half_even(std::sqrt(target / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      CropBox box;
      box.height = h;
      box.width = w;
      box.top = random_int(gen, height - h + 1);
      box.left = random_int(gen, width - w + 1);
      return box;
    }
  }
  double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  CropBox box{0, 0, height, width};
  if (in_ratio < ratio_min) {
    box.height = std::max<int64_t>(1, round_half_even(static_cast<double>(width) / ratio_min));
  } else if (in_ratio > ratio_max) {
    box.width = std::max<int64_t>(1, round_half_even(static_cast<double>(height) * ratio_max));
  }
  box.top = (height - box.height) / 2;
  box.left = (width - box.width) / 2;
  return box;
}

namespace {
// Per channel, the 256 outputs (v / 255 - mean) / std in f32, the arithmetic of ToTensor and Normalize.
std::vector<float> normalize_table(const std::vector<float>& mean, const std::vector<float>& std) {
  std::vector<float> table(mean.size() * 256);
  for (size_t k = 0; k < mean.size(); ++k) {
    TD_CHECK(std[k] > 0, "normalize: std of channel ", k, " must be positive, got ", std[k]);
    for (int v = 0; v < 256; ++v) table[k * 256 + v] = (static_cast<float>(v) / 255.0f - mean[k]) / std[k];
  }
  return table;
}

// table_stride: 256 for a table per channel, 0 for one table shared by all channels. `flip` mirrors the
// columns on the way (a horizontal flip fused into the conversion).
void write_chw(const Image& image, const float* table, int64_t table_stride, bool flip, float* out) {
  const int64_t c = image.channels, h = image.height, w = image.width;
  for (int64_t k = 0; k < c; ++k) {
    const float* t = table + k * table_stride;
    for (int64_t y = 0; y < h; ++y) {
      const uint8_t* src = image.hwc.data() + y * w * c + k;
      float* dst = out + (k * h + y) * w;
      if (flip) {
        for (int64_t x = 0; x < w; ++x) dst[w - 1 - x] = t[src[x * c]];
      } else {
        for (int64_t x = 0; x < w; ++x) dst[x] = t[src[x * c]];
      }
    }
  }
}
}  // namespace

void to_normalized_chw(const Image& image, const std::vector<float>& mean, const std::vector<float>& std, float* out) {
  check_image(image, "normalize");
  TD_CHECK(static_cast<int64_t>(mean.size()) == image.channels && static_cast<int64_t>(std.size()) == image.channels,
           "normalize: ", mean.size(), " means and ", std.size(), " stds for a ", image.channels, "-channel image");
  write_chw(image, normalize_table(mean, std).data(), 256, false, out);
}

void cutout(float* chw, int64_t channels, int64_t height, int64_t width, int64_t size, Generator& gen) {
  TD_CHECK(size > 0, "cutout: bad size ", size);
  int64_t cy = random_int(gen, height), cx = random_int(gen, width);
  int64_t y0 = std::max<int64_t>(0, cy - size / 2), y1 = std::min(height, cy - size / 2 + size);
  int64_t x0 = std::max<int64_t>(0, cx - size / 2), x1 = std::min(width, cx - size / 2 + size);
  for (int64_t k = 0; k < channels; ++k)
    for (int64_t y = y0; y < y1; ++y)
      std::fill(chw + (k * height + y) * width + x0, chw + (k * height + y) * width + x1, 0.0f);
}

// ---- Pipeline ----

Pipeline::Pipeline() { normalize({0.0f}, {1.0f}); }

Pipeline& Pipeline::add(const TransformStep& step) {
  steps_.push_back(step);
  return *this;
}

Pipeline& Pipeline::normalize(std::vector<float> mean, std::vector<float> std) {
  TD_CHECK(!mean.empty() && mean.size() == std.size(), "normalize: ", mean.size(), " means but ", std.size(), " stds");
  for (float s : std) TD_CHECK(s > 0, "normalize: std must be positive, got ", s);
  mean_ = std::move(mean);
  std_ = std::move(std);
  table_ = normalize_table(mean_, std_);
  // The statistics' average serves images with another channel count (see the class comment).
  float m = 0, sd = 0;
  for (size_t k = 0; k < mean_.size(); ++k) {
    m += mean_[k];
    sd += std_[k];
  }
  gray_table_ = normalize_table({m / static_cast<float>(mean_.size())}, {sd / static_cast<float>(std_.size())});
  return *this;
}

Pipeline& Pipeline::cutout(int64_t size) {
  TD_CHECK(size > 0, "cutout: size must be positive, got ", size);
  cutout_ = size;
  return *this;
}

Shape Pipeline::output_shape(int64_t height, int64_t width, int64_t channels) const {
  int64_t h = height, w = width;
  for (const TransformStep& s : steps_) {
    switch (s.kind) {
      case StepKind::RandomCrop:
        if (s.height > 0) {
          h = s.height;
          w = s.width;
        }
        break;
      case StepKind::RandomResizedCrop:
      case StepKind::CenterCrop:
        h = s.height;
        w = s.width;
        break;
      case StepKind::Resize:
        if (s.width > 0) {
          h = s.height;
          w = s.width;
        } else if (h <= w) {
          w = std::max<int64_t>(1, s.height * w / h);
          h = s.height;
        } else {
          h = std::max<int64_t>(1, s.height * h / w);
          w = s.height;
        }
        break;
      case StepKind::HorizontalFlip: break;
    }
  }
  return {channels, h, w};
}

void Pipeline::apply(const Image& image, Generator& gen, float* out) const {
  check_image(image, "transform input");
  const Image* cur = &image;
  Image tmp;
  // A drawn flip is deferred to the next geometric step, or to the final conversion, which mirrors for free.
  bool flip = false;
  for (const TransformStep& s : steps_) {
    if (s.kind == StepKind::HorizontalFlip) {
      if (gen.uniform() < s.p) flip = !flip;
      continue;
    }
    if (flip) {
      tmp = hflip(*cur);
      cur = &tmp;
      flip = false;
    }
    switch (s.kind) {
      case StepKind::RandomCrop: {
        int64_t h = s.height > 0 ? s.height : cur->height, w = s.width > 0 ? s.width : cur->width;
        tmp = random_crop(*cur, h, w, s.padding, gen);
        break;
      }
      case StepKind::RandomResizedCrop: {
        CropBox box =
            sample_resized_crop_box(cur->height, cur->width, s.scale_min, s.scale_max, s.ratio_min, s.ratio_max, gen);
        tmp = resize_bilinear(*cur, box, s.height, s.width);
        break;
      }
      case StepKind::HorizontalFlip:  // handled above
        break;
      case StepKind::Resize:
        tmp = s.width > 0 ? resize_bilinear(*cur, s.height, s.width) : resize_shorter(*cur, s.height);
        break;
      case StepKind::CenterCrop: tmp = center_crop(*cur, s.height, s.width); break;
    }
    cur = &tmp;
  }
  const int64_t c = cur->channels;
  if (static_cast<int64_t>(mean_.size()) == c) {
    write_chw(*cur, table_.data(), 256, flip, out);
  } else if (mean_.size() == 1 || (mean_.size() == 3 && c == 1)) {
    write_chw(*cur, gray_table_.data(), 0, flip, out);
  } else {
    TD_THROW(ShapeError, "normalize: ", mean_.size(), "-channel statistics for a ", c, "-channel image");
  }
  if (cutout_ > 0) data::cutout(out, c, cur->height, cur->width, cutout_, gen);
}

std::string Pipeline::describe() const {
  std::ostringstream os;
  const char* sep = "";
  for (const TransformStep& s : steps_) {
    os << sep;
    sep = ", ";
    switch (s.kind) {
      case StepKind::RandomCrop:
        os << "random-crop " << (s.height > 0 ? std::to_string(s.height) + "x" + std::to_string(s.width) : "same")
           << " pad " << s.padding;
        break;
      case StepKind::RandomResizedCrop:
        os << "random-resized-crop " << s.height << "x" << s.width << " scale " << s.scale_min << "-" << s.scale_max
           << " ratio " << s.ratio_min << "-" << s.ratio_max;
        break;
      case StepKind::HorizontalFlip: os << "flip p=" << s.p; break;
      case StepKind::Resize:
        if (s.width > 0)
          os << "resize " << s.height << "x" << s.width;
        else
          os << "resize shorter side " << s.height;
        break;
      case StepKind::CenterCrop: os << "center-crop " << s.height << "x" << s.width; break;
    }
  }
  os << sep << "normalize mean";
  for (float m : mean_) os << " " << m;
  os << " std";
  for (float s : std_) os << " " << s;
  if (cutout_ > 0) os << ", cutout " << cutout_;
  return os.str();
}

// ---- Spec parsing ----

namespace {

constexpr int64_t kMaxPixels = 999999;  // sizes, padding and cutout

// "S" or "HxW".
void read_size(const SpecReader& r, const std::string& text, int64_t& h, int64_t& w) {
  const size_t x = text.find('x');
  if (x == std::string::npos) {
    h = w = r.integer("size", text, 1, kMaxPixels);
  } else {
    h = r.integer("size", text.substr(0, x), 1, kMaxPixels);
    w = r.integer("size", text.substr(x + 1), 1, kMaxPixels);
  }
}

// "A-B" (A may be negative: the dash is one after its first character).
void read_range(const SpecReader& r, const std::string& key, const std::string& text, double& lo, double& hi) {
  const size_t dash = text.find('-', 1);
  if (dash == std::string::npos) r.not_a(key, text, "a range A-B");
  lo = r.finite(key, text.substr(0, dash));
  hi = r.finite(key, text.substr(dash + 1));
}

// "a/b/c", each a float.
std::vector<float> read_floats(const SpecReader& r, const std::string& key, const std::string& text) {
  std::vector<float> v;
  for (const std::string& part : r.items(text, '/'))
    v.push_back(static_cast<float>(r.finite(key, part, -FLT_MAX, FLT_MAX)));
  return v;
}

struct NamedStats {
  const char* name;
  std::vector<float> mean, std;
};
const std::vector<NamedStats>& known_stats() {
  static const std::vector<NamedStats> stats = {
      {"cifar10", {0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}},
      {"cifar100", {0.5071f, 0.4865f, 0.4409f}, {0.2673f, 0.2564f, 0.2762f}},
      {"imagenet", {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}},
      {"fashion-mnist", {0.2860f}, {0.3530f}},
      {"mnist", {0.1307f}, {0.3081f}},
  };
  return stats;
}

const char* const kPresets[][2] = {
    {"none", ""},
    {"cifar-train", "random-crop:pad=4,flip,normalize:cifar10"},
    {"cifar-eval", "normalize:cifar10"},
    {"imagenet-train", "random-resized-crop:size=224,flip,normalize:imagenet"},
    {"imagenet-eval", "resize:size=256,center-crop:size=224,normalize:imagenet"},
};

void parse_item(const std::string& item, Pipeline& p) {
  const SpecReader r("transform", item);
  const std::string name = r.name();
  for (const auto& preset : kPresets) {
    if (name == preset[0]) {
      if (r.has_rest()) r.fail("preset '", name, "' takes no arguments");
      for (const std::string& sub : SpecReader("transform preset", preset[1]).items(preset[1], ',')) parse_item(sub, p);
      return;
    }
  }
  SpecKeys keys(r, ':');
  // The text of `key` ("" when absent), and whether a step that needs it has it (once every key is read).
  auto text = [&](const char* key) { return keys.text(key, ""); };
  auto require = [&](const char* key) {
    if (!keys.has(key)) r.fail("needs ", key, "=...");
  };
  TransformStep s;
  if (name == "random-crop") {
    s.kind = StepKind::RandomCrop;
    const std::string size = text("size");
    s.padding = keys.integer("pad", 0, 0, kMaxPixels);
    keys.finish();
    if (keys.has("size")) read_size(r, size, s.height, s.width);
    p.add(s);
  } else if (name == "random-resized-crop") {
    s.kind = StepKind::RandomResizedCrop;
    const std::string size = text("size"), scale = text("scale"), ratio = text("ratio");
    keys.finish();
    require("size");
    read_size(r, size, s.height, s.width);
    if (keys.has("scale")) read_range(r, "scale", scale, s.scale_min, s.scale_max);
    if (keys.has("ratio")) read_range(r, "ratio", ratio, s.ratio_min, s.ratio_max);
    if (!(0 < s.scale_min && s.scale_min <= s.scale_max && s.scale_max <= 1))
      r.fail("scale must be a range within (0, 1]");
    if (!(0 < s.ratio_min && s.ratio_min <= s.ratio_max)) r.fail("bad ratio range");
    p.add(s);
  } else if (name == "flip") {
    s.kind = StepKind::HorizontalFlip;
    s.p = keys.finite("p", s.p, 0, 1);
    keys.finish();
    p.add(s);
  } else if (name == "resize" || name == "center-crop") {
    s.kind = name == "resize" ? StepKind::Resize : StepKind::CenterCrop;
    const std::string size = text("size");
    keys.finish();
    require("size");
    read_size(r, size, s.height, s.width);
    if (name == "resize" && size.find('x') == std::string::npos) s.width = 0;  // shorter side
    p.add(s);
  } else if (name == "normalize") {
    const std::string stats_name = keys.take_positional();
    std::vector<float> mean, std;
    if (!stats_name.empty()) {
      for (const NamedStats& ns : known_stats())
        if (stats_name == ns.name) {
          mean = ns.mean;
          std = ns.std;
        }
      if (mean.empty())
        r.fail("unknown statistics '", stats_name, "' (known: cifar10, cifar100, imagenet, fashion-mnist, mnist)");
    }
    const std::string mean_text = text("mean"), std_text = text("std");
    if (keys.has("mean")) mean = read_floats(r, "mean", mean_text);
    if (keys.has("std")) std = read_floats(r, "std", std_text);
    keys.finish();
    if (mean.empty() || mean.size() != std.size())
      r.fail("needs statistics (e.g. normalize:imagenet or normalize:mean=0.5/0.5/0.5:std=0.25/0.25/0.25)");
    p.normalize(mean, std);
  } else if (name == "cutout") {
    const int64_t size = keys.integer("size", 0, 1, kMaxPixels);
    keys.finish();
    if (size == 0) r.fail("needs size=S");
    p.cutout(size);
  } else {
    r.fail("unknown transform '", name,
           "' (presets: none, cifar-train, cifar-eval, imagenet-train, imagenet-eval; steps: random-crop, "
           "random-resized-crop, flip, resize, center-crop, normalize, cutout)");
  }
}

}  // namespace

Pipeline Pipeline::parse(const std::string& spec) {
  Pipeline p;
  for (const std::string& item : SpecReader("transform spec", spec).items(spec, ',')) parse_item(item, p);
  return p;
}

}  // namespace data
}  // namespace tandem
