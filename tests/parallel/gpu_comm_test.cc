// GPU tests of workers (GPUs, green-context SM partitions) and communicators: the local backend on CUDA
// tensors (SM partitions of one GPU, several GPUs) and the NCCL backend. Each skips without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/nccl_comm.h"
#include "parallel/worker.h"
#include "runtime/base/error.h"
#include "tests/parallel/comm_testing.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace {

using tandem::testing::expect_bitwise_equal;
using tandem::testing::fresh_seed;
using testing::rank_input;
using testing::rank_order_sum_reference;

TEST(WorkerGpu, DevicesAndPartitions) {
  TD_REQUIRE_GPU();
  std::vector<Worker> g = make_workers("cuda:0");
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].kind, WorkerKind::CudaDevice);
  EXPECT_EQ(g[0].name(), "cuda:0");
  EXPECT_GT(g[0].sm_count, 0);
  EXPECT_TRUE(g[0].compute != g[0].comm);

  std::vector<Worker> p = make_workers("cuda:0/4");
  ASSERT_EQ(p.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(p[i].kind, WorkerKind::CudaPartition);
    EXPECT_EQ(p[i].partition, i);
    EXPECT_EQ(p[i].partitions, 4);
    EXPECT_EQ(p[i].name(), "cuda:0/4#" + std::to_string(i));
    EXPECT_TRUE(p[i].compute.device() == Device::cuda(0));
    if (p[i].green_context) {
      // Equal, disjoint shares: together at most the whole GPU.
      EXPECT_EQ(p[i].sm_count, p[0].sm_count);
      EXPECT_LE(4 * p[i].sm_count, g[0].sm_count);
      EXPECT_GT(p[i].sm_count, 0);
    } else {
      EXPECT_EQ(p[i].sm_count, g[0].sm_count);
    }
  }
  std::printf("cuda:0 has %d SMs; cuda:0/4 partitions: %d SMs each, green contexts: %s\n", g[0].sm_count, p[0].sm_count,
              p[0].green_context ? "yes" : "no");
}

// One process of a multi-process run makes its own worker only: streams (and so a context) on its GPU alone.
TEST(WorkerGpu, OneWorkerIsBuiltOnItsOwnGpuOnly) {
  TD_REQUIRE_GPU();
  const int n = cuda_device_count();
  const std::string all = "cuda:0-" + std::to_string(n - 1);
  const uint64_t before = Stream::create(Device::cpu()).id();
  Worker last = make_worker(all, n - 1);
  EXPECT_EQ(Stream::create(Device::cpu()).id() - before - 1, 2u) << "streams made for one GPU worker";
  EXPECT_EQ(last.rank, n - 1);
  EXPECT_EQ(last.kind, WorkerKind::CudaDevice);
  EXPECT_EQ(last.device, Device::cuda(n - 1));
  EXPECT_EQ(last.compute.device(), Device::cuda(n - 1));
  EXPECT_EQ(last.comm.device(), Device::cuda(n - 1));

  // The partition a rank gets is the one make_workers gives it: same GPU, index and SM share.
  const std::string parts = n >= 2 ? "cuda:0/2,cuda:1/2" : "cuda:0/4";
  std::vector<Worker> every = make_workers(parts);
  for (const Worker& want : every) {
    Worker got = make_worker(parts, want.rank);
    EXPECT_EQ(got.name(), want.name());
    EXPECT_EQ(got.device, want.device);
    EXPECT_EQ(got.partition, want.partition);
    EXPECT_EQ(got.partitions, want.partitions);
    EXPECT_EQ(got.sm_count, want.sm_count);
    EXPECT_EQ(got.green_context, want.green_context);
    EXPECT_EQ(got.compute.device(), want.device);
    EXPECT_TRUE(got.compute != want.compute) << "a worker of its own, with streams of its own";
  }
}

TEST(WorkerGpu, RunOnPartitionsComputesOnTheirStreams) {
  TD_REQUIRE_GPU();
  std::vector<Worker> p = make_workers("cuda:0/2");
  run_on_workers(p, [](Worker& me) {
    EXPECT_TRUE(current_stream(me.device) == me.compute);
    Tensor t = full({1000}, me.rank + 1.0, Device::cuda(0));
    EXPECT_EQ(t.to_vector<float>()[999], me.rank + 1.0f);
  });
  for (const Worker& x : p) EXPECT_GE(x.memory->counters().total_peak, 4000);
}

std::string all_gpus() { return "cuda:0-" + std::to_string(cuda_device_count() - 1); }

// Point-to-point, every collective and a split on `workers`, each checked bitwise against the rank-order
// reference computed on the host (the CUDA kernel and the CPU loop share their arithmetic).
void check_communicator(std::vector<Worker>& workers, std::vector<std::shared_ptr<Communicator>>& comms,
                        bool with_split) {
  const int n = static_cast<int>(workers.size());
  const uint64_t seed = fresh_seed();
  const int64_t big = (1 << 20) + 3;  // large enough for a copy to still run when a race would write over it
  std::vector<Tensor> in;
  for (int r = 0; r < n; ++r) in.push_back(rank_input(seed, r, {big}, DType::F32));
  const Tensor sum = rank_order_sum_reference(in, 1.0 / n);
  std::vector<Tensor> rows;
  for (int r = 0; r < n; ++r) rows.push_back(rank_input(seed + 1, r, {2 * n, 3}, DType::F64));
  const Tensor row_sum = rank_order_sum_reference(rows, 1.0);
  run_on_workers(workers, [&](Worker& w) {
    Communicator& c = *comms[w.rank];
    const Device dev = w.device;
    const int next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;
    if (n >= 2) {
      // A ring; odd ranks receive first, which NCCL needs (see nccl_comm.h). The sender overwrites its buffer
      // right after wait(): the copy must still see the old values.
      Tensor buf = in[c.rank()].to(dev);
      Tensor got = empty({big}, TensorOptions(DType::F32).with_device(dev));
      if (c.rank() % 2 == 1) c.recv(got, prev, 3);
      Request r = c.isend(buf, next, 3);
      if (c.rank() % 2 == 0) c.recv(got, prev, 3);
      r.wait();
      buf.fill_(-1.0);
      expect_bitwise_equal(got, in[prev], "p2p on " + w.name());
    }

    Tensor t = in[c.rank()].to(dev);
    c.all_reduce(t, 1.0 / n);
    expect_bitwise_equal(t, sum, "all_reduce on " + w.name());

    Tensor b = in[c.rank()].to(dev);
    c.broadcast(b, n - 1);
    expect_bitwise_equal(b, in[n - 1], "broadcast on " + w.name());

    Tensor mine = rows[c.rank()].to(dev);
    Tensor gathered = empty({2 * n * n, 3}, TensorOptions(DType::F64).with_device(dev));
    c.all_gather(mine, gathered);
    for (int s = 0; s < n; ++s) expect_bitwise_equal(gathered.narrow(0, 2 * n * s, 2 * n), rows[s], "all_gather");

    Tensor part = empty({2, 3}, TensorOptions(DType::F64).with_device(dev));
    c.reduce_scatter(mine, part);
    expect_bitwise_equal(part, row_sum.narrow(0, 2 * c.rank(), 2).contiguous(), "reduce_scatter on " + w.name());
    c.barrier();

    if (with_split && n >= 2) {
      std::shared_ptr<Communicator> pair = c.split({0, 1});
      if (c.rank() < 2) {
        ASSERT_NE(pair, nullptr);
        Tensor x = in[c.rank()].to(dev);
        pair->all_reduce(x);
        expect_bitwise_equal(x, rank_order_sum_reference({in[0], in[1]}, 1.0), "split pair");
      } else {
        EXPECT_EQ(pair, nullptr);
      }
    }
  });
}

TEST(LocalCuda, SmPartitionsOfOneGpu) {
  TD_REQUIRE_GPU();
  std::vector<Worker> workers = make_workers("cuda:0/4");
  std::vector<std::shared_ptr<Communicator>> comms = make_local_group(workers);
  check_communicator(workers, comms, true);
}

TEST(LocalCuda, SeveralGpus) {
  TD_REQUIRE_GPUS(2);
  std::vector<Worker> workers = make_workers(all_gpus());
  std::vector<std::shared_ptr<Communicator>> comms = make_local_group(workers);
  check_communicator(workers, comms, true);
}

TEST(LocalCuda, CpuAndCudaTensorsDoNotMix) {
  TD_REQUIRE_GPU();
  std::vector<Worker> workers = make_workers("cuda:0/2");
  std::vector<std::shared_ptr<Communicator>> comms = make_local_group(workers);
  run_on_workers(workers, [&](Worker& w) {
    Communicator& c = *comms[w.rank];
    Tensor t = w.rank == 0 ? ones({4}, Device::cpu()) : ones({4}, Device::cuda(0));
    EXPECT_THROW(c.all_reduce(t), DeviceError);
  });
}

TEST(Nccl, GroupOverAllGpus) {
  TD_REQUIRE_GPU();
  std::vector<Worker> workers = make_workers(all_gpus());
  std::vector<std::shared_ptr<Communicator>> comms = make_nccl_group(workers);
  ASSERT_EQ(comms.size(), workers.size());
  EXPECT_EQ(comms[0]->backend(), "nccl");
  check_communicator(workers, comms, workers.size() >= 3);
}

TEST(Nccl, BootstrappedThroughTheLocalBackend) {
  TD_REQUIRE_GPU();
  std::vector<Worker> workers = make_workers(all_gpus());
  std::vector<std::shared_ptr<Communicator>> boot = make_local_group(workers);
  std::vector<std::shared_ptr<Communicator>> comms(workers.size());
  run_on_workers(workers, [&](Worker& w) { comms[w.rank] = make_nccl_communicator(w, *boot[w.rank]); });
  check_communicator(workers, comms, false);
}

TEST(Nccl, RefusesTwoRanksOnOneGpuAndCpuTensors) {
  TD_REQUIRE_GPU();
  try {
    make_nccl_group(make_workers("cuda:0/2"));
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("NCCL cannot put two ranks on one GPU"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_nccl_group(make_workers("cpu:2")), DeviceError);
  std::vector<Worker> one = make_workers("cuda:0");
  std::vector<std::shared_ptr<Communicator>> comms = make_nccl_group(one);
  Tensor host = ones({4});
  EXPECT_THROW(comms[0]->all_reduce(host), DeviceError);
}

}  // namespace
}  // namespace parallel
}  // namespace tandem
