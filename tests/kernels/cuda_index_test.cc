// CUDA index_select, gather, index_add, scatter_add and one_hot against the CPU backend (the adds bit for
// bit: both add in increasing j), and the device error flag: a bad index raises IndexError at the next
// synchronization and leaves the context usable.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/tensor/ops.h"
#include "tests/kernels/kernel_compare.h"
#include "tests/testing.h"

namespace tandem {
namespace testing {
namespace {

struct Layout {
  int64_t outer, n_src, inner, n_idx;
};
std::string name_of(const char* op, DType t, const Layout& l) {
  return std::string(op) + " " + dtype_name(t) + " [" + std::to_string(l.outer) + ", " + std::to_string(l.n_src) +
         ", " + std::to_string(l.inner) + "] x " + std::to_string(l.n_idx);
}

// Indices in [0, n) (with repeats) as an i64 CPU tensor.
Tensor random_indices(int64_t count, int64_t n) {
  return random_cpu({count}, DType::F64, 0, static_cast<double>(n)).to(DType::I64).contiguous();
}

const std::vector<Layout> kLayouts = {{1, 10, 1, 7},       {3, 50, 4, 20}, {2, 17, 3, 40},   {5, 8, 64, 30},
                                      {1, 1000, 256, 500}, {64, 30, 1, 9}, {2, 5, 1001, 12}, {300, 10, 100, 1}};

TEST(CudaIndex, IndexSelectMatchesCpuForEveryElementSize) {
  TD_REQUIRE_GPU();
  for (DType t : {DType::U8, DType::F16, DType::F32, DType::F64})
    for (const Layout& l : kLayouts)
      for (int64_t shift : {0, 1}) {
        const std::string what = name_of("index_select", t, l) + " shift=" + std::to_string(shift);
        Tensor x = random_cpu({l.outer * l.n_src * l.inner}, t, 0, 100);
        Tensor idx = random_indices(l.n_idx, l.n_src);
        const int64_t n = l.outer * l.n_idx * l.inner;
        Tensor want = empty({n}, t);
        cpu_backend().index_select(
            {t, x.raw_data(), l.outer, l.n_src, l.inner, idx.data<int64_t>(), l.n_idx, want.raw_data()}, Stream());
        Tensor xd = to_gpu(x, shift), id = to_gpu(idx);
        Guarded got(t, n, Device::cuda(0), shift);
        gpu_backend().index_select(
            {t, xd.raw_data(), l.outer, l.n_src, l.inner, id.data<int64_t>(), l.n_idx, got.data()}, gpu_stream());
        expect_bitwise_equal(to_host(got.middle()), want, what);
        got.expect_intact(what);
      }
}

TEST(CudaIndex, GatherMatchesCpu) {
  TD_REQUIRE_GPU();
  for (DType t : {DType::U8, DType::BF16, DType::F32, DType::I64})
    for (const Layout& l : kLayouts) {
      const std::string what = name_of("gather", t, l);
      Tensor x = random_cpu({l.outer * l.n_src * l.inner}, t, 0, 100);
      const int64_t n = l.outer * l.n_idx * l.inner;
      Tensor idx = random_indices(n, l.n_src);
      Tensor want = empty({n}, t);
      cpu_backend().gather({t, x.raw_data(), l.outer, l.n_src, l.inner, idx.data<int64_t>(), l.n_idx, want.raw_data()},
                           Stream());
      Tensor xd = to_gpu(x), id = to_gpu(idx);
      Guarded got(t, n, Device::cuda(0), 1);
      gpu_backend().gather({t, xd.raw_data(), l.outer, l.n_src, l.inner, id.data<int64_t>(), l.n_idx, got.data()},
                           gpu_stream());
      expect_bitwise_equal(to_host(got.middle()), want, what);
      got.expect_intact(what);
    }
}

// index_add / scatter_add into a random destination; repeated indices make the order of the adds matter,
// so equal bits show the increasing-j order. The layouts cover both kernels (few and many columns).
TEST(CudaIndex, IndexAddAndScatterAddMatchCpuBitwise) {
  TD_REQUIRE_GPU();
  std::vector<Layout> layouts = kLayouts;
  layouts.push_back({40, 6, 500, 50});  // 20000 columns: the by-column kernel
  for (DType t : {DType::F32, DType::F64})
    for (const Layout& l : layouts)
      for (bool per_element : {false, true}) {
        const std::string what = name_of(per_element ? "scatter_add" : "index_add", t, l);
        const int64_t n_src = l.outer * l.n_idx * l.inner, n_dst = l.outer * l.n_src * l.inner;
        Tensor src = random_cpu({n_src}, t, -1, 1), dst0 = random_cpu({n_dst}, t, -1, 1);
        Tensor idx = random_indices(per_element ? n_src : l.n_idx, l.n_src);
        Tensor want = dst0.clone();
        Tensor got_src = to_gpu(src), id = to_gpu(idx);
        Guarded got(t, n_dst, Device::cuda(0));
        got.load(dst0);
        if (per_element) {
          cpu_backend().scatter_add(
              {t, src.raw_data(), l.outer, l.n_idx, l.inner, idx.data<int64_t>(), l.n_src, want.raw_data()}, Stream());
          gpu_backend().scatter_add(
              {t, got_src.raw_data(), l.outer, l.n_idx, l.inner, id.data<int64_t>(), l.n_src, got.data()},
              gpu_stream());
        } else {
          cpu_backend().index_add(
              {t, src.raw_data(), l.outer, l.n_idx, l.inner, idx.data<int64_t>(), l.n_src, want.raw_data()}, Stream());
          gpu_backend().index_add(
              {t, got_src.raw_data(), l.outer, l.n_idx, l.inner, id.data<int64_t>(), l.n_src, got.data()},
              gpu_stream());
        }
        expect_bitwise_equal(to_host(got.middle()), want, what);
        got.expect_intact(what);
      }
}

TEST(CudaIndex, OneHotMatchesCpuForEveryNumericDtype) {
  TD_REQUIRE_GPU();
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64, DType::U8})
    for (int64_t classes : {int64_t{1}, int64_t{10}, int64_t{1000}}) {
      const int64_t n = 37;
      Tensor labels = random_indices(n, classes);
      Tensor want = empty({n * classes}, t);
      cpu_backend().one_hot({labels.data<int64_t>(), n, classes, t, want.raw_data()}, Stream());
      Tensor ld = to_gpu(labels);
      Guarded got(t, n * classes, Device::cuda(0), 1);
      gpu_backend().one_hot({ld.data<int64_t>(), n, classes, t, got.data()}, gpu_stream());
      const std::string what = std::string("one_hot ") + dtype_name(t) + " classes=" + std::to_string(classes);
      expect_bitwise_equal(to_host(got.middle()), want, what);
      got.expect_intact(what);
    }
}

TEST(CudaIndex, OutOfRangeIndexRaisesAtSynchronizeAndTheContextSurvives) {
  TD_REQUIRE_GPU();
  const Layout l{2, 10, 8, 5};
  Tensor x = random_cpu({l.outer * l.n_src * l.inner}, DType::F32, 0, 1);
  Tensor xd = to_gpu(x);
  Stream s = gpu_stream();
  for (int64_t bad : {int64_t{10}, int64_t{-1}, int64_t{1} << 40}) {
    Tensor idx = from_vector(std::vector<int64_t>{0, 3, bad, 9, 1}, {5});
    Tensor id = to_gpu(idx);
    Guarded out(DType::F32, l.outer * l.n_idx * l.inner, Device::cuda(0));
    gpu_backend().index_select(
        {DType::F32, xd.raw_data(), l.outer, l.n_src, l.inner, id.data<int64_t>(), l.n_idx, out.data()}, s);
    EXPECT_THROW(s.synchronize(), IndexError) << "index " << bad;
    out.expect_intact("index_select with a bad index");
    // Raised once: the flag is cleared, and later work on the same context is correct.
    EXPECT_NO_THROW(s.synchronize());
  }
  for (int64_t bad : {int64_t{10}, int64_t{-3}}) {
    Tensor idx = from_vector(std::vector<int64_t>{1, bad, 2}, {3});
    Tensor id = to_gpu(idx);
    Guarded out(DType::F32, 3 * 10, Device::cuda(0));
    gpu_backend().one_hot({id.data<int64_t>(), 3, 10, DType::F32, out.data()}, s);
    EXPECT_THROW(s.synchronize(), IndexError) << "label " << bad;
    EXPECT_NO_THROW(s.synchronize());
  }
  // scatter_add and gather report through the same flag.
  {
    Tensor idx = from_vector(std::vector<int64_t>(l.outer * 2 * l.inner, 11), {l.outer * 2 * l.inner});
    Tensor id = to_gpu(idx);
    Guarded out(DType::F32, l.outer * 2 * l.inner, Device::cuda(0));
    gpu_backend().gather({DType::F32, xd.raw_data(), l.outer, l.n_src, l.inner, id.data<int64_t>(), 2, out.data()}, s);
    EXPECT_THROW(s.synchronize(), IndexError);
    Guarded dst(DType::F32, l.outer * l.n_src * l.inner, Device::cuda(0));
    gpu_backend().scatter_add({DType::F32, out.data(), l.outer, 2, l.inner, id.data<int64_t>(), l.n_src, dst.data()},
                              s);
    EXPECT_THROW(s.synchronize(), IndexError);
    dst.expect_intact("scatter_add with bad indices");
  }
  // The context still computes correctly.
  Tensor idx = from_vector(std::vector<int64_t>{4, 0, 9}, {3});
  Tensor id = to_gpu(idx);
  Tensor want = empty({l.outer * 3 * l.inner}, DType::F32);
  cpu_backend().index_select(
      {DType::F32, x.raw_data(), l.outer, l.n_src, l.inner, idx.data<int64_t>(), 3, want.raw_data()}, Stream());
  Guarded got(DType::F32, l.outer * 3 * l.inner, Device::cuda(0));
  gpu_backend().index_select({DType::F32, xd.raw_data(), l.outer, l.n_src, l.inner, id.data<int64_t>(), 3, got.data()},
                             s);
  expect_bitwise_equal(to_host(got.middle()), want, "index_select after errors");
}

TEST(CudaIndex, OutOfRangeIndexThroughTheOpsRaisesWhenCopiedToTheHost) {
  TD_REQUIRE_GPU();
  Tensor x = random_cpu({6, 4}, DType::F32, 0, 1).to(Device::cuda(0));
  Tensor idx = from_vector(std::vector<int64_t>{0, 6}, {2}).to(Device::cuda(0));
  Tensor y = index_select(x, 0, idx);
  EXPECT_THROW(y.to(Device::cpu()), IndexError);
  Tensor ok = from_vector(std::vector<int64_t>{5, 0}, {2}).to(Device::cuda(0));
  Tensor z = index_select(x, 0, ok).to(Device::cpu());
  expect_bitwise_equal(z, index_select(x.to(Device::cpu()), 0, ok.to(Device::cpu())), "index_select after the error");
}

}  // namespace
}  // namespace testing
}  // namespace tandem
