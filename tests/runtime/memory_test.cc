// Allocator statistics: per-category current/peak bytes, reset_peaks, the bytes-over-time record, memory
// scopes (also freed on another thread), Storage::set_category, and the CPU allocator's alignment.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/base/config.h"
#include "runtime/base/error.h"
#include "runtime/memory/memory.h"
#include "runtime/memory/storage.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor.h"
#include "tests/testing.h"

namespace tandem {
namespace {

constexpr MemoryCategory kAll[] = {MemoryCategory::Parameters,     MemoryCategory::Gradients,
                                   MemoryCategory::OptimizerState, MemoryCategory::Activations,
                                   MemoryCategory::Workspace,      MemoryCategory::Communication};

MemoryTracker& cpu_tracker() { return device_memory(Device::cpu()); }

// EXPECTs that every category moved by `delta` (0 where not listed) from `before` to `after`.
void expect_current_deltas(const MemoryCounters& before, const MemoryCounters& after,
                           const std::vector<std::pair<MemoryCategory, int64_t>>& deltas) {
  int64_t total = 0;
  for (MemoryCategory c : kAll) {
    int64_t want = 0;
    for (const auto& [cat, d] : deltas)
      if (cat == c) want = d;
    total += want;
    EXPECT_EQ(after.cur(c) - before.cur(c), want) << category_name(c);
  }
  EXPECT_EQ(after.total_current - before.total_current, total);
}

TEST(MemoryStats, CategoryNames) {
  EXPECT_STREQ(category_name(MemoryCategory::Parameters), "parameters");
  EXPECT_STREQ(category_name(MemoryCategory::Gradients), "gradients");
  EXPECT_STREQ(category_name(MemoryCategory::OptimizerState), "optimizer_state");
  EXPECT_STREQ(category_name(MemoryCategory::Activations), "activations");
  EXPECT_STREQ(category_name(MemoryCategory::Workspace), "workspace");
  EXPECT_STREQ(category_name(MemoryCategory::Communication), "communication");
}

TEST(MemoryStats, PerCategoryCurrentBytesFollowAllocationsAndFrees) {
  EXPECT_EQ(current_memory_category(), MemoryCategory::Activations);  // the default
  MemoryCounters before = cpu_tracker().counters();
  {
    MemoryCategoryGuard workspace(MemoryCategory::Workspace);
    EXPECT_EQ(current_memory_category(), MemoryCategory::Workspace);
    Tensor a = empty({100}, DType::F32);
    Tensor b = empty({3, 7}, DType::F64);
    MemoryCounters mid = cpu_tracker().counters();
    expect_current_deltas(before, mid, {{MemoryCategory::Workspace, 400 + 168}});
    EXPECT_EQ(mid.allocations - before.allocations, 2);
    {
      MemoryCategoryGuard params(MemoryCategory::Parameters);
      Tensor p = zeros({10}, DType::I64);
      expect_current_deltas(before, cpu_tracker().counters(),
                            {{MemoryCategory::Workspace, 568}, {MemoryCategory::Parameters, 80}});
    }
    EXPECT_EQ(current_memory_category(), MemoryCategory::Workspace);
    expect_current_deltas(before, cpu_tracker().counters(), {{MemoryCategory::Workspace, 568}});
    // A view allocates nothing.
    Tensor v = a.view({10, 10}).t();
    expect_current_deltas(before, cpu_tracker().counters(), {{MemoryCategory::Workspace, 568}});
  }
  EXPECT_EQ(current_memory_category(), MemoryCategory::Activations);
  expect_current_deltas(before, cpu_tracker().counters(), {});
  EXPECT_EQ(memory_counters(Device::cpu()).total_current, cpu_tracker().counters().total_current);
}

TEST(MemoryStats, ZeroSizedTensorsAreNotCharged) {
  MemoryCounters before = cpu_tracker().counters();
  Tensor e = empty({0, 5});
  MemoryCounters after = cpu_tracker().counters();
  expect_current_deltas(before, after, {});
  EXPECT_EQ(after.allocations, before.allocations);
}

TEST(MemoryStats, PeaksAndResetPeaks) {
  MemoryTracker& t = cpu_tracker();
  t.reset_peaks();
  MemoryCounters base = t.counters();
  for (MemoryCategory c : kAll) EXPECT_EQ(base.peak_of(c), base.cur(c)) << category_name(c);
  EXPECT_EQ(base.total_peak, base.total_current);
  {
    MemoryCategoryGuard g(MemoryCategory::Communication);
    Tensor a = empty({1000}, DType::U8);
    { Tensor b = empty({3000}, DType::U8); }
    Tensor c = empty({500}, DType::U8);
    MemoryCounters mid = t.counters();
    EXPECT_EQ(mid.cur(MemoryCategory::Communication) - base.cur(MemoryCategory::Communication), 1500);
    EXPECT_EQ(mid.peak_of(MemoryCategory::Communication) - base.cur(MemoryCategory::Communication), 4000);
    EXPECT_EQ(mid.total_peak - base.total_current, 4000);
    EXPECT_EQ(mid.peak_of(MemoryCategory::Parameters), base.peak_of(MemoryCategory::Parameters));
    t.reset_peaks();
    MemoryCounters reset = t.counters();
    EXPECT_EQ(reset.peak_of(MemoryCategory::Communication), reset.cur(MemoryCategory::Communication));
    EXPECT_EQ(reset.total_peak, reset.total_current);
  }
  // Freeing never lowers a peak.
  MemoryCounters after = t.counters();
  EXPECT_EQ(after.peak_of(MemoryCategory::Communication) - base.cur(MemoryCategory::Communication), 1500);
}

TEST(MemoryStats, BytesOverTimeRecordsEveryChangeInOrder) {
  MemoryTracker& t = cpu_tracker();
  t.start_recording();
  MemoryCounters base = t.counters();
  int64_t base_cat = base.cur(MemoryCategory::OptimizerState);
  double t0 = host_time_s();
  {
    MemoryCategoryGuard g(MemoryCategory::OptimizerState);
    Tensor a = empty({10}, DType::F32);  // +40
    Tensor b = empty({25}, DType::F64);  // +200
    a = Tensor();                        // -40
  }                                      // b: -200
  double t1 = host_time_s();
  std::vector<MemorySample> s = t.stop_recording();
  const int64_t want_cat[] = {40, 240, 200, 0};
  ASSERT_EQ(s.size(), 4u);
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(s[i].category, MemoryCategory::OptimizerState) << i;
    EXPECT_EQ(s[i].category_bytes - base_cat, want_cat[i]) << i;
    EXPECT_EQ(s[i].total_bytes - base.total_current, want_cat[i]) << i;
    EXPECT_GE(s[i].time_s, t0) << i;
    EXPECT_LE(s[i].time_s, t1) << i;
    if (i > 0) {
      EXPECT_GE(s[i].time_s, s[i - 1].time_s) << i;
    }
  }
  // Stopped: nothing more is recorded.
  size_t kept = t.samples().size();
  Tensor later = empty({8});
  EXPECT_EQ(t.samples().size(), kept);
}

TEST(MemoryStats, TrackerMovesAndIsThreadSafe) {
  MemoryTracker t("mine");
  EXPECT_EQ(t.name(), "mine");
  t.on_alloc(MemoryCategory::Activations, 100);
  t.on_move(MemoryCategory::Activations, MemoryCategory::Gradients, 60);
  MemoryCounters c = t.counters();
  EXPECT_EQ(c.cur(MemoryCategory::Activations), 40);
  EXPECT_EQ(c.cur(MemoryCategory::Gradients), 60);
  EXPECT_EQ(c.total_current, 100);
  EXPECT_EQ(c.total_peak, 100);  // a move is not an allocation
  EXPECT_EQ(c.allocations, 1);
  t.on_free(MemoryCategory::Activations, 40);
  t.on_free(MemoryCategory::Gradients, 60);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&t] {
      for (int j = 0; j < 1000; ++j) {
        t.on_alloc(MemoryCategory::Workspace, 8);
        t.on_free(MemoryCategory::Workspace, 8);
      }
    });
  for (auto& th : threads) th.join();
  c = t.counters();
  EXPECT_EQ(c.total_current, 0);
  EXPECT_EQ(c.allocations, 4001);
  EXPECT_LE(c.peak_of(MemoryCategory::Workspace), 32);
  EXPECT_GE(c.peak_of(MemoryCategory::Workspace), 8);
}

TEST(MemoryScopes, ChargeTheScopeTrackerUntilFreedOnAnyThread) {
  auto worker = std::make_shared<MemoryTracker>("worker0");
  Tensor kept;
  {
    MemoryScope scope(worker);
    ASSERT_FALSE(current_memory_scopes().empty());
    EXPECT_EQ(current_memory_scopes().back(), worker);
    MemoryCategoryGuard g(MemoryCategory::Parameters);
    kept = empty({64}, DType::F32);
    Tensor temporary = empty({16}, DType::F32);
  }
  EXPECT_TRUE(current_memory_scopes().empty());
  MemoryCounters c = worker->counters();
  EXPECT_EQ(c.cur(MemoryCategory::Parameters), 256);
  EXPECT_EQ(c.total_current, 256);
  EXPECT_EQ(c.total_peak, 320);
  EXPECT_EQ(c.allocations, 2);
  // Outside the scope nothing more is charged to it.
  Tensor outside = empty({8});
  EXPECT_EQ(worker->counters().total_current, 256);
  // Freed by another thread: still uncharged from the scope's tracker.
  std::thread([&kept] { kept = Tensor(); }).join();
  EXPECT_EQ(worker->counters().total_current, 0);
  EXPECT_EQ(worker->counters().cur(MemoryCategory::Parameters), 0);
}

TEST(MemoryScopes, NestedScopesChargeEveryEnclosingTracker) {
  auto outer = std::make_shared<MemoryTracker>("outer");
  auto inner = std::make_shared<MemoryTracker>("inner");
  MemoryScope a(outer);
  Tensor x = empty({10}, DType::F32);
  {
    MemoryScope b(inner);
    ASSERT_EQ(current_memory_scopes().size(), 2u);
    EXPECT_EQ(current_memory_scopes()[0], outer);
    EXPECT_EQ(current_memory_scopes()[1], inner);
    Tensor y = empty({5}, DType::F64);
    EXPECT_EQ(outer->counters().total_current, 80);
    EXPECT_EQ(inner->counters().total_current, 40);
  }
  EXPECT_EQ(outer->counters().total_current, 40);
  EXPECT_EQ(inner->counters().total_current, 0);
  // Another thread's allocations are not charged to this thread's scopes.
  std::thread([] { Tensor z = empty({100}); }).join();
  EXPECT_EQ(outer->counters().allocations, 2);
}

TEST(MemoryScopes, NullTrackerIsRefused) { EXPECT_THROW(MemoryScope s(nullptr), ValueError); }

TEST(StorageCategory, SetCategoryMovesBytesInEveryTracker) {
  auto worker = std::make_shared<MemoryTracker>("worker");
  MemoryCounters before = cpu_tracker().counters();
  {
    MemoryScope scope(worker);
    Tensor x = empty({32}, DType::F32);
    EXPECT_EQ(x.storage().category(), MemoryCategory::Activations);
    x.storage().set_category(MemoryCategory::Gradients);
    EXPECT_EQ(x.storage().category(), MemoryCategory::Gradients);
    expect_current_deltas(before, cpu_tracker().counters(), {{MemoryCategory::Gradients, 128}});
    EXPECT_EQ(worker->counters().cur(MemoryCategory::Gradients), 128);
    EXPECT_EQ(worker->counters().cur(MemoryCategory::Activations), 0);
    x.storage().set_category(MemoryCategory::Gradients);  // no-op
    EXPECT_EQ(worker->counters().cur(MemoryCategory::Gradients), 128);
  }
  // Freed from the category it was moved to.
  expect_current_deltas(before, cpu_tracker().counters(), {});
  EXPECT_EQ(worker->counters().total_current, 0);
}

TEST(StorageCategory, LeafGradientsAreChargedToGradients) {
  Generator gen(tandem::testing::fresh_seed());
  Tensor w = randn({16}, gen, DType::F64).set_requires_grad();
  Tensor loss = sum(w * w);
  loss.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().storage().category(), MemoryCategory::Gradients);
}

TEST(CpuAllocator, DataIs64ByteAlignedAndSized) {
  for (int64_t n : {1, 3, 17, 63, 64, 65, 1000}) {
    for (DType t : {DType::U8, DType::F16, DType::F32, DType::F64}) {
      Tensor x = empty({n}, t);
      auto addr = reinterpret_cast<uintptr_t>(x.storage().data());
      EXPECT_EQ(addr % 64, 0u) << n << " x " << dtype_name(t);
      EXPECT_EQ(x.storage().nbytes(), static_cast<size_t>(n) * dtype_size(t));
      EXPECT_EQ(x.storage().device(), Device::cpu());
      EXPECT_FALSE(x.storage().pinned());
    }
  }
  Storage s = Storage::allocate(100, Device::cpu(), Stream());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.data()) % 64, 0u);
  EXPECT_EQ(s.nbytes(), 100u);
  // Pinned memory without a GPU is plain host memory.
  Tensor p = empty({10}, TensorOptions(DType::F32).with_pinned());
  if (!cuda_available()) {
    EXPECT_FALSE(p.storage().pinned());
  }
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// With the fill on, fresh host memory reads as NaN in every floating dtype and -1 in the integer ones, also when
// the host cache hands back a block that held written values.
TEST(FillFresh, FreshHostMemoryReadsAsNaNEvenWhenReused) {
  const bool was = fill_fresh_host_memory();
  set_fill_fresh_host_memory(true);
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    { Tensor written = full({37}, 2.5, TensorOptions(t)); }  // its block goes back to the cache
    Tensor fresh = empty({37}, TensorOptions(t));
    for (double v : fresh.to(DType::F64).to_vector<double>()) EXPECT_TRUE(std::isnan(v)) << dtype_name(t) << ": " << v;
  }
  for (int64_t v : empty({9}, TensorOptions(DType::I64)).to_vector<int64_t>()) EXPECT_EQ(v, -1);
  set_fill_fresh_host_memory(was);
}

}  // namespace
}  // namespace tandem
