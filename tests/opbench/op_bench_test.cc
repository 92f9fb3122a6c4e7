// The benchmark mode of the op harness: every case of every family runs as a benchmark (on the CPU, and on CUDA
// where a GPU is present) and its channels-last cases time no layout conversion, the bytes and FLOPs of a few cases
// equal counts made by hand from their shapes, and the arithmetic families count the FLOPs of each of their cases.
#include <gtest/gtest.h>

#include "runtime/base/error.h"
#include "runtime/tensor/layout.h"
#include "tests/harness/op_bench.h"
#include "tests/opbench/case_families.h"
#include "tests/testing.h"

namespace tandem {
namespace testing {
namespace {

OpCase find_case(const std::string& name) {
  for (const CaseFamily& f : case_families())
    for (OpCase& c : f.cases())
      if (c.name == name) return c;
  ADD_FAILURE() << "no case " << name;
  return OpCase{};
}

// Each case once (after its untimed call), its batch inputs doubled: it must run at a size other than its
// test's, and report what it ran.
void run_every_case(Device device) {
  BenchOptions o;
  o.device = device;
  o.min_seconds = 0;
  o.min_reps = 1;
  int n = 0;
  for (const CaseFamily& f : case_families())
    for (const OpCase& c : f.cases()) {
      SCOPED_TRACE(f.name + "/" + c.name + " on " + device.str());
      o.elements = c.batch_inputs.empty() ? 0 : 2 * HostTensor::numel_of(c.inputs[c.batch_inputs[0]].shape);
      const std::vector<BenchResult> r = bench_case(c, o);
      ASSERT_EQ(r.size(), c.grad ? 2u : 1u);
      EXPECT_EQ(r[0].pass, "forward");
      if (c.grad) {
        EXPECT_EQ(r[1].pass, "forward+backward");
      }
      ASSERT_EQ(r[0].shapes.size(), c.inputs.size());
      for (size_t k : c.batch_inputs) EXPECT_EQ(r[0].shapes[k][0], 2 * c.inputs[k].shape.at(0)) << "input " << k;
      for (const BenchResult& p : r) {
        EXPECT_EQ(p.reps, 1);
        EXPECT_GT(p.seconds, 0.0);
        EXPECT_GT(p.bytes, 0.0);
        EXPECT_EQ(p.flops > 0, static_cast<bool>(c.flops));
      }
      ++n;
    }
  EXPECT_GT(n, 300) << "the families' cases";
}

TEST(OpBench, EveryCaseRunsOnTheCpu) { run_every_case(Device::cpu()); }

// A case's channels-last inputs are made channels-last (InputSpec::channels_last), so that what it times is the op
// alone: its call converts no layout, but for the copy whose op is that conversion and the convolution given an
// NCHW weight.
TEST(OpBench, ChannelsLastCasesCallNoLayoutConversion) {
  int n = 0;
  for (const CaseFamily& f : case_families())
    for (const OpCase& c : f.cases()) {
      bool channels_last = false;
      for (const InputSpec& in : c.inputs) channels_last |= in.channels_last;
      if (!channels_last || c.name == "to_nchw_of_channels_last" ||
          c.name == "conv2d_3x3_padding_channels_last_nchw_weight")
        continue;
      Generator gen(fresh_seed());
      const std::vector<Tensor> in = make_inputs(c, draw_inputs(c, gen), DType::F32, Device::cpu(), false);
      const int64_t before = layout_conversion_count();
      c.run(in, DType::F32);
      EXPECT_EQ(layout_conversion_count(), before) << f.name << "/" << c.name;
      ++n;
    }
  EXPECT_GE(n, 30) << "the channels-last cases";
}

TEST(OpBench, EveryCaseRunsOnCuda) {
  TD_REQUIRE_GPU();
  run_every_case(Device::cuda(0));
}

BenchResult forward_of(const std::string& name, DType dtype, int64_t elements = 0) {
  BenchOptions o;
  o.dtype = dtype;
  o.elements = elements;
  o.min_seconds = 0;
  o.min_reps = 1;
  return bench_case(find_case(name), o).at(0);
}

// The counts by hand: bytes are the elements of the inputs and outputs times the dtype's size; FLOPs 2 per
// product (multiply and add) for convolution and matmul, one per window element for pooling, 4 + 2 + 2 per
// element for batch norm's statistics, normalization and affine transform.
TEST(OpBench, BytesAndFlopsOfCasesCountedByHand) {
  // conv2d 3x3, padding 1: x [2, 3, 7, 6], w [4, 3, 3, 3], b [4] -> y [2, 4, 7, 6]; 27 products per output.
  BenchResult conv = forward_of("conv2d_3x3_padding", DType::F32);
  EXPECT_EQ(conv.flops, 2.0 * 27 * (2 * 4 * 7 * 6));
  EXPECT_EQ(conv.bytes, 4.0 * (252 + 108 + 4 + 336));
  // The same with 10 times the batch (2520 elements of x): x [20, 3, 7, 6] -> y [20, 4, 7, 6].
  conv = forward_of("conv2d_3x3_padding", DType::F32, 2520);
  EXPECT_EQ(shape_str(conv.shapes[0]), shape_str({20, 3, 7, 6}));
  EXPECT_EQ(conv.flops, 2.0 * 27 * (20 * 4 * 7 * 6));
  EXPECT_EQ(conv.bytes, 4.0 * (2520 + 108 + 4 + 3360));
  // Max pooling 3x3, stride 2, padding 1: x [2, 3, 7, 7] -> y [2, 3, 4, 4]; 9 compares per output, in f64.
  const BenchResult pool = forward_of("max_pool2d_3x3_pad", DType::F64);
  EXPECT_EQ(pool.flops, 9.0 * 96);
  EXPECT_EQ(pool.bytes, 8.0 * (294 + 96));
  // Batch norm in training, affine: x [3, 4, 5, 6], weight [4], bias [4] -> y.
  const BenchResult bn = forward_of("batch_norm_train_4d_affine", DType::F32);
  EXPECT_EQ(bn.flops, 8.0 * 360);
  EXPECT_EQ(bn.bytes, 4.0 * (360 + 4 + 4 + 360));
  // matmul [7, 20] @ [20, 17]; forward + backward: 3 times the FLOPs, and the gradients of y, a and b.
  BenchOptions o;
  o.min_seconds = 0;
  o.min_reps = 1;
  const std::vector<BenchResult> mm = bench_case(find_case("matmul_7x20x17"), o);
  ASSERT_EQ(mm.size(), 2u);
  EXPECT_EQ(mm[0].flops, 2.0 * 7 * 17 * 20);
  EXPECT_EQ(mm[0].bytes, 4.0 * (140 + 340 + 119));
  EXPECT_EQ(mm[1].flops, 3 * 2.0 * 7 * 17 * 20);
  EXPECT_EQ(mm[1].bytes, 4.0 * (140 + 340 + 119) + 4.0 * (119 + 140 + 340));
}

TEST(OpBench, ArithmeticFamiliesCountFlops) {
  for (const CaseFamily& f : case_families()) {
    if (!f.needs_flops) continue;
    for (const OpCase& c : f.cases()) EXPECT_TRUE(static_cast<bool>(c.flops)) << f.name << "/" << c.name;
  }
}

TEST(OpBench, BatchFactorReachesTheElementsAsked) {
  const OpCase c = find_case("conv2d_3x3_padding");  // x: 252 elements
  EXPECT_EQ(batch_factor(c, 0), 1);
  EXPECT_EQ(batch_factor(c, 252), 1);
  EXPECT_EQ(batch_factor(c, 253), 2);
  EXPECT_EQ(shape_str(bench_shapes(c, 1000)[0]), shape_str({8, 3, 7, 6}));
  EXPECT_EQ(shape_str(bench_shapes(c, 1000)[1]), shape_str({4, 3, 3, 3})) << "the weight keeps its shape";
}

// Broadcasting ops' batch: the inputs of the highest rank with the largest dimension 0 (the others broadcast).
TEST(OpBench, LeadingInputsOfBroadcastingOps) {
  auto leading = [](std::vector<Shape> shapes) {
    std::vector<InputSpec> in;
    for (Shape& s : shapes) in.push_back(float_in(s));
    return leading_inputs(in);
  };
  EXPECT_EQ(leading({{2, 3, 4}, {3, 1}}), (std::vector<size_t>{0}));
  EXPECT_EQ(leading({{4}, {2, 3, 4}}), (std::vector<size_t>{1}));
  EXPECT_EQ(leading({{2, 3}, {2, 3}}), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(leading({{1, 3}, {2, 3}}), (std::vector<size_t>{1}));
  EXPECT_EQ(leading({{}, {}}), (std::vector<size_t>{}));
}

// Roofline: above the ceilings' FLOPs per byte (here 10) a result is held to the FLOP/s ceiling, below to the
// bandwidth.
TEST(OpBench, UtilisationAgainstTheBindingCeiling) {
  const Ceilings c{1e9, 1e10};
  BenchResult r;
  r.seconds = 1e-6;
  r.bytes = 100;
  r.flops = 2000;
  Utilisation u = utilisation(r, c);
  EXPECT_TRUE(u.compute_bound);
  EXPECT_DOUBLE_EQ(u.fraction, 0.2);
  r.flops = 500;
  u = utilisation(r, c);
  EXPECT_FALSE(u.compute_bound);
  EXPECT_DOUBLE_EQ(u.fraction, 0.1);
  r.flops = 0;
  EXPECT_FALSE(utilisation(r, c).compute_bound);
}

TEST(OpBench, CeilingsAreMeasured) {
  BenchOptions o;
  o.min_seconds = 0;
  o.min_reps = 2;
  const Ceilings c = measure_ceilings(o, 1 << 16, 64);
  EXPECT_GT(c.bytes_per_s, 0.0);
  EXPECT_GT(c.flops_per_s, 0.0);
  EXPECT_THROW(measure_ceilings(o, 0, 64), tandem::Error);
}

}  // namespace
}  // namespace testing
}  // namespace tandem
