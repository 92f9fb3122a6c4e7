// tools:pack: writes any dataset open_dataset reads into .tdrec shards (format: data/record_file.h).
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/file_io.h"
#include "data/image_codec.h"
#include "data/image_folder.h"
#include "data/record_file.h"
#include "data/split.h"
#include "runtime/base/error.h"
#include "runtime/progress/progress.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace {

struct Args {
  std::string input, output, split = "train";
  int64_t shards = 0;
  int64_t shard_mb = 256;
};

Args parse(int argc, char** argv) {
  Args a;
  flags::Parser p(
      "pack", "pack --input SPEC --output PREFIX [--split train|test] [--shards N | --shard-mb MB]",
      "Writes the dataset SPEC (any spec open_dataset reads, e.g. folder:DIR, cifar10:DIR, fashion-mnist,\n"
      "synthetic:n=1000) as record shards PREFIX-00000-of-0000N.tdrec. Image folders keep their JPEG/PNG bytes\n"
      "(each is decoded once to check it); other datasets are stored as raw 8-bit pixels. Read the result with\n"
      "the dataset spec packed:PREFIX (or packed:DIR for PREFIXes DIR/train and DIR/val).");
  p.text("--input", "SPEC", &a.input, "the dataset to pack");
  p.text("--output", "PREFIX", &a.output, "path prefix of the shard files (its directory must exist)");
  p.text("--split", "S", &a.split, "train (default) or test: which split of SPEC to read");
  p.integer("--shards", "N", &a.shards, "number of shards (default: by size, see --shard-mb)", 1);
  p.integer("--shard-mb", "MB", &a.shard_mb, "target shard size in MiB when --shards is not given (default 256)", 1);
  p.parse(argc, argv);
  if (a.input.empty()) p.fail("--input is required");
  if (a.output.empty()) p.fail("--output is required");
  if (a.split != "train" && a.split != "test") p.fail("--split must be train or test, got '" + a.split + "'");
  return a;
}

int run(const Args& a) {
  const bool train = a.split == "train";
  std::shared_ptr<data::Dataset> ds = data::open_dataset(a.input, train);
  // Image folders are packed from their files' bytes; everything else from decoded pixels.
  auto folder = std::dynamic_pointer_cast<data::ImageFolder>(ds);
  const int64_t n = ds->size();
  TD_CHECK(n > 0, ds->describe(), " is empty: nothing to pack");
  int64_t shards = a.shards;
  if (shards == 0) {
    double total = 0;
    if (folder) {
      for (int64_t i = 0; i < n; ++i) total += static_cast<double>(data::RandomAccessFile(folder->path(i)).size());
    } else {
      data::Sample s = ds->get(0);
      total = static_cast<double>(s.image.hwc.size()) * static_cast<double>(n);
    }
    shards = std::max<int64_t>(1, static_cast<int64_t>(total / (static_cast<double>(a.shard_mb) * 1048576.0)) + 1);
  }
  shards = std::min(shards, n);
  std::printf("packing %s into %lld shard(s) %s\n", ds->describe().c_str(), static_cast<long long>(shards),
              data::shard_path(a.output, 0, shards).c_str());
  const std::vector<std::string> names = folder ? folder->classes() : std::vector<std::string>{};
  uint64_t bytes = 0;
  ProgressTask task;
  task.label = "packing";
  task.unit = "record";
  task.total = n;
  auto live = std::make_unique<Progress>(task);
  for (int64_t k = 0; k < shards; ++k) {
    const data::RowRange rows = data::rows_for(k, shards, n);
    const std::string path = data::shard_path(a.output, k, shards);
    data::RecordWriter w(path, static_cast<uint32_t>(k), static_cast<uint32_t>(shards),
                         static_cast<uint32_t>(ds->num_classes()), names);
    for (int64_t i = rows.begin; i < rows.end(); ++i) {
      if (folder) {
        std::vector<uint8_t> file = data::read_file(folder->path(i));
        data::Image im = data::decode_image(file.data(), file.size(), 3, folder->path(i));
        auto enc = data::sniff_image_format(file.data(), file.size()) == data::ImageFormat::Jpeg
                       ? data::RecordEncoding::Jpeg
                       : data::RecordEncoding::Png;
        w.add(file.data(), file.size(), folder->label(i), im.height, im.width, 3, enc);
      } else {
        data::Sample s = ds->get(i);
        w.add(s.image, s.label);
      }
      live->step();
    }
    w.finish();
    bytes += w.bytes();
    live->print_above([&] {
      std::printf("  %s: %lld records\n", path.c_str(), static_cast<long long>(rows.count));
      std::fflush(stdout);
    });
  }
  live.reset();  // its line erased before the summary
  std::printf("wrote %lld records, %.1f MiB\n", static_cast<long long>(n), static_cast<double>(bytes) / 1048576.0);
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  tandem::Args args = tandem::parse(argc, argv);
  return tandem::flags::run_reporting_errors("pack", [&] { return tandem::run(args); });
}
