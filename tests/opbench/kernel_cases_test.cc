// kernels_bench's cases as op cases at their own shapes (tests/opbench/kernel_cases.h): each case moves the bytes
// counted by hand from its shapes (the figures its hand-written predecessor stated, against which the H200 run
// measured), a backward case launches its op's backward kernels alone and a forward case none of them, and the
// shaped call counts what the kernels declare and refuses inputs it cannot draw. The shaped call runs on the CPU
// in every build; the cases on GPU 0 (the simulated GPU in CI).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>

#include "runtime/base/error.h"
#include "tests/harness/call_counts.h"
#include "tests/harness/op_bench.h"
#include "tests/opbench/case_families.h"
#include "tests/opbench/kernel_cases.h"
#include "tests/testing.h"

namespace tandem {
namespace testing {
namespace {

OpCase find_case(const std::string& family, const std::string& name) {
  for (const CaseFamily& f : case_families())
    if (f.name == family)
      for (OpCase& c : f.cases())
        if (c.name == name) return c;
  ADD_FAILURE() << "no case " << family << "/" << name;
  return OpCase{};
}

int64_t draw(int64_t lo, int64_t hi) {
  std::mt19937_64 g(fresh_seed());
  return std::uniform_int_distribution<int64_t>(lo, hi)(g);
}

// On the CPU, at fresh sizes: an operand read or written counts once (f32 4 bytes, the i64 indices 8).
TEST(KernelCases, ShapedCallCountsTheBytesItsKernelsDeclare) {
  Generator gen(fresh_seed());
  const int64_t rows = draw(2, 40), cols = draw(3, 300), n = rows * cols;
  const Device cpu = Device::cpu();
  EXPECT_EQ(shaped_call(find_case("elementwise", "relu"), {{n}}, Pass::Forward, cpu, DType::F32, gen).bytes, 8.0 * n);
  EXPECT_EQ(shaped_call(find_case("elementwise", "add_bcast_inner"), {{rows, cols}, {cols}}, Pass::Forward, cpu,
                        DType::F32, gen)
                .bytes,
            4.0 * (2 * n + cols));
  EXPECT_EQ(
      shaped_call(find_case("reduction", "max_dim_neg1"), {{rows, cols}}, Pass::Forward, cpu, DType::F32, gen).bytes,
      4.0 * n + 12.0 * rows);
  // softmax's backward reads its output and the output's gradient and writes the input's.
  EXPECT_EQ(
      shaped_call(find_case("reduction", "softmax_dim_neg1"), {{rows, cols}}, Pass::Backward, cpu, DType::F32, gen)
          .bytes,
      12.0 * n);
}

TEST(KernelCases, ShapedCallRefusesWhatItCannotRun) {
  Generator gen(fresh_seed());
  const Device cpu = Device::cpu();
  expect_error<ValueError>(
      [&] {
        shaped_call(find_case("join_index", "gather_dim_0_2d"), {{4, 3}, {2, 3}}, Pass::Forward, cpu, DType::F32, gen);
      },
      "is not floating");
  expect_error<ValueError>(
      [&] { shaped_call(find_case("elementwise", "add_same"), {{4}}, Pass::Forward, cpu, DType::F32, gen); },
      {"1 shapes for 2 inputs"});
  expect_error<ValueError>(
      [&] {
        shaped_call(find_case("elementwise", "eq_same"), {{4}, {4}}, Pass::Backward, cpu, DType::F32, gen);
      },
      "no output requires grad");
}

constexpr int64_t kN = 65536;  // the element cases' size here (their sizes are multiples of 2^16)
constexpr double kC = 64;      // the layer cases' channels

// Each case's least bytes at kN elements or batch 1, from its shapes: the tensors read and written once.
std::map<std::string, double> bytes_by_hand() {
  const double n = kN, act = 64.0 * 56 * 56, pooled = 64.0 * 112 * 112;
  std::map<std::string, double> b = {
      {"relu", 8 * n},
      {"add", 12 * n},
      {"mul", 12 * n},
      {"add_row_broadcast", 4 * (2 * n + 1024)},
      {"mul_channel_broadcast", 4 * (2 * n + 64)},
      {"sum_rows", 4 * (n + n / 1024)},
      {"sum_all", 4 * (n + 1)},
      {"sum_columns", 4 * (n + 1024)},
      {"max_rows", 4 * n + 12 * (n / 1024)},  // f32 values and i64 indices
      {"softmax", 8 * n},
      {"log_softmax_long_rows", 8 * n},
      {"softmax_backward", 12 * n},  // y and dy read, dx written
      {"copy_contiguous", 8 * n},
      {"copy_transpose", 8 * n},  // 256 x 256
      {"cast_f32_to_bf16", 6 * n},
      {"copy_nchw_to_nhwc", 8 * act},
      {"copy_nhwc_to_nchw", 8 * act},
      {"depthwise_3x3_forward_nhwc", 4 * (2 * act + 64 * 9)},  // x and the taps read, y written
      {"depthwise_3x3_backward_nhwc",
       4 * (4 * act + 2 * 64 * 9)},  // dy and taps read, dx written; x, dy read, dw written
  };
  for (const std::string f : {"_nchw", "_nhwc"}) {
    // x read and y written; weight and bias read, the saved mean and inverse deviation written.
    b["batch_norm_forward_train" + f] = 4 * (2 * act + 4 * kC);
    // x and dy read, dx written; weight and saved statistics read, dweight and dbias written.
    b["batch_norm_backward" + f] = 4 * (3 * act + 5 * kC);
    b["batch_norm_add_relu_forward_train" + f] = 4 * (3 * act + 4 * kC);  // and the residual read
    b["batch_norm_add_relu_backward" + f] = 4 * (5 * act + 5 * kC);       // and y read, dresidual written
    b["max_pool_stem_forward" + f] = 4 * (pooled + 2 * act);              // x read; y and i32 indices written
    b["max_pool_stem_backward" + f] = 4 * (2 * act + pooled);             // dy and indices read, dx written
    b["avg_pool_stem_forward" + f] = 4 * (pooled + act);
    b["avg_pool_stem_backward" + f] = 4 * (act + pooled);
  }
  return b;
}

int64_t small_arg(const costmodel::KernelCase& c) { return c.arg_name == "n" ? kN : 1; }

TEST(KernelCases, EveryCaseMovesItsBytesCountedByHand) {
  TD_REQUIRE_GPU();
  const std::map<std::string, double> want = bytes_by_hand();
  ASSERT_EQ(kernel_cases().size(), want.size());
  for (const costmodel::KernelCase& c : kernel_cases()) {
    auto it = want.find(c.name);
    if (it == want.end()) {
      ADD_FAILURE() << c.name << " has no count by hand";
      continue;
    }
    EXPECT_EQ(c.make(small_arg(c)).bytes, it->second) << c.name;
  }
}

// A backward case's launch calls backward kernels alone (the forward ran once when the case was made); a
// forward case's calls none.
TEST(KernelCases, BackwardCasesLaunchTheBackwardAlone) {
  TD_REQUIRE_GPU();
  for (const costmodel::KernelCase& c : kernel_cases()) {
    const costmodel::KernelRun run = c.make(small_arg(c));
    const bool backward = c.name.find("backward") != std::string::npos;
    CallCounts counts(DeviceType::CUDA);
    run.launch(current_stream(Device::cuda(0)));
    int backward_calls = 0;
    for (const char* m : {"batch_norm_backward", "batch_norm_act_backward", "max_pool2d_backward",
                          "avg_pool2d_backward", "softmax_backward", "conv2d_backward_data", "conv2d_backward_weight"})
      backward_calls += counts.of(m);
    EXPECT_GT(counts.total(), 0) << c.name;
    EXPECT_EQ(backward_calls, backward ? counts.total() : 0) << c.name;
  }
}

}  // namespace
}  // namespace testing
}  // namespace tandem
