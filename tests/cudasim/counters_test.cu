// The simulated GPU's cost counters on kernels whose traffic is known: global loads and stores in 32-byte
// sectors per warp request (coalesced, strided, broadcast, misaligned, 16-byte vectors, divergent lanes),
// distinct sectors per launch, shared-memory bank conflicts, atomics, barriers, warp collectives, FLOPs, the
// launch shape and one record per launch, in every thread order. The references enumerate each warp's
// lanes and apply the hardware's definitions (a sector is an aligned 32-byte piece of memory; shared memory
// has 32 banks of 4-byte words, word w in bank w % 32).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/cuda/kernel_launch.cuh"
#include "tests/cudasim/sim_testing.h"
#include "tools/cudasim/counters_abi.h"

namespace {

using tandem::cuda::launch_kernel;
using namespace cudasim_testing;

// Records the ops of the work queued in its scope (the device's work is waited for before reading).
class Recording {
 public:
  explicit Recording(int mode = TANDEM_CUDASIM_COUNTING_ON) { tandem_cudasim_counting(mode); }
  ~Recording() { tandem_cudasim_counting(TANDEM_CUDASIM_COUNTING_OFF); }
  std::vector<TandemCudasimOp> take() {
    expect_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::vector<TandemCudasimOp> out(1024);
    out.resize(tandem_cudasim_take_ops(out.data(), out.size()));
    return out;
  }
  TandemCudasimOp only() {
    std::vector<TandemCudasimOp> ops = take();
    EXPECT_EQ(ops.size(), 1u);
    if (ops.empty()) return TandemCudasimOp{};
    return ops[0];
  }
};

bool counts_accesses() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return false;
#else
  return true;
#endif
}
#define SKIP_WITHOUT_ACCESS_COUNTS() \
  if (!counts_accesses()) GTEST_SKIP() << "the sanitizer builds do not compile kernels for the access counters"

// out[t] = in[offset + t * stride] for t < n (stride 0: every thread reads one element).
__global__ void gather(const float* in, float* out, int offset, int stride, int n) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n) out[t] = in[offset + t * stride];
}

// Distinct 32-byte sectors of the bytes [addr, addr + size) of each lane, per warp, summed over warps.
uint64_t sectors_per_warp(const std::vector<std::vector<std::pair<uintptr_t, int>>>& warps) {
  uint64_t total = 0;
  for (const auto& lanes : warps) {
    std::set<uintptr_t> s;
    for (const auto& [addr, size] : lanes)
      for (uintptr_t b = addr; b < addr + size; ++b) s.insert(b / 32);
    total += s.size();
  }
  return total;
}

struct GatherCase {
  int offset, stride, n, block;
};

void check_gather(const GatherCase& c) {
  SCOPED_TRACE("offset " + std::to_string(c.offset) + " stride " + std::to_string(c.stride) + " n " +
               std::to_string(c.n) + " block " + std::to_string(c.block));
  const int in_n = c.offset + std::max(1, c.n * c.stride);
  DeviceBuffer<float> in(0, std::vector<float>(static_cast<size_t>(in_n), 1.0f)), out(0, static_cast<size_t>(c.n));
  const int blocks = (c.n + c.block - 1) / c.block;
  Recording rec;
  launch_kernel(TD_KERNEL(gather), blocks, c.block, 0, in.stream(), in.get(), out.get(), c.offset, c.stride, c.n);
  const TandemCudasimOp op = rec.only();
  // The reference: warps of 32 consecutive threads of a block; the threads with t < n take part.
  std::vector<std::vector<std::pair<uintptr_t, int>>> loads, stores;
  std::set<uintptr_t> distinct_loads;
  for (int b = 0; b < blocks; ++b)
    for (int w = 0; w * 32 < c.block; ++w) {
      std::vector<std::pair<uintptr_t, int>> l, s;
      for (int lane = 0; lane < 32 && w * 32 + lane < c.block; ++lane) {
        const int t = b * c.block + w * 32 + lane;
        if (t >= c.n) continue;
        const uintptr_t a = reinterpret_cast<uintptr_t>(in.get() + c.offset + t * c.stride);
        l.push_back({a, 4});
        distinct_loads.insert(a / 32);
        s.push_back({reinterpret_cast<uintptr_t>(out.get() + t), 4});
      }
      if (!l.empty()) {
        loads.push_back(l);
        stores.push_back(s);
      }
    }
  EXPECT_EQ(op.kind, TANDEM_CUDASIM_KERNEL);
  EXPECT_EQ(op.global_load_requests, loads.size());
  EXPECT_EQ(op.global_store_requests, stores.size());
  EXPECT_EQ(op.global_load_sectors, sectors_per_warp(loads));
  EXPECT_EQ(op.global_store_sectors, sectors_per_warp(stores));
  EXPECT_EQ(op.global_load_bytes, 4u * static_cast<uint64_t>(c.n));
  EXPECT_EQ(op.global_store_bytes, 4u * static_cast<uint64_t>(c.n));
  EXPECT_EQ(op.distinct_load_sectors, distinct_loads.size());
  EXPECT_EQ(op.distinct_store_sectors, (4u * static_cast<uint64_t>(c.n) + 31) / 32);
}

TEST(CudasimCounters, CoalescedStridedAndBroadcastLoads) {
  SKIP_WITHOUT_ACCESS_COUNTS();
  // Coalesced: 4 sectors a warp; strided by 32 floats: a sector per lane; broadcast: one sector a warp.
  check_gather({0, 1, 1024, 256});
  check_gather({0, 32, 1024, 256});
  check_gather({0, 0, 1024, 256});
  check_gather({1, 1, 1024, 256});  // misaligned by one float: 5 sectors a warp
  std::mt19937_64 g = rng();
  for (int i = 0; i < 6; ++i) {
    const int block = 32 * static_cast<int>(1 + g() % 8) - static_cast<int>(g() % 2) * 16;  // partial warps too
    check_gather({static_cast<int>(g() % 64), static_cast<int>(g() % 40), static_cast<int>(100 + g() % 900), block});
  }
}

// A launch of many blocks counts a sample of them and scales: exact when the blocks do alike.
TEST(CudasimCounters, LargeGridsAreCountedFromEvenlySpacedBlocks) {
  SKIP_WITHOUT_ACCESS_COUNTS();
  check_gather({0, 1, 256 * 1000, 256});
  check_gather({0, 32, 128 * 300, 128});
}

TEST(CudasimCounters, RequestsDoNotDependOnTheThreadOrder) {
  SKIP_WITHOUT_ACCESS_COUNTS();
  for (int order : {1, 2}) {
    ThreadOrderGuard guard(order);
    check_gather({3, 5, 777, 128});
  }
}

// Each thread loads one float4 (16 bytes) and stores it twice as far apart.
__global__ void copy_vectors(const float4* in, float4* out, int n) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n) out[2 * t] = in[t];
}

TEST(CudasimCounters, SixteenByteAccesses) {
  SKIP_WITHOUT_ACCESS_COUNTS();
  const int n = 512;
  DeviceBuffer<float4> in(0, static_cast<size_t>(n)), out(0, static_cast<size_t>(2 * n));
  Recording rec;
  launch_kernel(TD_KERNEL(copy_vectors), n / 128, 128, 0, in.stream(), in.get(), out.get(), n);
  const TandemCudasimOp op = rec.only();
  const uint64_t warps = n / 32;
  EXPECT_EQ(op.global_load_requests, warps);
  EXPECT_EQ(op.global_load_sectors, warps * 16);   // 512 contiguous bytes a warp
  EXPECT_EQ(op.global_store_sectors, warps * 32);  // every other 16-byte piece: all 32 sectors of 1 KiB
  EXPECT_EQ(op.distinct_store_sectors, static_cast<uint64_t>(n));
  EXPECT_EQ(op.global_load_bytes, 16u * n);
}

// in is read twice at two places: each is a request; the launch touches the sectors once.
__global__ void read_twice(const float* in, float* out) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const float a = in[t];
  out[t] = a + in[(t + 32) % (blockDim.x * gridDim.x)];
}

TEST(CudasimCounters, DistinctSectorsCountRepeatedReadsOnce) {
  SKIP_WITHOUT_ACCESS_COUNTS();
  const int n = 2048;
  DeviceBuffer<float> in(0, std::vector<float>(n, 2.0f)), out(0, static_cast<size_t>(n));
  Recording rec;
  launch_kernel(TD_KERNEL(read_twice), n / 256, 256, 0, in.stream(), in.get(), out.get());
  const TandemCudasimOp op = rec.only();
  EXPECT_EQ(op.global_load_requests, 2u * n / 32);
  EXPECT_EQ(op.global_load_sectors, 2u * n / 32 * 4);
  EXPECT_EQ(op.distinct_load_sectors, static_cast<uint64_t>(n) * 4 / 32);
  EXPECT_EQ(out.download()[5], 4.0f);
}

// Lanes of one warp take different paths: the even lanes load from a, the odd ones from b.
__global__ void diverge(const float* a, const float* b, float* out) {
  const int t = threadIdx.x;
  out[t] = t % 2 == 0 ? a[t] : b[t * 8];
}

TEST(CudasimCounters, DivergentLanesMakeOneRequestPerPath) {
  SKIP_WITHOUT_ACCESS_COUNTS();
  DeviceBuffer<float> a(0, std::vector<float>(64, 1.0f)), b(0, std::vector<float>(512, 1.0f)), out(0, 64u);
  Recording rec;
  launch_kernel(TD_KERNEL(diverge), 1, 64, 0, a.stream(), a.get(), b.get(), out.get());
  const TandemCudasimOp op = rec.only();
  // Per warp: one request to a (16 even lanes, 4 bytes each, 128 bytes: 4 sectors) and one to b (16 odd
  // lanes 32 bytes apart: 16 sectors); one store of 4 sectors.
  EXPECT_EQ(op.global_load_requests, 4u);
  EXPECT_EQ(op.global_load_sectors, 2u * (4 + 16));
  EXPECT_EQ(op.global_store_sectors, 2u * 4);
}

// Every thread writes shared word (tid * stride) % 1024, then, after a barrier, reads word (tid * stride + 1) %
// 1024 and writes it out.
__global__ void shared_strides(int stride, float* out) {
  __shared__ float words[1024];
  const int t = threadIdx.x;
  words[(t * stride) % 1024] = static_cast<float>(t);
  __syncthreads();
  out[t] = words[(t * stride + 1) % 1024];
}

// The wavefronts of one warp access: the largest number of distinct words in one bank.
uint64_t wavefronts(int warp, int stride, int add) {
  std::set<int> per_bank[32];
  for (int lane = 0; lane < 32; ++lane) {
    const int word = ((warp * 32 + lane) * stride + add) % 1024;
    per_bank[word % 32].insert(word);
  }
  size_t worst = 0;
  for (const auto& s : per_bank) worst = std::max(worst, s.size());
  return worst;
}

TEST(CudasimCounters, SharedMemoryBankConflicts) {
  SKIP_WITHOUT_ACCESS_COUNTS();
  std::mt19937_64 g = rng();
  for (int stride : {0, 1, 2, 32, 33, 16, static_cast<int>(1 + g() % 100)}) {
    SCOPED_TRACE("stride " + std::to_string(stride));
    const int threads = 128;
    DeviceBuffer<float> out(0, static_cast<size_t>(threads));
    Recording rec;
    launch_kernel(TD_KERNEL(shared_strides), 1, threads, 0, out.stream(), stride, out.get());
    const TandemCudasimOp op = rec.only();
    uint64_t expected = 0;
    for (int w = 0; w < threads / 32; ++w) expected += wavefronts(w, stride, 0) + wavefronts(w, stride, 1);
    EXPECT_EQ(op.shared_requests, 2u * threads / 32);
    EXPECT_EQ(op.shared_wavefronts, expected);
    EXPECT_EQ(op.barriers, 1u);
    EXPECT_EQ(op.global_store_requests, static_cast<uint64_t>(threads / 32));  // shared accesses are not global
  }
  // The extremes by name: a stride of 32 words puts every lane in bank 0 (32 wavefronts), 33 spreads them.
  EXPECT_EQ(wavefronts(0, 32, 0), 32u);
  EXPECT_EQ(wavefronts(0, 33, 0), 1u);
}

// Lanes 0..7 write doubles x[lane] and z[lane] and lane 0 writes y[0] (declared between them: the host puts
// one of x and z 8 bytes off a 16-byte boundary); then every lane reads y[0], x[0..7] and z[0..7] in turn
// (broadcasts) and writes their sum out. Barriers between the parts keep a lane's accesses to different arrays
// from following each other; y's index is not a constant, since the instrumentation leaves out accesses the
// compiler proves to lie inside a variable.
__global__ void shared_double_rows(double* out) {
  __shared__ double x[8];
  __shared__ double y[1];
  __shared__ double z[8];
  const int t = threadIdx.x;
  if (t < 8) x[t] = t;
  __syncthreads();
  if (t < 8) z[t] = 2 * t;
  __syncthreads();
  if (t % 32 == 0) y[t / 32] = 1;
  __syncthreads();
  double s = y[t / 32];
  __syncthreads();
  for (int k = 0; k < 8; ++k) s += x[k];
  __syncthreads();
  for (int k = 0; k < 8; ++k) s += z[k];
  out[t] = s;
}

// A lane's reads of neighbouring doubles count as the 16-byte vector reads a GPU's compiler may make of them:
// one per aligned 16-byte piece of a __shared__ array, which a GPU aligns at least so. Where the host put each
// array (a test binary or a program, static or shared libraries) must not change the count.
TEST(CudasimCounters, SharedArraysAreCountedAsAlignedWhereverTheHostPutsThem) {
  SKIP_WITHOUT_ACCESS_COUNTS();
  DeviceBuffer<double> out(0, 32);
  Recording rec;
  launch_kernel(TD_KERNEL(shared_double_rows), 1, 32, 0, out.stream(), out.get());
  const TandemCudasimOp op = rec.only();
  // Stores: x, z and y one request each; loads: y, 4 pieces of x, 4 of z. Every request is one wavefront
  // (distinct words in distinct banks, or one word broadcast).
  EXPECT_EQ(op.shared_requests, 3u + 1 + 4 + 4);
  EXPECT_EQ(op.shared_wavefronts, op.shared_requests);
  EXPECT_EQ(out.download(), std::vector<double>(32, 28.0 + 56.0 + 1.0));
}

// Atomics, barriers, collectives and counted FLOPs of known numbers.
__global__ void synchronizing(unsigned* counter, float* out) {
  atomicAdd(counter, 1u);
  __syncthreads();
  float v = static_cast<float>(threadIdx.x);
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  __syncthreads();
  ::cudasim::simt::count_flops(7);
  __syncthreads();
  const unsigned block = blockIdx.y * gridDim.x + blockIdx.x, per_block = blockDim.x * blockDim.y;
  out[block * per_block + threadIdx.y * blockDim.x + threadIdx.x] = v;  // one element per thread of 2-D launches too
}

TEST(CudasimCounters, AtomicsBarriersCollectivesAndFlops) {
  const int blocks = 3, threads = 96;
  DeviceBuffer<unsigned> counter(0, std::vector<unsigned>{0u});
  DeviceBuffer<float> out(0, static_cast<size_t>(blocks * threads));
  Recording rec;
  launch_kernel(TD_KERNEL(synchronizing), blocks, threads, 0, counter.stream(), counter.get(), out.get());
  const TandemCudasimOp op = rec.only();
  EXPECT_EQ(counter.download()[0], static_cast<unsigned>(blocks * threads));
  EXPECT_EQ(op.barriers, 3u * blocks);
  EXPECT_EQ(op.warp_collectives, 2u * blocks * threads / 32);
  EXPECT_EQ(op.flops, 7.0 * blocks * threads);
  EXPECT_EQ(op.atomics, static_cast<uint64_t>(blocks * threads));
  EXPECT_EQ(op.atomic_requests, static_cast<uint64_t>(blocks * threads / 32));
}

TEST(CudasimCounters, LaunchShapeAndOneRecordPerLaunch) {
  DeviceBuffer<unsigned> counter(0, std::vector<unsigned>{0u});
  DeviceBuffer<float> out(0, 6u * 128);
  {
    Recording rec;
    for (int i = 0; i < 3; ++i)
      launch_kernel(TD_KERNEL(synchronizing), dim3(3, 2, 1), dim3(32, 4, 1), 0, counter.stream(), counter.get(),
                    out.get());
    const std::vector<TandemCudasimOp> ops = rec.take();
    ASSERT_EQ(ops.size(), 3u);
    for (const TandemCudasimOp& op : ops) {
      EXPECT_EQ(op.kind, TANDEM_CUDASIM_KERNEL);
      EXPECT_EQ(op.device, 0);
      EXPECT_EQ(op.grid[0], 3u);
      EXPECT_EQ(op.grid[1], 2u);
      EXPECT_EQ(op.grid[2], 1u);
      EXPECT_EQ(op.block[0], 32u);
      EXPECT_EQ(op.block[1], 4u);
      EXPECT_EQ(op.threads, 6u * 128);
      EXPECT_TRUE(contains(op.name, "synchronizing")) << op.name;
      EXPECT_TRUE(contains(op.detail, "counters_test.cu:")) << op.detail;
      EXPECT_EQ(op.barriers, 3u * 6);
    }
  }
  // Nothing is recorded while counting is off.
  launch_kernel(TD_KERNEL(synchronizing), 1, 32, 0, counter.stream(), counter.get(), out.get());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  TandemCudasimOp none;
  EXPECT_EQ(tandem_cudasim_take_ops(&none, 1), 0u);
}

}  // namespace
