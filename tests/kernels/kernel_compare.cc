// Helpers for the CUDA-vs-CPU kernel tests.
#include "tests/kernels/kernel_compare.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "runtime/base/cuda_check.h"
#include "runtime/memory/stream.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace testing {

namespace {
void copy_bytes(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (n == 0) return;
  Stream s = gpu_stream();
  TD_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kind, s.cuda()));
  TD_CUDA_CHECK(cudaStreamSynchronize(s.cuda()));
}
}  // namespace

Guarded::Guarded(DType t, int64_t n, Device device, int64_t shift) : n_(n) {
  // The guard before the middle spans whole 64-byte lines: with shift 0 the middle is as aligned as the
  // allocation, so kernels take their vector paths.
  const int64_t elem = static_cast<int64_t>(dtype_size(t));
  before_ = (kGuardElements * elem + 63) / 64 * 64 / elem + shift;
  const int64_t total = before_ + n + kGuardElements;
  whole_ = empty({total}, TensorOptions(t).with_device(device));
  const size_t bytes = whole_.nbytes();
  if (device.is_cpu()) {
    std::memset(whole_.raw_data(), kSentinelByte, bytes);
  } else {
    std::vector<uint8_t> pattern(bytes, kSentinelByte);
    copy_bytes(whole_.raw_data(), pattern.data(), bytes, cudaMemcpyHostToDevice);
  }
  middle_ = whole_.narrow(0, before_, n);
}

void Guarded::load(const Tensor& host) const {
  ASSERT_TRUE(host.is_contiguous() && host.device().is_cpu() && host.dtype() == middle_.dtype() && host.numel() == n_);
  if (middle_.device().is_cpu())
    std::memcpy(middle_.raw_data(), host.raw_data(), host.nbytes());
  else
    copy_bytes(middle_.raw_data(), host.raw_data(), host.nbytes(), cudaMemcpyHostToDevice);
}

void Guarded::expect_intact(const std::string& what) const {
  const size_t bytes = whole_.nbytes(), elem = dtype_size(whole_.dtype());
  std::vector<uint8_t> host(bytes);
  if (whole_.device().is_cpu())
    std::memcpy(host.data(), whole_.raw_data(), bytes);
  else
    copy_bytes(host.data(), whole_.raw_data(), bytes, cudaMemcpyDeviceToHost);
  const size_t lo = static_cast<size_t>(before_) * elem, hi = static_cast<size_t>(before_ + n_) * elem;
  size_t bad = 0;
  for (size_t i = 0; i < bytes; ++i)
    if ((i < lo || i >= hi) && host[i] != kSentinelByte) ++bad;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " guard bytes around the output were overwritten";
}

Tensor random_cpu(const Shape& shape, DType t, double lo, double hi) {
  Generator g(fresh_seed());
  return uniform(shape, lo, hi, g, TensorOptions(DType::F64)).to(t).contiguous();
}

Tensor to_gpu(const Tensor& x, int64_t shift) {
  EXPECT_TRUE(x.is_contiguous() && x.device().is_cpu());
  Tensor whole = empty({x.numel() + shift}, TensorOptions(x.dtype()).with_device(Device::cuda(0)));
  Tensor out = whole.narrow(0, shift, x.numel()).view(x.shape());
  copy_bytes(out.raw_data(), x.raw_data(), x.nbytes(), cudaMemcpyHostToDevice);
  return out;
}

const void* gpu_mirror(const Tensor& x, Tensor& holder) {
  EXPECT_TRUE(x.device().is_cpu());
  const size_t bytes = x.storage().nbytes();
  holder = empty({static_cast<int64_t>(bytes)}, TensorOptions(DType::U8).with_device(Device::cuda(0)));
  copy_bytes(holder.raw_data(), x.storage().data(), bytes, cudaMemcpyHostToDevice);
  const size_t offset =
      static_cast<size_t>(static_cast<const uint8_t*>(x.raw_data()) - static_cast<const uint8_t*>(x.storage().data()));
  return static_cast<const uint8_t*>(holder.raw_data()) + offset;
}

Tensor to_host(const Tensor& x) {
  if (x.device().is_cpu()) return x;
  EXPECT_TRUE(x.is_contiguous());
  Tensor out = empty(x.shape(), TensorOptions(x.dtype()));
  copy_bytes(out.raw_data(), x.raw_data(), x.nbytes(), cudaMemcpyDeviceToHost);
  return out;
}

Backend& cpu_backend() { return backend_for(Device::cpu()); }
Backend& gpu_backend() { return backend_for(Device::cuda(0)); }
Stream gpu_stream() { return current_stream(Device::cuda(0)); }

double tolerance(DType t) { return t == DType::F64 ? 1e-12 : 2e-6; }

}  // namespace testing
}  // namespace tandem
