// Predicted beside measured (tools/costmodel/profile_compare.h, op_record.h): hand-built profiles joined to
// hand-built predictions by op name (both sides, one side only, ratios, the table's cells and footnote), fresh
// random joins against a map built here, the predictions' JSON and its errors, extrapolating by op, and on the
// simulated GPU ops recorded by the profiler's op against a host-timed profile and a plain recording of the
// same work.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/base/device.h"
#include "runtime/base/error.h"
#include "runtime/memory/stream.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/profile_table.h"
#include "runtime/tensor/profiler.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"
#include "tools/costmodel/gpu.h"
#include "tools/costmodel/op_record.h"
#include "tools/costmodel/profile_compare.h"
#include "tools/costmodel/scaling.h"

namespace tandem {
namespace costmodel {
namespace {

constexpr int64_t kMs = 1000000;  // ns

// A kernel of `op` taking `ms` from `at` ms on.
profiler::KernelRecord kernel(const std::string& op, int64_t at, int64_t ms) {
  return {"k", op, at * kMs, (at + ms) * kMs, 0, 0};
}

// The whitespace-separated words of the table's line that starts with `name` ({} when none does).
std::vector<std::string> words_of_line(const std::string& table, const std::string& name) {
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);)
    if (line.compare(0, name.size(), name) == 0 && (line.size() == name.size() || line[name.size()] == ' ')) {
      std::istringstream in(line.substr(name.size()));
      std::vector<std::string> words{name};
      for (std::string w; in >> w;) words.push_back(w);
      return words;
    }
  return {};
}

TEST(ProfileCompare, JoinsAProfileToPredictionsByOpName) {
  profiler::Profile p;
  p.end_ns = 20 * kMs;
  p.kernels = {kernel("conv2d", 0, 4), kernel("relu", 4, 2), kernel("conv2d", 6, 6), kernel("measured_only", 12, 1)};
  for (const char* scope : {"conv2d", "conv2d", "relu", "measured_only", "view backward"})
    p.scopes.push_back({scope, 0, 0, 0, 1});
  const std::vector<OpScopePrediction> predicted = {
      {"relu", 1, 4e-3}, {"conv2d", 4, 5e-3}, {"predicted_only", 2, 3e-3}};

  const std::vector<ComparedRow> rows = join_by_op(profiler::op_rows(p), predicted);
  std::vector<std::string> names;
  for (const ComparedRow& r : rows) names.push_back(r.name);
  EXPECT_EQ(names, (std::vector<std::string>{"conv2d", "relu", "measured_only", "view backward", "predicted_only"}));
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_TRUE(rows[0].measured && rows[0].predicted);
  EXPECT_DOUBLE_EQ(rows[0].row.ms, 10);
  EXPECT_EQ(rows[0].row.kernels, 2);
  EXPECT_DOUBLE_EQ(rows[0].predicted_ms, 5);
  EXPECT_DOUBLE_EQ(rows[0].launches, 4);
  EXPECT_TRUE(rows[2].measured && !rows[2].predicted);
  EXPECT_TRUE(!rows[4].measured && rows[4].predicted);
  EXPECT_DOUBLE_EQ(rows[4].predicted_ms, 3);

  const std::string table = compared_table(rows, "h200");
  // op, count, kernels, measured ms, predicted ms, measured / predicted.
  EXPECT_EQ(words_of_line(table, "conv2d"), (std::vector<std::string>{"conv2d", "2", "2", "10.000", "5.000", "2.00"}))
      << table;
  EXPECT_EQ(words_of_line(table, "relu"), (std::vector<std::string>{"relu", "1", "1", "2.000", "4.000", "0.50"}));
  EXPECT_EQ(words_of_line(table, "measured_only"),
            (std::vector<std::string>{"measured_only", "1", "1", "1.000", "-", "-"}));
  EXPECT_EQ(words_of_line(table, "predicted_only"),
            (std::vector<std::string>{"predicted_only", "-", "-", "-", "3.000", "-"}));
  EXPECT_TRUE(words_of_line(table, "view backward").empty()) << "an op without kernels or prediction: " << table;
  // Totals over the two ops on both sides: 12 ms measured, 9 ms predicted.
  EXPECT_EQ(words_of_line(table, "ops on both sides (2)"),
            (std::vector<std::string>{"ops on both sides (2)", "12.000", "9.000", "1.33"}));
  EXPECT_MENTIONS(table, "op, predicted on h200");
  EXPECT_MENTIONS(table, "measured only (1): measured_only;");
  EXPECT_MENTIONS(table, "predicted only (1): predicted_only;");
  EXPECT_MENTIONS(table, "1 measured ops without kernels not shown");
}

TEST(ProfileCompare, TableKeepsMaxRowsAndSaysWhenBothSidesMatch) {
  std::vector<profiler::Row> measured(3);
  std::vector<OpScopePrediction> predicted;
  for (int i = 0; i < 3; ++i) {
    measured[static_cast<size_t>(i)].name = "op" + std::to_string(i);
    measured[static_cast<size_t>(i)].kernels = 1;
    measured[static_cast<size_t>(i)].ms = 3 - i;
    predicted.push_back({"op" + std::to_string(i), 1, 1e-3});
  }
  const std::string table = compared_table(join_by_op(measured, predicted), "h100", 2);
  EXPECT_FALSE(words_of_line(table, "op1").empty());
  EXPECT_TRUE(words_of_line(table, "op2").empty()) << table;
  EXPECT_MENTIONS(table, "(1 more)");
  // The totals count every row, shown or not: 6 ms measured, 3 ms predicted.
  EXPECT_EQ(words_of_line(table, "ops on both sides (3)"),
            (std::vector<std::string>{"ops on both sides (3)", "6.000", "3.000", "2.00"}));
  EXPECT_MENTIONS(table, "every op shown is both measured and predicted");
}

// Random sides over a pool of names: every name of either side once, with its own side's numbers, measured
// ones in the profile's order and then predicted ones in theirs.
TEST(ProfileCompare, RandomJoinsKeepEveryOpOnceWithItsNumbers) {
  std::mt19937_64 rng(testing::fresh_seed());
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<profiler::Row> measured;
    std::vector<OpScopePrediction> predicted;
    std::map<std::string, double> want_ms, want_pred_ms;
    for (int i = 0; i < 12; ++i) {
      const std::string name = "op" + std::to_string(i);
      const int sides = static_cast<int>(rng() % 4);  // 0: neither, 1: measured, 2: predicted, 3: both
      if (sides & 1) {
        profiler::Row r;
        r.name = name;
        r.kernels = 1;
        r.ms = static_cast<double>(rng() % 1000) / 7;
        measured.push_back(r);
        want_ms[name] = r.ms;
      }
      if (sides & 2) {
        predicted.push_back({name, 1, static_cast<double>(rng() % 1000) * 1e-6});
        want_pred_ms[name] = predicted.back().seconds * 1e3;
      }
    }
    std::shuffle(measured.begin(), measured.end(), rng);
    std::shuffle(predicted.begin(), predicted.end(), rng);
    std::vector<std::string> want_order;
    for (const profiler::Row& r : measured) want_order.push_back(r.name);
    for (const OpScopePrediction& p : predicted)
      if (!want_ms.count(p.op)) want_order.push_back(p.op);

    const std::vector<ComparedRow> rows = join_by_op(measured, predicted);
    std::vector<std::string> order;
    for (const ComparedRow& r : rows) {
      order.push_back(r.name);
      EXPECT_EQ(r.measured, want_ms.count(r.name) == 1) << r.name;
      EXPECT_EQ(r.predicted, want_pred_ms.count(r.name) == 1) << r.name;
      if (r.measured) EXPECT_EQ(r.row.ms, want_ms[r.name]) << r.name;
      if (r.predicted) EXPECT_DOUBLE_EQ(r.predicted_ms, want_pred_ms[r.name]) << r.name;
    }
    EXPECT_EQ(order, want_order);
  }
}

TEST(ProfileCompare, PredictionsByOpAsJsonAndItsErrors) {
  const std::vector<OpScopePrediction> rows = {{"conv2d backward", 40, 1.25e-3}, {"(no op)", 2, 4e-6}};
  const std::vector<OpScopePrediction> back = op_scope_predictions_from_json(op_scope_predictions_json(rows));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].op, "conv2d backward");
  EXPECT_EQ(back[0].launches, 40);
  EXPECT_EQ(back[0].seconds, 1.25e-3);
  EXPECT_EQ(back[1].op, "(no op)");

  Json missing = op_scope_predictions_json(rows);
  missing[1].erase("predicted_s");
  testing::expect_error<ValueError>([&] { op_scope_predictions_from_json(missing); }, "predicted_s");
  Json mistyped = op_scope_predictions_json(rows);
  mistyped[0]["op"] = 3;
  testing::expect_error<ValueError>([&] { op_scope_predictions_from_json(mistyped); }, "prediction op");
  testing::expect_error<ValueError>([&] { op_scope_predictions_from_json(Json::object()); }, "predictions by op");
}

OpCounts counted(OpKind kind, const std::string& name, double bytes, double flops) {
  OpCounts o;
  o.kind = kind;
  o.name = name;
  o.detail = "here.cu:1";
  o.op_class = kind == OpKind::Copy ? "copy_d2d" : kind == OpKind::Library ? "gemm" : "";
  o.precision = kind == OpKind::Library ? "tf32" : "";
  o.blocks = 100;
  o.block_threads = 256;
  o.threads = 25600;
  o.distinct_load_sectors = bytes / 32;
  o.load_bytes = bytes;
  o.bytes_read = o.bytes_written = bytes;
  o.flops = flops;
  return o;
}

// An op's prediction is the sum of its kernels' and library calls' (copies left out, as CUPTI leaves them).
TEST(ProfileCompare, PredictsEachOpFromItsKernelsAndCalls) {
  const GpuSpec& gpu = gpu_spec("h200");
  const Constants& c = fitted_constants();
  const OpCounts k = counted(OpKind::Kernel, "relu_kernel", 64e6, 0);
  const OpCounts g = counted(OpKind::Library, "cublasGemmEx", 1e6, 4e9);
  const OpCounts copy = counted(OpKind::Copy, "cudaMemcpyAsync", 1e9, 0);
  OpsByOp ops;
  ops["matmul"] = {k, g, copy};
  ops["(no op)"] = {copy};
  const std::vector<OpScopePrediction> rows = predict_by_op(ops, gpu, c);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].op, "matmul");
  EXPECT_EQ(rows[0].launches, 2);
  EXPECT_DOUBLE_EQ(rows[0].seconds, predict(k, gpu, c).seconds + predict(g, gpu, c).seconds);
  EXPECT_GT(predict(copy, gpu, c).seconds, 0);
}

// Extrapolating op by op gives the same totals as extrapolating all ops together (both linear per key).
TEST(ProfileCompare, ExtrapolatingByOpMatchesExtrapolatingAll) {
  OpsByOp a, b;
  a["conv2d"] = {counted(OpKind::Kernel, "k1", 1e6, 2e6)};
  b["conv2d"] = {counted(OpKind::Kernel, "k1", 2e6, 4e6), counted(OpKind::Kernel, "k2", 1e3, 0)};
  a["add"] = {counted(OpKind::Kernel, "k3", 5e5, 1e5)};  // gone from the larger run
  b["sum"] = {counted(OpKind::Library, "cublasGemmEx", 3e5, 7e6)};
  const OpsByOp by_op = extrapolate_by_op(a, 1, b, 2, 256);
  EXPECT_EQ(by_op.size(), 3u);
  const OpCounts got = total(all_ops(by_op));
  const OpCounts want = total(extrapolate(all_ops(a), 1, all_ops(b), 2, 256));
  EXPECT_DOUBLE_EQ(got.flops, want.flops);
  EXPECT_DOUBLE_EQ(got.load_bytes, want.load_bytes);
  EXPECT_DOUBLE_EQ(got.launches, want.launches);
  // k1's load bytes along the line through (1, 1e6) and (2, 2e6), at 256.
  EXPECT_DOUBLE_EQ(by_op.at("conv2d")[0].load_bytes, 256e6);
}

// The simulated GPU: ops of a few tensor ops recorded by op, against the same work's host-timed profile (its
// ops) and plain recording (its ops, all of them).
TEST(ProfileCompare, RecordsOpsUnderTheProfilersOps) {
  if (!counters_available()) GTEST_SKIP() << counters_unavailable_reason();
  const Device gpu = Device::cuda(0);
  DeviceGuard guard(gpu);
  Generator gen(testing::fresh_seed());
  const Tensor host = randn({3, 4096}, gen);
  auto work = [&] {
    Tensor x = host.to(gpu);           // from pageable memory: the simulated GPU records no op
    Tensor y = x.to(Device::cuda(1));  // a peer copy outside every op
    sum(add(relu(x), x), {1});
  };
  work();  // warm-up: the allocator's pools
  current_stream(gpu).synchronize();

  const OpsByOp by_op = record_by_op(work, false);
  profiler::start({gpu}, profiler::Timer::Host);
  work();
  const profiler::Profile p = profiler::stop();
  std::set<std::string> measured, recorded;
  for (const profiler::Row& r : profiler::op_rows(p))
    if (r.kernels > 0 && r.name != profiler::kNoOp) measured.insert(r.name);
  for (const auto& [op, ops] : by_op)
    if (op != profiler::kNoOp) recorded.insert(op);
  EXPECT_EQ(recorded, measured);
  EXPECT_EQ(recorded, (std::set<std::string>{"relu", "add", "sum"}));
  for (const std::string op : {"relu", "add"}) {
    ASSERT_EQ(by_op.at(op).size(), 1u) << op;
    EXPECT_EQ(by_op.at(op)[0].kind, OpKind::Kernel) << op;
  }
  ASSERT_TRUE(by_op.count(profiler::kNoOp));
  for (const OpCounts& o : by_op.at(profiler::kNoOp)) EXPECT_EQ(o.kind, OpKind::Copy) << o.name;

  std::vector<OpCounts> plain;
  {
    Recording rec;
    work();
    plain = rec.take();
  }
  std::multiset<std::string> want, got;
  for (const OpCounts& o : plain) want.insert(o.key());
  for (const OpCounts& o : all_ops(by_op)) got.insert(o.key());
  EXPECT_EQ(got, want);

  // Afterwards the CUDA devices' own timer is back (host timers on the simulated GPU), and a profile that runs
  // already is refused.
  profiler::start({gpu});
  EXPECT_EQ(profiler::stop().timer, "host timers");
  profiler::start({gpu});
  testing::expect_error<ValueError>([&] { record_by_op(work, false); }, "already running");
  profiler::stop();
  // An error in the work stops the profile it ran under.
  testing::expect_error<ValueError>([&] { record_by_op([] { TD_THROW(ValueError, "from the work"); }, false); },
                                    "from the work");
  EXPECT_FALSE(profiler::active());
}

}  // namespace
}  // namespace costmodel
}  // namespace tandem
