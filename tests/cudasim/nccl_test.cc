// The simulated NCCL against references computed here on fresh random inputs: all-reduce of every op and
// datatype, broadcast from every root, all-gather, in-place variants, send/recv chains and rings, splits,
// several communicators on one device, ranks driven from one thread (ncclCommInitAll and groups) and from
// one thread per rank (ncclCommInitRank).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "tests/cudasim/sim_testing.h"

namespace {

using Buffer = cudasim_testing::DeviceBuffer<char>;
using Stream = cudasim_testing::TestStream;

struct TypeCase {
  ncclDataType_t type;
  size_t size;
  bool integer;
  bool is_signed;
  // Unit roundoff of the floating types: the largest relative error of one rounding to nearest.
  double u;
};

const TypeCase kTypes[] = {
    {ncclInt8, 1, true, true, 0},           {ncclUint8, 1, true, false, 0},
    {ncclInt32, 4, true, true, 0},          {ncclUint32, 4, true, false, 0},
    {ncclInt64, 8, true, true, 0},          {ncclUint64, 8, true, false, 0},
    {ncclFloat16, 2, false, true, 0x1p-11}, {ncclFloat32, 4, false, true, 0x1p-24},
    {ncclFloat64, 8, false, true, 0x1p-53}, {ncclBfloat16, 2, false, true, 0x1p-8},
};

const ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};

// Elements as long double, with NVIDIA's own conversions for the 16-bit floating types.
long double get(ncclDataType_t t, const std::vector<char>& bytes, size_t i) {
  const char* p = bytes.data();
  switch (t) {
    case ncclInt8: return reinterpret_cast<const int8_t*>(p)[i];
    case ncclUint8: return reinterpret_cast<const uint8_t*>(p)[i];
    case ncclInt32: return reinterpret_cast<const int32_t*>(p)[i];
    case ncclUint32: return reinterpret_cast<const uint32_t*>(p)[i];
    case ncclInt64: return static_cast<long double>(reinterpret_cast<const int64_t*>(p)[i]);
    case ncclUint64: return static_cast<long double>(reinterpret_cast<const uint64_t*>(p)[i]);
    case ncclFloat16: return __half2float(reinterpret_cast<const __half*>(p)[i]);
    case ncclFloat32: return reinterpret_cast<const float*>(p)[i];
    case ncclFloat64: return reinterpret_cast<const double*>(p)[i];
    case ncclBfloat16: return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(p)[i]);
    default: ADD_FAILURE() << "no reference for datatype " << t; return 0;
  }
}

// Stores v (an integer in range for the integer types) rounded to nearest as the type.
void put(ncclDataType_t t, std::vector<char>& bytes, size_t i, double v) {
  char* p = bytes.data();
  switch (t) {
    case ncclInt8: reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case ncclUint8: reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case ncclInt32: reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case ncclUint32: reinterpret_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v); break;
    case ncclInt64: reinterpret_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case ncclUint64: reinterpret_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v); break;
    case ncclFloat16: reinterpret_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v)); break;
    case ncclFloat32: reinterpret_cast<float*>(p)[i] = static_cast<float>(v); break;
    case ncclFloat64: reinterpret_cast<double*>(p)[i] = v; break;
    case ncclBfloat16: reinterpret_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v)); break;
    default: ADD_FAILURE() << "no reference for datatype " << t;
  }
}

// Random inputs that no sum overflows (products of the 8-bit unsigned type do wrap, which is defined).
std::vector<char> random_input(const TypeCase& tc, ncclRedOp_t op, size_t count, std::mt19937_64& rng) {
  std::vector<char> bytes(count * tc.size);
  for (size_t i = 0; i < count; ++i) {
    double v;
    if (tc.integer) {
      const int hi = op == ncclProd ? (tc.is_signed ? 3 : 15) : 40;
      v = static_cast<double>(std::uniform_int_distribution<int>(tc.is_signed ? -hi : 0, hi)(rng));
    } else if (op == ncclProd) {
      // Magnitudes near 1: no product underflows into the subnormals, where relative bounds do not hold.
      v = std::uniform_real_distribution<double>(0.5, 1.5)(rng) * (rng() % 2 == 0 ? 1 : -1);
    } else {
      v = std::uniform_real_distribution<double>(-1, 1)(rng);
    }
    put(tc.type, bytes, i, v);
  }
  return bytes;
}

// Checks an all-reduce result against the exact reduction of the inputs. Integers: exact (sums and
// products modulo 2^bits for the unsigned types; the average within 1, since how NCCL rounds an integer
// average is not documented). Floating types: NCCL documents no reduction order and reduces in the datatype
// itself (f16 and bf16 included), so each of the n-1 partial results may be rounded to the type: whatever the
// order, a sum is then within (n-1)*u*sum|x| of the exact one and a product within about (n-1)*u*|product|
// (u: the type's unit roundoff); the average adds one rounding of the division. Max and min are exact.
void expect_reduced(const TypeCase& tc, ncclRedOp_t op, const std::vector<std::vector<char>>& in,
                    const std::vector<char>& out, size_t count, const std::string& where) {
  const long double n = static_cast<long double>(in.size());
  for (size_t i = 0; i < count; ++i) {
    long double sum = 0, sum_abs = 0, prod = 1, max = get(tc.type, in[0], i), min = max;
    for (const std::vector<char>& x : in) {
      const long double v = get(tc.type, x, i);
      sum += v;
      sum_abs += std::fabs(v);
      prod *= v;
      max = std::max(max, v);
      min = std::min(min, v);
    }
    long double ref = 0, tol = 0;
    switch (op) {
      case ncclSum:
        ref = sum;
        tol = (n - 1) * tc.u * sum_abs;
        break;
      case ncclProd:
        ref = prod;
        tol = n * tc.u * std::fabs(prod);
        break;
      case ncclMax: ref = max; break;
      case ncclMin: ref = min; break;
      default:
        ref = sum / n;
        tol = tc.integer ? 0.999L : (n - 1) * tc.u * sum_abs / n + tc.u * std::fabs(ref);
        break;
    }
    if (tc.integer && !tc.is_signed && tc.size < 8)
      ref = std::fmod(ref, std::ldexp(1.0L, 8 * static_cast<int>(tc.size)));
    const long double got = get(tc.type, out, i);
    if (std::fabs(got - ref) > tol) {
      ADD_FAILURE() << where << ", element " << i << ": got " << static_cast<double>(got) << ", expected "
                    << static_cast<double>(ref) << " within " << static_cast<double>(tol);
      return;
    }
  }
}

std::vector<std::unique_ptr<Stream>> streams_on(const std::vector<int>& devices) {
  std::vector<std::unique_ptr<Stream>> s;
  for (int d : devices) s.push_back(std::make_unique<Stream>(d));
  return s;
}

TEST(NcclAllReduce, EveryOpAndDatatypeOnThreeDevicesFromOneThread) {
  std::mt19937_64 rng(cudasim_testing::fresh_seed());
  const std::vector<int> devices = {0, 1, 2};
  const int n = static_cast<int>(devices.size());
  std::vector<ncclComm_t> comms(devices.size());
  ASSERT_NCCL_OK(ncclCommInitAll(comms.data(), n, devices.data()));
  auto streams = streams_on(devices);
  const size_t count = 37;
  for (const TypeCase& tc : kTypes) {
    for (ncclRedOp_t op : kOps) {
      const std::string where = "datatype " + std::to_string(tc.type) + ", op " + std::to_string(op);
      std::vector<std::vector<char>> in;
      std::vector<std::unique_ptr<Buffer>> send, recv;
      for (int r = 0; r < n; ++r) {
        in.push_back(random_input(tc, op, count, rng));
        send.push_back(std::make_unique<Buffer>(devices[r], count * tc.size));
        recv.push_back(std::make_unique<Buffer>(devices[r], count * tc.size));
        send[r]->upload(in[r].data());
      }
      // One thread drives every rank: the calls form one group (NCCL's rule for several devices per thread).
      ASSERT_NCCL_OK(ncclGroupStart());
      for (int r = 0; r < n; ++r)
        ASSERT_NCCL_OK(ncclAllReduce(send[r]->get(), recv[r]->get(), count, tc.type, op, comms[r], streams[r]->get()));
      ASSERT_NCCL_OK(ncclGroupEnd());
      for (int r = 0; r < n; ++r) {
        ASSERT_CUDA_OK(cudaStreamSynchronize(streams[r]->get()));
        expect_reduced(tc, op, in, recv[r]->download(), count, where + ", rank " + std::to_string(r));
        EXPECT_EQ(send[r]->download(), in[r]) << where << ": the send buffer changed";
      }
    }
  }
  for (ncclComm_t c : comms) ASSERT_NCCL_OK(ncclCommDestroy(c));
}

// With two ranks a reduction is one operation, which GPU arithmetic rounds correctly (to nearest, ties to
// even): over random bit patterns of f16 and bf16, sums and products equal NVIDIA's rounding of the exact
// result (exact in double), bit for bit, overflow to infinity and subnormals included.
TEST(NcclAllReduce, TwoRanksOfSixteenBitFloatsRoundOnceToNearestEven) {
  std::mt19937_64 rng(cudasim_testing::fresh_seed());
  const std::vector<int> devices = {0, 1};
  std::vector<ncclComm_t> comms(2);
  ASSERT_NCCL_OK(ncclCommInitAll(comms.data(), 2, devices.data()));
  auto streams = streams_on(devices);
  const size_t count = 20000;
  for (ncclDataType_t type : {ncclFloat16, ncclBfloat16}) {
    const bool half = type == ncclFloat16;
    auto to_double = [&](uint16_t bits) -> double {
      return half ? __half2float(__ushort_as_half(bits)) : __bfloat162float(__ushort_as_bfloat16(bits));
    };
    auto round = [&](double v) -> uint16_t {
      return half ? __half_as_ushort(__double2half(v)) : __bfloat16_as_ushort(__double2bfloat16(v));
    };
    std::vector<std::vector<uint16_t>> in(2, std::vector<uint16_t>(count));
    for (auto& x : in)
      for (uint16_t& v : x) {
        do v = static_cast<uint16_t>(rng());
        while (std::isnan(to_double(v)));
      }
    for (ncclRedOp_t op : {ncclSum, ncclProd}) {
      std::vector<std::unique_ptr<Buffer>> bufs;
      for (int r = 0; r < 2; ++r) {
        bufs.push_back(std::make_unique<Buffer>(r, count * 2));
        bufs[r]->upload(in[r].data());
      }
      ASSERT_NCCL_OK(ncclGroupStart());
      for (int r = 0; r < 2; ++r)
        ASSERT_NCCL_OK(ncclAllReduce(bufs[r]->get(), bufs[r]->get(), count, type, op, comms[r], streams[r]->get()));
      ASSERT_NCCL_OK(ncclGroupEnd());
      ASSERT_CUDA_OK(cudaStreamSynchronize(streams[0]->get()));
      ASSERT_CUDA_OK(cudaStreamSynchronize(streams[1]->get()));
      const std::vector<char> bytes = bufs[1]->download();
      std::vector<uint16_t> got(count);
      std::memcpy(got.data(), bytes.data(), bytes.size());
      for (size_t i = 0; i < count; ++i) {
        const double a = to_double(in[0][i]), b = to_double(in[1][i]);
        const uint16_t expected = round(op == ncclSum ? a + b : a * b);
        if (std::isnan(to_double(expected))) continue;  // inf - inf: any NaN will do
        if (got[i] != expected) {
          ADD_FAILURE() << (half ? "f16 " : "bf16 ") << (op == ncclSum ? "sum" : "product") << " of " << a << " and "
                        << b << ": got bits " << got[i] << ", expected " << expected;
          break;
        }
      }
    }
  }
  for (ncclComm_t c : comms) ASSERT_NCCL_OK(ncclCommDestroy(c));
}

// Rank threads with ncclCommInitRank: in-place all-reduce, broadcast from every root (in place and not),
// all-gather out of place and in place (each rank's part at its offset of the result).
TEST(NcclCollectives, OneThreadPerRankOnFourDevices) {
  std::mt19937_64 rng(cudasim_testing::fresh_seed());
  const int n = 4;
  const size_t count = 4099, bytes = count * sizeof(float);
  const TypeCase& f32 = kTypes[7];
  std::vector<std::vector<char>> in;
  for (int r = 0; r < n; ++r) in.push_back(random_input(f32, ncclSum, count, rng));
  ncclUniqueId id;
  ASSERT_NCCL_OK(ncclGetUniqueId(&id));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ASSERT_CUDA_OK(cudaSetDevice(r));
      ncclComm_t comm = nullptr;
      ASSERT_NCCL_OK(ncclCommInitRank(&comm, n, id, r));
      Stream s(r);
      const std::string me = "rank " + std::to_string(r);

      Buffer a(r, bytes);
      a.upload(in[r].data());
      ASSERT_NCCL_OK(ncclAllReduce(a.get(), a.get(), count, ncclFloat32, ncclSum, comm, s.get()));
      ASSERT_CUDA_OK(cudaStreamSynchronize(s.get()));
      expect_reduced(f32, ncclSum, in, a.download(), count, "in-place all-reduce on " + me);

      for (int root = 0; root < n; ++root) {
        Buffer same(r, bytes), src(r, bytes), dst(r, bytes);
        same.upload(in[r].data());
        src.upload(in[r].data());
        ASSERT_NCCL_OK(ncclBroadcast(same.get(), same.get(), count, ncclFloat32, root, comm, s.get()));
        ASSERT_NCCL_OK(ncclBroadcast(src.get(), dst.get(), count, ncclFloat32, root, comm, s.get()));
        ASSERT_CUDA_OK(cudaStreamSynchronize(s.get()));
        EXPECT_EQ(same.download(), in[root]) << "in-place broadcast from " << root << " on " << me;
        EXPECT_EQ(dst.download(), in[root]) << "broadcast from " << root << " on " << me;
      }

      Buffer mine(r, bytes), gathered(r, n * bytes), in_place(r, n * bytes);
      mine.upload(in[r].data());
      char* my_part = in_place.as<char>() + r * bytes;
      ASSERT_CUDA_OK(cudaMemcpy(my_part, in[r].data(), bytes, cudaMemcpyHostToDevice));
      ASSERT_NCCL_OK(ncclAllGather(mine.get(), gathered.get(), count, ncclFloat32, comm, s.get()));
      ASSERT_NCCL_OK(ncclAllGather(my_part, in_place.get(), count, ncclFloat32, comm, s.get()));
      ASSERT_CUDA_OK(cudaStreamSynchronize(s.get()));
      std::vector<char> expected;
      for (int q = 0; q < n; ++q) expected.insert(expected.end(), in[q].begin(), in[q].end());
      EXPECT_EQ(gathered.download(), expected) << "all-gather on " << me;
      EXPECT_EQ(in_place.download(), expected) << "in-place all-gather on " << me;
      ASSERT_NCCL_OK(ncclCommDestroy(comm));
    });
  }
  for (std::thread& t : threads) t.join();
}

std::vector<char> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<char> b(n);
  for (char& c : b) c = static_cast<char>(rng());
  return b;
}

// A ring in one group per rank, all ranks from one thread: every rank sends to the next and receives from the
// previous one, each message of its own size. Outside a group the sends would block each other.
TEST(NcclSendRecv, RingInOneGroupFromOneThread) {
  std::mt19937_64 rng(cudasim_testing::fresh_seed());
  const std::vector<int> devices = {0, 1, 2, 3};
  const int n = 4;
  std::vector<ncclComm_t> comms(n);
  ASSERT_NCCL_OK(ncclCommInitAll(comms.data(), n, devices.data()));
  auto streams = streams_on(devices);
  std::vector<std::vector<char>> msg;
  std::vector<std::unique_ptr<Buffer>> send, recv;
  auto count_of = [](int r) { return size_t{1000} + static_cast<size_t>(r) * 7; };
  for (int r = 0; r < n; ++r) {
    msg.push_back(random_bytes(count_of(r) * 2, rng));
    send.push_back(std::make_unique<Buffer>(r, msg[r].size()));
    send[r]->upload(msg[r].data());
    recv.push_back(std::make_unique<Buffer>(r, count_of((r + n - 1) % n) * 2));
  }
  ASSERT_NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    ASSERT_NCCL_OK(ncclSend(send[r]->get(), count_of(r), ncclFloat16, next, comms[r], streams[r]->get()));
    ASSERT_NCCL_OK(ncclRecv(recv[r]->get(), count_of(prev), ncclFloat16, prev, comms[r], streams[r]->get()));
  }
  ASSERT_NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < n; ++r) {
    ASSERT_CUDA_OK(cudaStreamSynchronize(streams[r]->get()));
    EXPECT_EQ(recv[r]->download(), msg[(r + n - 1) % n]) << "rank " << r;
  }
  for (ncclComm_t c : comms) ASSERT_NCCL_OK(ncclCommDestroy(c));
}

// Ungrouped calls from one thread per rank: a chain 0 -> 1 -> 2 -> 3 where each rank forwards what it
// received (stream order), and two messages between one pair received in the order they were sent.
TEST(NcclSendRecv, ChainAndIssueOrderFromOneThreadPerRank) {
  std::mt19937_64 rng(cudasim_testing::fresh_seed());
  const int n = 4;
  const std::vector<int> devices = {0, 1, 2, 3};
  std::vector<ncclComm_t> comms(n);
  ASSERT_NCCL_OK(ncclCommInitAll(comms.data(), n, devices.data()));
  const std::vector<char> payload = random_bytes(8 * 513, rng), first = random_bytes(80, rng),
                          second = random_bytes(160, rng);
  std::vector<std::vector<char>> got(n);
  std::vector<char> got_first, got_second;  // written by rank 1's thread
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Stream s(r);
      Buffer buf(r, payload.size());
      if (r == 0) buf.upload(payload.data());
      if (r > 0) ASSERT_NCCL_OK(ncclRecv(buf.get(), 513, ncclFloat64, r - 1, comms[r], s.get()));
      if (r < n - 1) ASSERT_NCCL_OK(ncclSend(buf.get(), 513, ncclFloat64, r + 1, comms[r], s.get()));
      if (r == 0 || r == 1) {
        Buffer a(r, first.size()), b(r, second.size());
        if (r == 0) {
          a.upload(first.data());
          b.upload(second.data());
          ASSERT_NCCL_OK(ncclSend(a.get(), first.size(), ncclUint8, 1, comms[r], s.get()));
          ASSERT_NCCL_OK(ncclSend(b.get(), second.size(), ncclUint8, 1, comms[r], s.get()));
        } else {
          ASSERT_NCCL_OK(ncclRecv(a.get(), first.size(), ncclUint8, 0, comms[r], s.get()));
          ASSERT_NCCL_OK(ncclRecv(b.get(), second.size(), ncclUint8, 0, comms[r], s.get()));
        }
        ASSERT_CUDA_OK(cudaStreamSynchronize(s.get()));
        if (r == 1) {
          got_first = a.download();
          got_second = b.download();
        }
      }
      ASSERT_CUDA_OK(cudaStreamSynchronize(s.get()));
      got[r] = buf.download();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(got[r], payload) << "rank " << r;
  EXPECT_EQ(got_first, first);
  EXPECT_EQ(got_second, second);
  for (ncclComm_t c : comms) ASSERT_NCCL_OK(ncclCommDestroy(c));
}

// A send occupies its stream until the matching receive has copied the data (NCCL: "blocking for the GPU").
TEST(NcclSendRecv, SendHoldsItsStreamUntilReceived) {
  std::mt19937_64 rng(cudasim_testing::fresh_seed());
  const std::vector<int> devices = {2, 3};
  std::vector<ncclComm_t> comms(2);
  ASSERT_NCCL_OK(ncclCommInitAll(comms.data(), 2, devices.data()));
  auto streams = streams_on(devices);
  const std::vector<char> data = random_bytes(4096, rng);
  Buffer src(2, data.size()), dst(3, data.size());
  src.upload(data.data());
  ASSERT_NCCL_OK(ncclSend(src.get(), data.size() / 4, ncclInt32, 1, comms[0], streams[0]->get()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(cudaStreamQuery(streams[0]->get()), cudaErrorNotReady);
  ASSERT_NCCL_OK(ncclRecv(dst.get(), data.size() / 4, ncclInt32, 0, comms[1], streams[1]->get()));
  ASSERT_CUDA_OK(cudaStreamSynchronize(streams[0]->get()));
  ASSERT_CUDA_OK(cudaStreamSynchronize(streams[1]->get()));
  EXPECT_EQ(dst.download(), data);
  for (ncclComm_t c : comms) ASSERT_NCCL_OK(ncclCommDestroy(c));
}

// Two communicators over the same two devices (as data-parallel groups of SM-partition workers would be),
// each rank on a stream of its own. NCCL calls it unsafe to issue to communicators of one device from
// several threads at once, so one thread per device issues both communicators' operations, in the same
// order on every device.
TEST(NcclCommunicators, SeveralShareTheDevices) {
  std::mt19937_64 rng(cudasim_testing::fresh_seed());
  const std::vector<int> a_devices = {0, 1}, b_devices = {1, 0};
  std::vector<ncclComm_t> a(2), b(2);
  ASSERT_NCCL_OK(ncclCommInitAll(a.data(), 2, a_devices.data()));
  ASSERT_NCCL_OK(ncclCommInitAll(b.data(), 2, b_devices.data()));
  const TypeCase& i32 = kTypes[2];
  const size_t count = 301;
  const int rounds = 8;
  // inputs[communicator][rank][round]
  std::vector<std::vector<char>> inputs[2][2];
  for (auto& comm : inputs)
    for (auto& rank : comm)
      for (int i = 0; i < rounds; ++i) rank.push_back(random_input(i32, ncclSum, count, rng));
  std::vector<std::thread> threads;
  for (int device = 0; device < 2; ++device) {
    threads.emplace_back([&, device] {
      // On this device: rank `device` of a, rank 1 - device of b.
      const int rank_of[2] = {device, 1 - device};
      const ncclComm_t comm_of[2] = {a[device], b[1 - device]};
      Stream s0(device), s1(device);
      const Stream* stream_of[2] = {&s0, &s1};
      Buffer buf0(device, count * 4), buf1(device, count * 4);
      Buffer* buf_of[2] = {&buf0, &buf1};
      for (int i = 0; i < rounds; ++i) {
        for (int c = 0; c < 2; ++c) {
          buf_of[c]->upload(inputs[c][rank_of[c]][i].data());
          ASSERT_NCCL_OK(ncclAllReduce(buf_of[c]->get(), buf_of[c]->get(), count, ncclInt32, ncclSum, comm_of[c],
                                       stream_of[c]->get()));
        }
        for (int c = 0; c < 2; ++c) {
          ASSERT_CUDA_OK(cudaStreamSynchronize(stream_of[c]->get()));
          expect_reduced(i32, ncclSum, {inputs[c][0][i], inputs[c][1][i]}, buf_of[c]->download(), count,
                         "communicator " + std::to_string(c) + " on cuda:" + std::to_string(device) + ", round " +
                             std::to_string(i));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (ncclComm_t c : a) ASSERT_NCCL_OK(ncclCommDestroy(c));
  for (ncclComm_t c : b) ASSERT_NCCL_OK(ncclCommDestroy(c));
}

// NCCL's pattern for several devices per thread: ncclCommInitRank of each inside one group; the
// communicators exist once the group ends.
TEST(NcclCommunicators, InitRankInAGroupFromOneThread) {
  const std::vector<int> devices = {1, 2, 3};
  const int n = 3;
  ncclUniqueId id;
  ASSERT_NCCL_OK(ncclGetUniqueId(&id));
  std::vector<ncclComm_t> comms(n, nullptr);
  ASSERT_NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    ASSERT_CUDA_OK(cudaSetDevice(devices[r]));
    ASSERT_NCCL_OK(ncclCommInitRank(&comms[r], n, id, r));
  }
  EXPECT_EQ(comms[0], nullptr) << "completed before ncclGroupEnd";
  ASSERT_NCCL_OK(ncclGroupEnd());
  auto streams = streams_on(devices);
  std::vector<std::unique_ptr<Buffer>> bufs;
  ASSERT_NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    ASSERT_NE(comms[r], nullptr);
    bufs.push_back(std::make_unique<Buffer>(devices[r], 8));
    const int64_t v = int64_t{1} << (20 * r);
    bufs[r]->upload(&v);
    ASSERT_NCCL_OK(ncclAllReduce(bufs[r]->get(), bufs[r]->get(), 1, ncclInt64, ncclSum, comms[r], streams[r]->get()));
  }
  ASSERT_NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < n; ++r) {
    ASSERT_CUDA_OK(cudaStreamSynchronize(streams[r]->get()));
    int64_t got;
    std::memcpy(&got, bufs[r]->download().data(), 8);
    EXPECT_EQ(got, 1 + (int64_t{1} << 20) + (int64_t{1} << 40)) << "rank " << r;
  }
  for (ncclComm_t c : comms) ASSERT_NCCL_OK(ncclCommDestroy(c));
}

// Gathers every rank's `value` over `comm` (one int32 each).
std::vector<int32_t> gather_values(ncclComm_t comm, int device, int size, int32_t value, cudaStream_t s) {
  Buffer one(device, 4), all(device, 4 * static_cast<size_t>(size));
  one.upload(&value);
  EXPECT_EQ(ncclAllGather(one.get(), all.get(), 1, ncclInt32, comm, s), ncclSuccess) << ncclGetLastError(nullptr);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const std::vector<char> bytes = all.download();
  std::vector<int32_t> out(static_cast<size_t>(size));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// ncclCommSplit from one thread per rank, as Tandem's workers call it: colors pick the members, keys order
// them (ties in the parent's order), NCCL_SPLIT_NOCOLOR gives no communicator. The new ranks are read back
// with an all-gather of the parent ranks over each new communicator.
TEST(NcclCommunicators, SplitByColorAndKey) {
  const int n = 4;
  const std::vector<int> devices = {0, 1, 2, 3};
  std::vector<ncclComm_t> comms(n);
  ASSERT_NCCL_OK(ncclCommInitAll(comms.data(), n, devices.data()));
  std::vector<std::vector<int32_t>> by_key(n), by_tie(n);
  std::vector<ncclComm_t> nocolor(n, nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Stream s(r);
      // Colors: {0, 2} by descending key, {1}; rank 3 takes no part.
      ncclComm_t child = nullptr;
      const int color = r == 3 ? NCCL_SPLIT_NOCOLOR : r % 2;
      ASSERT_NCCL_OK(ncclCommSplit(comms[r], color, -r, &child, nullptr));
      if (r == 3) {
        nocolor[r] = child;
      } else {
        by_key[r] = gather_values(child, r, r % 2 == 0 ? 2 : 1, r, s.get());
        ASSERT_NCCL_OK(ncclCommDestroy(child));
      }
      ncclComm_t all = nullptr;
      ASSERT_NCCL_OK(ncclCommSplit(comms[r], 7, 0, &all, nullptr));
      by_tie[r] = gather_values(all, r, n, r, s.get());
      ASSERT_NCCL_OK(ncclCommDestroy(all));
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(by_key[0], (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(by_key[2], (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(by_key[1], (std::vector<int32_t>{1}));
  EXPECT_EQ(nocolor[3], nullptr);
  for (int r = 0; r < n; ++r) EXPECT_EQ(by_tie[r], (std::vector<int32_t>{0, 1, 2, 3})) << "rank " << r;
  for (ncclComm_t c : comms) ASSERT_NCCL_OK(ncclCommDestroy(c));
}

// The same split from one thread: NCCL's group makes the blocking splits of several ranks complete together.
TEST(NcclCommunicators, SplitInAGroupFromOneThread) {
  const int n = 3;
  const std::vector<int> devices = {1, 2, 3};
  std::vector<ncclComm_t> comms(n), halves(n, nullptr);
  ASSERT_NCCL_OK(ncclCommInitAll(comms.data(), n, devices.data()));
  ASSERT_NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) ASSERT_NCCL_OK(ncclCommSplit(comms[r], r == 1 ? 5 : 4, 0, &halves[r], nullptr));
  ASSERT_NCCL_OK(ncclGroupEnd());
  auto streams = streams_on(devices);
  std::vector<std::unique_ptr<Buffer>> one, all;
  for (int r = 0; r < n; ++r) {
    one.push_back(std::make_unique<Buffer>(devices[r], 4));
    const int32_t v = 10 + r;
    one[r]->upload(&v);
    all.push_back(std::make_unique<Buffer>(devices[r], 8));
  }
  ASSERT_NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r)
    ASSERT_NCCL_OK(ncclAllGather(one[r]->get(), all[r]->get(), 1, ncclInt32, halves[r], streams[r]->get()));
  ASSERT_NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < n; ++r) ASSERT_CUDA_OK(cudaStreamSynchronize(streams[r]->get()));
  for (int r : {0, 2}) {
    std::vector<char> bytes = all[r]->download();
    std::vector<int32_t> v(2);
    std::memcpy(v.data(), bytes.data(), 8);
    EXPECT_EQ(v, (std::vector<int32_t>{10, 12})) << "rank " << r;
  }
  std::vector<char> single = all[1]->download();
  int32_t v1;
  std::memcpy(&v1, single.data(), 4);
  EXPECT_EQ(v1, 11);
  for (ncclComm_t c : halves) ASSERT_NCCL_OK(ncclCommDestroy(c));
  for (ncclComm_t c : comms) ASSERT_NCCL_OK(ncclCommDestroy(c));
}

// One rank alone: collectives copy, and a send to itself completes inside a group.
TEST(NcclCommunicators, OneRankAndASendToItself) {
  std::mt19937_64 rng(cudasim_testing::fresh_seed());
  ncclComm_t comm = nullptr;
  const int device = 3;
  ASSERT_NCCL_OK(ncclCommInitAll(&comm, 1, &device));
  Stream s(device);
  const std::vector<char> data = random_bytes(1024, rng);
  Buffer src(device, data.size()), reduced(device, data.size()), gathered(device, data.size()),
      self(device, data.size());
  src.upload(data.data());
  ASSERT_NCCL_OK(ncclAllReduce(src.get(), reduced.get(), data.size() / 8, ncclUint64, ncclMax, comm, s.get()));
  ASSERT_NCCL_OK(ncclAllGather(src.get(), gathered.get(), data.size(), ncclInt8, comm, s.get()));
  ASSERT_NCCL_OK(ncclGroupStart());
  ASSERT_NCCL_OK(ncclSend(src.get(), data.size() / 2, ncclBfloat16, 0, comm, s.get()));
  ASSERT_NCCL_OK(ncclRecv(self.get(), data.size() / 2, ncclBfloat16, 0, comm, s.get()));
  ASSERT_NCCL_OK(ncclGroupEnd());
  ASSERT_CUDA_OK(cudaStreamSynchronize(s.get()));
  EXPECT_EQ(reduced.download(), data);
  EXPECT_EQ(gathered.download(), data);
  EXPECT_EQ(self.download(), data);
  ASSERT_NCCL_OK(ncclCommDestroy(comm));
}

// Nested groups issue at the outermost ncclGroupEnd; a collective of no elements returns at once (NCCL
// returns before queuing one), so the other rank need not call it.
TEST(NcclGroups, NestAndZeroCountCollectivesAreNoOps) {
  const std::vector<int> devices = {0, 1};
  std::vector<ncclComm_t> comms(2);
  ASSERT_NCCL_OK(ncclCommInitAll(comms.data(), 2, devices.data()));
  auto streams = streams_on(devices);
  Buffer x0(0, 4), x1(1, 4);
  const float one = 1.5f, two = 2.5f;
  x0.upload(&one);
  x1.upload(&two);
  ASSERT_NCCL_OK(ncclAllReduce(x0.get(), x0.get(), 0, ncclFloat32, ncclSum, comms[0], streams[0]->get()));
  ASSERT_NCCL_OK(ncclGroupStart());
  ASSERT_NCCL_OK(ncclAllReduce(x0.get(), x0.get(), 1, ncclFloat32, ncclSum, comms[0], streams[0]->get()));
  ASSERT_NCCL_OK(ncclGroupStart());
  ASSERT_NCCL_OK(ncclAllReduce(x1.get(), x1.get(), 1, ncclFloat32, ncclSum, comms[1], streams[1]->get()));
  ASSERT_NCCL_OK(ncclGroupEnd());
  EXPECT_EQ(cudaStreamQuery(streams[0]->get()), cudaSuccess) << "queued before the outermost ncclGroupEnd";
  ASSERT_NCCL_OK(ncclGroupEnd());
  for (auto& s : streams) ASSERT_CUDA_OK(cudaStreamSynchronize(s->get()));
  float r0, r1;
  std::memcpy(&r0, x0.download().data(), 4);
  std::memcpy(&r1, x1.download().data(), 4);
  EXPECT_EQ(r0, 4.0f);
  EXPECT_EQ(r1, 4.0f);
  for (ncclComm_t c : comms) ASSERT_NCCL_OK(ncclCommDestroy(c));
}

}  // namespace
