// Loader throughput: images/s through the real readers, transforms and worker threads, with the per-image cost
// of each stage measured on one thread in the same run (what bounds the loader).
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/load_average.h"
#include "data/dataset.h"
#include "data/image_codec.h"
#include "data/loader.h"
#include "data/record_file.h"
#include "data/transforms.h"
#include "runtime/base/philox.h"
#include "tests/data_loading/dataset_files.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// CPU seconds used by this process so far (all threads).
double cpu_s() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

struct Rate {
  double images_per_s;
  double cores_used;  // CPU seconds per wall second while measuring
};

// Images/s of `loader` over `batches` batches after one warm-up batch.
Rate loader_rate(data::Loader& loader, int64_t batches) {
  auto first = loader.next();
  int64_t images = 0;
  double t0 = now_s(), c0 = cpu_s();
  for (int64_t b = 0; b < batches; ++b) {
    auto batch = loader.next();
    if (!batch) batch = loader.next();  // epoch boundary
    images += batch->images.size(0);
  }
  double wall = now_s() - t0;
  return {static_cast<double>(images) / wall, (cpu_s() - c0) / wall};
}

// CPU seconds used by the calling thread: stage costs in CPU time do not grow when other processes share the
// cores, as wall time does.
double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// CPU microseconds per call of fn, over `n` calls.
template <typename Fn>
double per_call_us(int64_t n, Fn fn) {
  double t0 = thread_cpu_s();
  for (int64_t i = 0; i < n; ++i) fn(i);
  return (thread_cpu_s() - t0) / static_cast<double>(n) * 1e6;
}

// Temp directories this run made, removed at its end.
std::vector<std::string> temp_dirs;

std::string temp_dir(const std::string& tag) {
  temp_dirs.push_back(testdata::make_temp_dir(tag));
  return temp_dirs.back();
}

// A CIFAR-10 test_batch.bin of n random records in a temp dir.
std::string write_cifar(int64_t n) {
  std::string dir = temp_dir("bench-cifar");
  std::vector<uint8_t> bytes(static_cast<size_t>(n * 3073));
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(philox::generate(7, i / 4).x[i % 4]);
  for (int64_t r = 0; r < n; ++r) bytes[r * 3073] %= 10;
  testdata::write_file(dir + "/test_batch.bin", bytes);
  return dir;
}

// A one-shard .tdrec of n JPEGs of h x w (quality 90), as tools:pack writes image folders; `first` gets the
// bytes of record 0.
std::string write_jpeg_shard(int64_t n, int64_t h, int64_t w, std::vector<uint8_t>& first) {
  std::string path = temp_dir("bench-jpeg") + "/train-00000-of-00001.tdrec";
  data::RecordWriter writer(path, 0, 1, 10);
  for (int64_t i = 0; i < n; ++i) {
    data::Image im = testdata::smooth_image(h, w, 3, static_cast<uint64_t>(i));
    // Photographs carry fine detail; add noise so the JPEGs are not unrealistically small.
    for (size_t p = 0; p < im.hwc.size(); ++p)
      im.hwc[p] = static_cast<uint8_t>(std::min(255, im.hwc[p] + static_cast<int>(philox::generate(i, p).x[0] % 24)));
    auto jpg = testdata::encode_jpeg(im, 90);
    if (i == 0) first = jpg;
    writer.add(jpg.data(), jpg.size(), i % 10, h, w, 3, data::RecordEncoding::Jpeg);
  }
  writer.finish();
  return path;
}

struct Row {
  std::string input, transforms;
  int workers;
  Rate rate;
};

void print_rows(const std::vector<Row>& rows) {
  std::printf("%-34s %-16s %8s %12s %11s %16s\n", "input", "transforms", "workers", "images/s", "cores used",
              "images/core-s");
  for (const Row& r : rows)
    std::printf("%-34s %-16s %8d %12.0f %11.2f %16.0f\n", r.input.c_str(), r.transforms.c_str(), r.workers,
                r.rate.images_per_s, r.rate.cores_used, r.rate.images_per_s / r.rate.cores_used);
}

void run() {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::printf("loader benchmark, %u hardware threads, batches on the CPU device, load average %.1f\n\n", cores,
              load_average());
  std::vector<Row> rows;

  // 32x32: CIFAR-10 binary records, random crop (pad 4) + flip + normalize, batch 256.
  auto cifar = data::open_dataset("cifar10:" + write_cifar(10000), false);
  for (int workers : {0, 1, 2, 4}) {
    data::LoaderOptions o;
    o.batch_size = 256;
    o.num_workers = workers;
    o.prefetch = 8;
    data::Loader loader(cifar, data::Pipeline::parse("cifar-train"), o);
    rows.push_back({"cifar10 32x32 (records in memory)", "cifar-train", workers, loader_rate(loader, 400)});
  }

  // ImageNet-like: JPEGs in a .tdrec shard, decode + random resized crop 224 + flip + normalize, batch 64.
  struct JpegCase {
    int64_t h, w;
    std::shared_ptr<data::Dataset> ds;
    std::vector<uint8_t> first_jpeg;
  };
  std::vector<JpegCase> jpeg_cases(2);
  jpeg_cases[0].h = jpeg_cases[0].w = 224;
  jpeg_cases[1].h = 375;
  jpeg_cases[1].w = 500;
  for (JpegCase& jc : jpeg_cases) {
    jc.ds = data::open_dataset("packed:" + write_jpeg_shard(256, jc.h, jc.w, jc.first_jpeg), true);
    const std::string name = "JPEG " + std::to_string(jc.h) + "x" + std::to_string(jc.w) + " (.tdrec)";
    for (int workers : {1, 2}) {
      data::LoaderOptions o;
      o.batch_size = 64;
      o.num_workers = workers;
      o.prefetch = 4;
      data::Loader loader(jc.ds, data::Pipeline::parse("imagenet-train"), o);
      rows.push_back({name, "imagenet-train", workers, loader_rate(loader, 24)});
    }
  }
  print_rows(rows);

  // Per-image cost of each stage on one thread: the loader's ceiling is cores / (sum of stages).
  std::printf("\nper-image CPU time of each stage on one thread (us)\n");
  std::printf("%-34s %10s %10s %10s %14s\n", "input", "read", "decode", "augment", "ceiling img/s");
  {
    data::Pipeline p = data::Pipeline::parse("cifar-train");
    std::vector<float> out(3 * 32 * 32);
    double read = per_call_us(20000, [&](int64_t i) { cifar->get(i % cifar->size()); });
    data::Sample s = cifar->get(0);
    double aug = per_call_us(20000, [&](int64_t i) {
      Generator g = data::sample_generator(1, 0, i);
      p.apply(s.image, g, out.data());
    });
    std::printf("%-34s %10.2f %10s %10.2f %14.0f\n", "cifar10 32x32", read, "-", aug, cores * 1e6 / (read + aug));
  }
  for (const JpegCase& jc : jpeg_cases) {
    data::Pipeline p = data::Pipeline::parse("imagenet-train");
    std::vector<float> out(3 * 224 * 224);
    // get() reads and decodes; the decode alone is timed on one record's bytes already in memory.
    const std::vector<uint8_t>& jpg = jc.first_jpeg;
    double total = per_call_us(200, [&](int64_t i) { jc.ds->get(i % jc.ds->size()); });
    double decode = per_call_us(200, [&](int64_t) { data::decode_image(jpg.data(), jpg.size(), 3, "bench"); });
    data::Sample s = jc.ds->get(0);
    double aug = per_call_us(200, [&](int64_t i) {
      Generator g = data::sample_generator(1, 0, i);
      p.apply(s.image, g, out.data());
    });
    const std::string name = "JPEG " + std::to_string(jc.h) + "x" + std::to_string(jc.w) + " (" +
                             std::to_string(jpg.size() / 1024) + " KiB)";
    std::printf("%-34s %10.1f %10.1f %10.1f %14.0f\n", name.c_str(), total, decode, aug, cores * 1e6 / (total + aug));
  }
  std::printf(
      "\nload average at the end: %.1f. cores used < workers: other processes took the cores (images/s\n"
      "scales with them); images/core-s and the CPU times do not depend on that. ceiling: all %u cores\n"
      "spent on read + augment.\n",
      load_average(), cores);
  std::printf(
      "read: Dataset::get (JPEG rows: pread + CRC + decode of the stored file); decode: libjpeg-turbo on\n"
      "record 0's bytes in memory; augment: the transform pipeline into float CHW.\n");
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  tandem::flags::Parser(
      "loader_bench", "loader_bench",
      "Measures the data loader's images/s with its real readers, transforms and worker threads on files\n"
      "it writes to a temporary folder: CIFAR-10 binary 32x32 with crop+flip+normalize (0, 1, 2 and 4\n"
      "workers; goal >= 20,000 images/s on 2 cores) and packed JPEGs of 224x224 and 375x500 with decode\n"
      "+ random resized crop 224 + flip + normalize; then the per-image CPU time of read, decode and\n"
      "augment on one thread, which bounds the loader. Takes no flags.")
      .parse(argc, argv);
  tandem::run();
  for (const std::string& dir : tandem::temp_dirs) std::filesystem::remove_all(dir);
  return 0;
}
