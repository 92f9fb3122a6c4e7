// The fuzzed readers: inputs written to files and read through IDX, CIFAR, image folder, packed records,
// safetensors and checkpoint loading, or read as specs; and their seed inputs.
#include "tests/fuzz/fuzz_readers.h"

#include <zlib.h>

#include <algorithm>
#include <memory>

#include "data/cifar.h"
#include "data/idx.h"
#include "data/image_codec.h"
#include "data/image_folder.h"
#include "data/record_file.h"
#include "data/synthetic.h"
#include "data/transforms.h"
#include "models/checkpoint.h"
#include "models/layers.h"
#include "models/registry.h"
#include "models/sequential.h"
#include "runtime/base/error.h"
#include "runtime/base/spec_reader.h"
#include "runtime/formats/safetensors.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"
#include "tests/data_loading/dataset_files.h"

namespace tandem {
namespace fuzz {
namespace {

using Bytes = std::vector<uint8_t>;

// Samples read per input: enough to reach every record of a small file, few enough to keep runs fast.
constexpr int64_t kMaxSamples = 64;

// A directory of this process's own for the files an input becomes.
const std::string& work_dir() {
  static const std::string dir = testdata::make_temp_dir("tandem-fuzz");
  return dir;
}

void read_samples(const data::Dataset& ds) {
  for (int64_t i = 0; i < std::min(ds.size(), kMaxSamples); ++i) ds.get(i);
}

uint32_t get32(const Bytes& b, size_t at) {
  return static_cast<uint32_t>(b[at]) | static_cast<uint32_t>(b[at + 1]) << 8 | static_cast<uint32_t>(b[at + 2]) << 16 |
         static_cast<uint32_t>(b[at + 3]) << 24;
}
uint64_t get64(const Bytes& b, size_t at) { return get32(b, at) | static_cast<uint64_t>(get32(b, at + 4)) << 32; }
void put32(Bytes& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t crc_of(const Bytes& b, uint64_t begin, uint64_t end) {
  return static_cast<uint32_t>(::crc32(0, b.data() + begin, static_cast<uInt>(end - begin)));
}

// The shard with every checksum that can be located made to match (see data/record_file.h for the layout).
Bytes with_valid_checksums(Bytes b) {
  if (b.size() < 48) return b;
  put32(b, 44, crc_of(b, 0, 44));
  const uint64_t records = get64(b, 24), index = get64(b, 32);
  if (index < 48 || index > b.size() - 4) return b;
  for (uint64_t i = 0; i < records && i < (b.size() - 4 - index) / 32; ++i) {
    const size_t entry = static_cast<size_t>(index + 32 * i);
    const uint64_t offset = get64(b, entry), length = get32(b, entry + 8);
    if (offset <= index && length <= index - offset) put32(b, entry + 12, crc_of(b, offset, offset + length));
  }
  put32(b, b.size() - 4, crc_of(b, index, b.size() - 4));
  return b;
}

void read_idx(const Bytes& in) {
  const size_t label_len = in.size() < 2 ? 0 : std::min<size_t>(in[0] | in[1] << 8, in.size() - 2);
  const size_t split = std::min<size_t>(in.size(), 2 + label_len);
  const std::string images = work_dir() + "/images-idx3-ubyte", labels = work_dir() + "/labels-idx1-ubyte";
  testdata::write_file(labels, Bytes(in.begin() + std::min<size_t>(2, in.size()), in.begin() + split));
  testdata::write_file(images, Bytes(in.begin() + split, in.end()));
  read_samples(*data::open_idx(images, labels, "fuzz idx"));
}

void read_cifar(const Bytes& in) {
  const bool ten = in.size() % 3073 == 0;
  const std::string dir = work_dir() + (ten ? "/cifar10" : "/cifar100");
  static bool made = false;
  if (!made) {
    testdata::make_dir(work_dir() + "/cifar10");
    testdata::make_dir(work_dir() + "/cifar100");
    made = true;
  }
  testdata::write_file(dir + (ten ? "/test_batch.bin" : "/test.bin"), in);
  read_samples(*(ten ? data::open_cifar10(dir, false) : data::open_cifar100(dir, false)));
}

void read_image(const Bytes& in) {
  const std::string root = work_dir() + "/folder";
  static bool made = false;
  if (!made) {
    testdata::make_dir(root);
    testdata::make_dir(root + "/c");
    made = true;
  }
  testdata::write_file(root + "/c/x.png", in);
  read_samples(*data::open_image_folder(root, true));
  data::decode_image(in.data(), in.size(), 0, "fuzz image");
}

void read_packed(const Bytes& in) {
  const std::string path = work_dir() + "/x.tdrec";
  testdata::write_file(path, in);
  try {
    read_samples(*data::open_packed(path, true));
  } catch (const Error&) {
  }
  testdata::write_file(path, with_valid_checksums(in));
  read_samples(*data::open_packed(path, true));
}

// The network, optimizer and scheduler a checkpoint input is loaded into (built once; loading is checked
// before anything changes, and a half-loaded state is still a valid one to load into).
struct Training {
  std::shared_ptr<models::Sequential> model = std::make_shared<models::Sequential>();
  std::unique_ptr<optim::Adam> optimizer;
  std::unique_ptr<optim::LrScheduler> scheduler;
  Training() {
    Generator gen(7);
    models::Conv2dSpec conv;
    conv.in_channels = 1;
    conv.out_channels = 2;
    conv.kernel = 3;
    conv.padding = 1;
    model->add(std::make_shared<models::Conv2d>(conv, gen));
    model->add(std::make_shared<models::BatchNorm2d>(2));
    model->add(std::make_shared<models::Dropout>(0.5, 11));
    model->add(std::make_shared<models::Flatten>());
    model->add(std::make_shared<models::Linear>(2 * 3 * 3, 3, true, gen));
    optimizer = std::make_unique<optim::Adam>(optim::single_group(model->named_parameters()), optim::AdamOptions());
    scheduler = std::make_unique<optim::LrScheduler>(*optimizer, optim::cosine_lr(10));
  }
  void step() {
    Generator gen(3);
    optimizer->zero_grad();
    mean(model->forward(randn({2, 1, 3, 3}, gen))).backward();
    optimizer->step();
    scheduler->step();
  }
};

Training& training() {
  static Training t;
  return t;
}

void read_checkpoint(const Bytes& in) {
  const std::string path = work_dir() + "/checkpoint.safetensors";
  testdata::write_file(path, in);
  Training& t = training();
  models::load_checkpoint(path, *t.model, t.optimizer.get(), t.scheduler.get());
}

void read_safetensors(const Bytes& in) {
  const std::string path = work_dir() + "/x.safetensors";
  testdata::write_file(path, in);
  load_safetensors(path);
}

// The spec reader with every getter, then the grammars built on it (runtime/base/spec_reader.h).
enum SpecGrammar { kReader, kModel, kSynthetic, kTransforms, kSchedule, kGrammars };

void read_spec_with_every_getter(const std::string& text) {
  const SpecReader r("fuzz spec", text);
  r.name();
  SpecKeys keys(r, ',');
  const std::string list = keys.take_positional();
  for (const std::string& item : r.items(list, '/')) r.integer("item", item, -1000, 1000);
  keys.flag("f", false);
  keys.integer("i", 0, -5, 5);
  keys.integer("n", 0);
  keys.finite("x", 0, 0, 1);
  keys.finite("y", 0);
  keys.text("t", "");
  keys.choice<int>("c", 0, {{"a", 1}, {"b", 2}});
  keys.finish();
}

void read_spec(const Bytes& in) {
  if (in.empty()) TD_THROW(ValueError, "fuzz spec: no grammar byte");
  const std::string text(in.begin() + 1, in.end());
  switch (in[0] % kGrammars) {
    case kReader: read_spec_with_every_getter(text); break;
    case kModel: models::parse_model_spec(text); break;
    case kSynthetic: data::parse_synthetic_options(text); break;
    case kTransforms: data::Pipeline::parse(text).describe(); break;
    case kSchedule: {
      optim::LrSchedulePtr s = optim::parse_lr_schedule(text, 100, 1000);
      for (int64_t step : {0, 1, 99, 100, 999, 5000}) s->factor(step);
      s->describe();
      break;
    }
  }
}

Bytes spec_bytes(SpecGrammar grammar, const std::string& text) {
  Bytes b(text.size() + 1, static_cast<uint8_t>(grammar));
  std::copy(text.begin(), text.end(), b.begin() + 1);
  return b;
}

Bytes file_bytes(const std::string& path) { return testdata::read_bytes(path); }

}  // namespace

const std::vector<std::string>& reader_names() {
  static const std::vector<std::string> names = {"idx",         "cifar",      "image", "packed",
                                                 "safetensors", "checkpoint", "spec"};
  return names;
}

Outcome read_input(const std::string& reader, const uint8_t* data, size_t size) {
  const Bytes in(data, data + size);
  Outcome out;
  try {
    if (reader == "idx")
      read_idx(in);
    else if (reader == "cifar")
      read_cifar(in);
    else if (reader == "image")
      read_image(in);
    else if (reader == "packed")
      read_packed(in);
    else if (reader == "safetensors")
      read_safetensors(in);
    else if (reader == "checkpoint")
      read_checkpoint(in);
    else if (reader == "spec")
      read_spec(in);
    else
      TD_THROW(InternalError, "fuzz: unknown reader '", reader, "'");
    out.accepted = true;
  } catch (const InternalError&) {
    throw;  // a broken invariant is a bug, not an answer to bad input
  } catch (const Error& e) {
    out.error = e.what();
  }
  return out;
}

std::vector<std::pair<std::string, Bytes>> seed_inputs(const std::string& reader) {
  std::vector<std::pair<std::string, Bytes>> seeds;
  if (reader == "idx") {
    Bytes labels = testdata::idx_labels({1, 9});
    Bytes images = testdata::idx_images(2, 3, 4, Bytes(24, 200));
    Bytes in = {static_cast<uint8_t>(labels.size()), 0};
    in.insert(in.end(), labels.begin(), labels.end());
    in.insert(in.end(), images.begin(), images.end());
    seeds.emplace_back("two-3x4", in);
  } else if (reader == "cifar") {
    Bytes ten(3073, 77), hundred(3074, 66);
    ten[0] = 9;
    hundred[0] = 19;
    hundred[1] = 99;
    seeds.emplace_back("cifar10-one", ten);
    seeds.emplace_back("cifar100-one", hundred);
  } else if (reader == "image" || reader == "packed") {
    const data::Image color = testdata::smooth_image(5, 6, 3, 1), gray = testdata::smooth_image(4, 3, 1, 2);
    if (reader == "image") {
      seeds.emplace_back("color.png", testdata::encode_png(color));
      seeds.emplace_back("gray.png", testdata::encode_png(gray));
      seeds.emplace_back("color.jpg", testdata::encode_jpeg(color, 90));
      seeds.emplace_back("gray.jpg", testdata::encode_jpeg(gray, 90));
    } else {
      const std::string path = work_dir() + "/seed.tdrec";
      {
        data::RecordWriter w(path, 0, 1, 3, {"a", "b", "c"});
        w.add(gray, 2);
        Bytes png = testdata::encode_png(color), jpg = testdata::encode_jpeg(gray, 90);
        w.add(png.data(), png.size(), 0, color.height, color.width, 3, data::RecordEncoding::Png);
        w.add(jpg.data(), jpg.size(), 1, gray.height, gray.width, 1, data::RecordEncoding::Jpeg);
        w.finish();
      }
      seeds.emplace_back("three-records", file_bytes(path));
    }
  } else if (reader == "safetensors") {
    const std::string path = work_dir() + "/seed.safetensors";
    Generator gen(5);
    save_safetensors(path,
                     {{"w", randn({2, 3}, gen)},
                      {"steps", full({2}, 4.0, TensorOptions(DType::I64))},
                      {"none", zeros({0, 4}, TensorOptions(DType::U8))}},
                     {{"format", "pt"}});
    seeds.emplace_back("three-tensors", file_bytes(path));
  } else if (reader == "checkpoint") {
    const std::string path = work_dir() + "/seed.safetensors";
    Training& t = training();
    t.step();
    models::save_checkpoint(path, *t.model, t.optimizer.get(), t.scheduler.get(), {{"epoch", "1"}});
    seeds.emplace_back("after-one-step", file_bytes(path));
  } else if (reader == "spec") {
    const std::pair<SpecGrammar, const char*> specs[] = {
        {kReader, "name:1/-2/3,f,i=-5,n=123,x=0.5,y=-1e3,t=abc,c=b"},
        {kReader, "name"},
        {kModel, "resnet18:cifar,width=16,classes=10,dropout=0.1,seed=3"},
        {kModel, "mobilenet_v2:width_mult=0.5,supernet=2,image=32,separable=0"},
        {kSynthetic, "synthetic:n=64,h=8,w=8,c=1,classes=3,seed=1,noise=9"},
        {kTransforms, "cifar-train,cutout:size=16"},
        {kTransforms,
         "random-resized-crop:size=224:scale=0.08-1:ratio=0.75-1.33,flip:p=0.5,normalize:mean=0.5/0.5/"
         "0.5:std=0.2/0.2/0.2,resize:size=8x9,center-crop:size=4"},
        {kSchedule, "warmup:0.5:0.1+cosine:0.01"},
        {kSchedule, "multistep:1,2.5:0.5"},
        {kSchedule, "step:2"},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; ++i)
      seeds.emplace_back("spec-" + std::to_string(i), spec_bytes(specs[i].first, specs[i].second));
  }
  return seeds;
}

}  // namespace fuzz
}  // namespace tandem
