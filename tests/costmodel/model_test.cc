// The cost model's formulas (model.h) on ops of known counts: memory, reuse through the L2, sync and arithmetic
// bounds of kernels, library calls by kind, copies and collectives by link, launches, SM partitions; the
// modelled GPUs; merging and extrapolating recorded ops; ops as JSON. References are the documented formulas
// written out by hand with the datasheets' numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "runtime/base/error.h"
#include "tests/testing.h"
#include "tools/costmodel/calibration.h"
#include "tools/costmodel/model.h"
#include "tools/costmodel/scaling.h"

namespace tandem {
namespace costmodel {
namespace {

Constants constants() {
  Constants c;
  c.kernel_memory = 0.8;
  c.collective_cycles = 20;
  c.barrier_cycles = 30;
  c.wavefront_cycles = 2;
  c.launch_floor_s = 3e-6;
  c.conv_fwd = 0.5;
  c.conv_bwd = 0.4;
  c.conv_grouped_fwd = 0.05;
  c.conv_grouped_bwd = 0.02;
  c.gemm = 0.7;
  c.library_memory = 0.9;
  c.link = 0.75;
  return c;
}

OpCounts kernel(double blocks, double block_threads) {
  OpCounts k;
  k.kind = OpKind::Kernel;
  k.name = "k";
  k.blocks = blocks;
  k.block_threads = block_threads;
  k.threads = blocks * block_threads;
  return k;
}

TEST(CostModel, GpusAreTheDatasheetsAndTheMeasuredCopies) {
  const GpuSpec& h100 = gpu_spec("h100");
  const GpuSpec& h200 = gpu_spec("h200");
  EXPECT_EQ(h100.hbm_bytes_per_s, 3.35e12);
  EXPECT_EQ(h200.hbm_bytes_per_s, 4.8e12);
  EXPECT_EQ(h200.copy_bytes_per_s, 4271.8e9);  // shared/notes/gpu-run-h200.md
  EXPECT_EQ(h100.tf32_flops, 494.5e12);
  EXPECT_EQ(h200.bf16_flops, h100.bf16_flops);
  EXPECT_EQ(h100.flops_for("tf32"), h100.tf32_flops);
  EXPECT_EQ(h100.flops_for(""), 67e12);
  EXPECT_EQ(h100.nvlink_bytes_per_s, 450e9);
  testing::expect_error<ValueError>([] { gpu_spec("a100"); }, "unknown modelled GPU 'a100' (known: h100, h200)");
}

TEST(CostModel, APartitionGetsItsShareOfEverything) {
  const GpuSpec& g = gpu_spec("h200");
  const GpuSpec p = partition(g, 4);
  EXPECT_EQ(p.sms, 33);
  EXPECT_DOUBLE_EQ(p.copy_bytes_per_s, g.copy_bytes_per_s / 4);
  EXPECT_DOUBLE_EQ(p.tf32_flops, g.tf32_flops / 4);
  EXPECT_DOUBLE_EQ(p.l2_bytes, g.l2_bytes / 4);
  EXPECT_DOUBLE_EQ(p.nvlink_bytes_per_s, g.copy_bytes_per_s / 8);  // a copy inside the GPU reads and writes
  EXPECT_EQ(p.partitions, 4);
  EXPECT_THROW(partition(g, 0), ValueError);
}

TEST(CostModel, AStreamingKernelTakesItsBytesAtTheKernelShareOfTheCopyBandwidth) {
  const GpuSpec& g = gpu_spec("h200");
  std::mt19937_64 rng(testing::fresh_seed());
  OpCounts k = kernel(1056, 256);
  k.distinct_load_sectors = 1e6 + static_cast<double>(rng() % 1000000);
  k.distinct_store_sectors = 5e5;
  k.flops = 1e6;
  const OpTime t = predict(k, g, constants());
  const double bytes = 32 * (k.distinct_load_sectors + k.distinct_store_sectors);
  EXPECT_DOUBLE_EQ(t.dram_bytes, bytes);
  EXPECT_NEAR(t.seconds, bytes / (0.8 * 4271.8e9) + 3e-6, 1e-12);
  EXPECT_EQ(t.bound, "memory");
  // The same on an H100: its measured copy bandwidth (about 3.0 TB/s).
  EXPECT_NEAR(predict(k, gpu_spec("h100"), constants()).seconds, bytes / (0.8 * 3.0e12) + 3e-6, 1e-12);
}

TEST(CostModel, ReloadsCostDeviceMemoryWhenTheResidentBlocksShareOfTheL2CannotHoldThem) {
  const GpuSpec& g = gpu_spec("h200");  // 60 MB of L2, 132 SMs
  // 256-thread blocks: 8 per SM, 1056 resident. Bucket 7 holds distances of 64-128 KiB (taken at 90.5 KiB):
  // 1056 of those exceed 60 MB, so they are reloaded from device memory; bucket 3 (4-8 KiB) fits.
  OpCounts k = kernel(4096, 256);
  k.distinct_load_sectors = 1000;
  k.reuse_load_sectors[7] = 500;
  k.reuse_load_sectors[3] = 700;
  EXPECT_DOUBLE_EQ(predict(k, g, constants()).dram_bytes, 32.0 * 1500);
  // With 64 blocks only (a small grid), each has a larger share: the 90.5 KiB reuses hit too.
  OpCounts small = kernel(64, 256);
  small.distinct_load_sectors = 1000;
  small.reuse_load_sectors[7] = 500;
  EXPECT_DOUBLE_EQ(predict(small, g, constants()).dram_bytes, 32.0 * 1000);
}

TEST(CostModel, SyncBoundKernelsTakeTheirCyclesPerSm) {
  const GpuSpec& g = gpu_spec("h100");
  OpCounts k = kernel(528, 256);
  k.collectives = 1e6;
  k.barriers = 2e4;  // per block: 8 warps arrive each
  k.shared_wavefronts = 3e5;
  k.distinct_load_sectors = 10;
  const double cycles = 1e6 * 20 + 2e4 * 8 * 30 + 3e5 * 2;
  const OpTime t = predict(k, g, constants());
  EXPECT_EQ(t.bound, "sync");
  EXPECT_NEAR(t.seconds, cycles / (132 * 1.98e9) + 3e-6, 1e-12);
}

TEST(CostModel, LaunchesEachPayTheFloor) {
  OpCounts k = kernel(2, 64);
  k.distinct_load_sectors = 1;
  k.launches = 3;
  const OpTime t = predict(k, gpu_spec("h200"), constants());
  EXPECT_EQ(t.bound, "floor");
  EXPECT_NEAR(t.seconds, 3 * (32 / 3.0 / (0.8 * 4271.8e9) + 3e-6), 1e-15);
}

// Launches are asynchronous: ops on one stream take their GPU time while the host launches them faster, and
// the host's host_op_s per launch (merged ops count each of theirs) once it is the slower.
TEST(CostModel, OpsTakeTheLongerOfTheirGpuTimeAndTheHostsLaunches) {
  Constants c = constants();
  c.host_op_s = 20e-6;
  const GpuSpec& g = gpu_spec("h200");
  OpCounts small = kernel(2, 64), large = kernel(1024, 256);
  small.distinct_load_sectors = 1;
  small.launches = 3;
  large.distinct_load_sectors = 1e8;  // 3.2 GB: about a millisecond
  const double small_gpu = 3 * (32 / 3.0 / (0.8 * 4271.8e9) + 3e-6);
  const double large_gpu = 3.2e9 / (0.8 * 4271.8e9) + 3e-6;
  EXPECT_NEAR(gpu_seconds({small, large}, g, c), small_gpu + large_gpu, 1e-12);
  EXPECT_NEAR(host_seconds({small, large}, c), 4 * 20e-6, 1e-15);
  EXPECT_NEAR(host_bound_seconds({small, large}, g, c), small_gpu + large_gpu, 1e-12);
  EXPECT_NEAR(host_bound_seconds({small}, g, c), 3 * 20e-6, 1e-15);
  c.host_op_s = 0;
  EXPECT_NEAR(host_bound_seconds({small}, g, c), small_gpu, 1e-15);
}

OpCounts library(const std::string& op_class, const std::string& precision, double flops, double bytes) {
  OpCounts op;
  op.kind = OpKind::Library;
  op.op_class = op_class;
  op.precision = precision;
  op.flops = flops;
  op.bytes_read = bytes;
  return op;
}

TEST(CostModel, LibraryCallsTakeTheirArithmeticAtTheirKindsEfficiency) {
  const GpuSpec& g = gpu_spec("h100");
  const double flops = 2.0 * 256 * 64 * 64 * 9 * 56 * 56;  // a 3x3 convolution of 64 channels at 56x56, batch 256
  EXPECT_NEAR(predict(library("conv_fwd", "tf32", flops, 1e6), g, constants()).seconds, flops / (0.5 * 494.5e12) + 3e-6,
              1e-12);
  EXPECT_NEAR(predict(library("conv_bwd_data", "tf32", flops, 1e6), g, constants()).seconds,
              flops / (0.4 * 494.5e12) + 3e-6, 1e-12);
  EXPECT_NEAR(predict(library("conv_bwd_filter", "f32", flops, 1e6), g, constants()).seconds,
              flops / (0.4 * 67e12) + 3e-6, 1e-12);
  OpCounts depthwise = library("conv_fwd", "f32", 1e9, 1e9);
  depthwise.groups = 32;
  EXPECT_NEAR(predict(depthwise, g, constants()).seconds, std::max(1e9 / (0.05 * 67e12), 1e9 / (0.9 * 3e12)) + 3e-6,
              1e-12);
  depthwise.op_class = "conv_bwd_filter";  // grouped backward passes at their own efficiency
  depthwise.flops = 4e9;
  EXPECT_NEAR(predict(depthwise, g, constants()).seconds, 4e9 / (0.02 * 67e12) + 3e-6, 1e-12);
  depthwise.op_class = "conv_bwd_data";  // this one moves more than it computes
  depthwise.flops = 1e7;
  const OpTime dw = predict(depthwise, g, constants());
  EXPECT_EQ(dw.bound, "memory");
  EXPECT_NEAR(dw.seconds, 1e9 / (0.9 * 3e12) + 3e-6, 1e-12);
  EXPECT_NEAR(predict(library("gemm", "f64", 1e12, 1e3), g, constants()).seconds, 1e12 / (0.7 * 34e12) + 3e-6, 1e-12);
  // Memory-bound: the bytes at the library share of the copy bandwidth.
  const OpTime add = predict(library("add_tensor", "f32", 1e6, 4e9), g, constants());
  EXPECT_EQ(add.bound, "memory");
  EXPECT_NEAR(add.seconds, 4e9 / (0.9 * 3e12) + 3e-6, 1e-12);
}

TEST(CostModel, CopiesAndCollectivesTakeTheirLinks) {
  const GpuSpec& g = gpu_spec("h200");
  OpCounts copy;
  copy.kind = OpKind::Copy;
  copy.op_class = "copy_d2d";
  copy.bytes_read = copy.bytes_written = 1e9;
  EXPECT_NEAR(predict(copy, g, constants()).seconds, 2e9 / 4271.8e9 + 3e-6, 1e-12);
  copy.op_class = "copy_h2d";
  EXPECT_NEAR(predict(copy, g, constants()).seconds, 1e9 / 64e9 + 3e-6, 1e-12);
  OpCounts ar = library("all_reduce", "", 0, 1e8);
  ar.bytes_written = 1e8;
  ar.ranks = 4;
  EXPECT_NEAR(predict(ar, g, constants()).seconds, 2 * 3.0 / 4 * 1e8 / (0.75 * 450e9) + 3e-6, 1e-12);
  OpCounts send = library("send", "", 0, 1e8);
  send.ranks = 4;
  const GpuSpec part = partition(g, 4);
  EXPECT_NEAR(predict(send, part, constants()).seconds, 1e8 / (0.75 * 4271.8e9 / 8) + 3e-6, 1e-12);
}

TEST(CostModel, OpsExtrapolateAlongTheLineThroughTwoSizes) {
  std::mt19937_64 rng(testing::fresh_seed());
  const double a0 = static_cast<double>(rng() % 1000), slope = static_cast<double>(1 + rng() % 1000);
  auto run = [&](double batch) {
    OpCounts w = kernel(8, 256);
    w.name = "weights";
    w.distinct_load_sectors = a0;  // does not grow with the batch
    OpCounts act = kernel(8 * batch, 256);
    act.name = "activations";
    act.distinct_load_sectors = slope * batch;
    act.flops = 3 * slope * batch;
    return std::vector<OpCounts>{w, act, act};  // the activation kernel runs twice
  };
  std::vector<OpCounts> at256 = extrapolate(run(1), 1, run(2), 2, 256);
  ASSERT_EQ(at256.size(), 2u);
  EXPECT_EQ(at256[0].name, "weights");
  EXPECT_DOUBLE_EQ(at256[0].distinct_load_sectors, a0);
  EXPECT_DOUBLE_EQ(at256[0].launches, 1);
  EXPECT_DOUBLE_EQ(at256[1].distinct_load_sectors, 2 * slope * 256);
  EXPECT_DOUBLE_EQ(at256[1].flops, 2 * 3 * slope * 256);
  EXPECT_DOUBLE_EQ(at256[1].launches, 2);
  EXPECT_DOUBLE_EQ(at256[1].blocks, 2 * 8 * 256);
  EXPECT_DOUBLE_EQ(at256[1].block_threads, 256);
  // A key in one run only counts zero in the other; nothing goes below zero; launches are the larger run's (a
  // second pass that only small sizes need is gone).
  std::vector<OpCounts> only_a = extrapolate(run(1), 1, {}, 2, 256);
  for (const OpCounts& op : only_a) {
    EXPECT_EQ(op.distinct_load_sectors, 0);
    EXPECT_EQ(op.launches, 0);
  }
  EXPECT_THROW(extrapolate(run(1), 2, run(2), 2, 256), ValueError);
  EXPECT_DOUBLE_EQ(total(at256).distinct_load_sectors, a0 + 2 * slope * 256);
}

// Library calls merge by call, kind and precision, but a grouped convolution never with an ungrouped one (nor
// with one of other groups): the model gives them other rates, which a merged op would apply to both.
TEST(CostModel, GroupedConvolutionsMergeApartFromUngroupedOnes) {
  auto run = [](double batch) {
    OpCounts depthwise = library("conv_fwd", "tf32", 2.0 * 9 * 64 * 32 * 32 * batch, 8.0 * 64 * 32 * 32 * batch);
    depthwise.name = "cudnnConvolutionForward";
    depthwise.groups = 64;
    OpCounts pointwise = depthwise;
    pointwise.groups = 1;
    pointwise.flops = 2.0 * 64 * 64 * 32 * 32 * batch;
    OpCounts wider = depthwise;
    wider.groups = 128;
    return std::vector<OpCounts>{depthwise, pointwise, depthwise, wider};
  };
  const std::vector<OpCounts> at64 = extrapolate(run(2), 2, run(4), 4, 64);
  ASSERT_EQ(at64.size(), 3u);
  EXPECT_EQ(at64[0].groups, 64);
  EXPECT_DOUBLE_EQ(at64[0].launches, 2);
  EXPECT_DOUBLE_EQ(at64[0].flops, 2 * 2.0 * 9 * 64 * 32 * 32 * 64);
  EXPECT_EQ(at64[1].groups, 1);
  EXPECT_DOUBLE_EQ(at64[1].flops, 2.0 * 64 * 64 * 32 * 32 * 64);
  EXPECT_EQ(at64[2].groups, 128);
  // So the step's time is that of its calls predicted one by one.
  const GpuSpec& g = gpu_spec("h200");
  double one_by_one = 0;
  for (const OpCounts& op : run(64)) one_by_one += predict(op, g, constants()).seconds;
  double merged = 0;
  for (const OpCounts& op : at64) merged += predict(op, g, constants()).seconds;
  EXPECT_NEAR(merged, one_by_one, 1e-9 * one_by_one);
}

TEST(CostModel, OpsRoundTripThroughJson) {
  OpCounts op = library("conv_bwd_filter", "tf32", 1.25e12, 3.5e9);
  op.name = "cudnnConvolutionBackwardFilter";
  op.detail = "x [256, 64, 56, 56]";
  op.groups = 2;
  op.reuse_load_sectors[5] = 17;
  op.launches = 0.1;  // any number (ops are scaled)
  const OpCounts back = op_from_json(op_to_json(op));
  EXPECT_EQ(back.key(), op.key());
  EXPECT_EQ(back.detail, op.detail);
  EXPECT_EQ(back.groups, 2);
  EXPECT_EQ(back.flops, op.flops);
  EXPECT_EQ(back.launches, op.launches);
  EXPECT_EQ(back.reuse_load_sectors[5], 17);
  Json bad = op_to_json(op);
  bad["kind"] = "kernal";
  EXPECT_THROW(op_from_json(bad), ValueError);
  bad = op_to_json(op);
  bad.erase("flops");
  EXPECT_THROW(op_from_json(bad), ValueError);
}

// The counters files' text: the same JSON, with every op (a flat object) whole on a line of its own, however deep.
TEST(CostModel, CountersFilesHoldOneOpALine) {
  OpCounts k = kernel(64, 256);
  k.reuse_load_sectors[3] = 2;
  const OpCounts l = library("conv_fwd", "tf32", 1e9, 1e6);
  const Json ops = Json::array({op_to_json(k), op_to_json(l)});
  const Json j = {{"kernel point", {{"bytes", 4096.0}, {"ops", ops}}},
                  {"pipe-bd point",
                   {{"blocks", Json::array({{{"memory_2", 3.0}, {"teacher_2", Json::array({ops[1]})}}})},
                    {"row_bytes", Json::array({12, 24})}}}};
  const std::string text = records_text(j);
  EXPECT_EQ(parse_json(text), j);
  std::vector<Json> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.find("\"kind\"") == std::string::npos) continue;
    line = line.substr(line.find('{'));
    if (line.back() == ',') line.pop_back();
    lines.push_back(parse_json(line));
  }
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], ops[0]);
  EXPECT_EQ(lines[1], ops[1]);
  EXPECT_EQ(lines[2], ops[1]);
}

}  // namespace
}  // namespace costmodel
}  // namespace tandem
