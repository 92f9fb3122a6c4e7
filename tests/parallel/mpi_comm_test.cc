// Tests of the MPI communicator in 4 processes: the binary re-launches itself under mpirun, and every
// process checks its results bitwise against the local backend run on the same inputs in-process.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/mpi_comm.h"
#include "parallel/worker.h"
#include "runtime/base/error.h"
#include "tests/parallel/comm_testing.h"
#include "tests/parallel/mpi_testing.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace {

using tandem::testing::expect_bitwise_equal;
using testing::expect_ring_with_tags;
using testing::rank_input;
using testing::rank_order_sum_reference;
using testing::run_local;

constexpr int kProcesses = 4;

Communicator& world() { return tandem::testing::mpi_world(); }
uint64_t shared_seed() { return tandem::testing::mpi_shared_seed(); }
using Mpi = tandem::testing::MpiTest;

// The local backend's result for rank `rank` of `op` applied on kProcesses threads to the same inputs.
Tensor local_result(int rank, const std::function<Tensor(Communicator&)>& op) {
  std::vector<Tensor> out(kProcesses);
  run_local(kProcesses, [&](Worker&, Communicator& c) { out[c.rank()] = op(c); });
  return out[rank];
}

TEST_F(Mpi, RankAndSize) {
  EXPECT_EQ(world().size(), kProcesses);
  EXPECT_GE(world().rank(), 0);
  EXPECT_LT(world().rank(), kProcesses);
  EXPECT_EQ(world().backend(), "mpi");
}

TEST_F(Mpi, SendRecvAroundARingWithTags) {
  const uint64_t seed = shared_seed();
  expect_ring_with_tags(world(), seed, {{5}, {2, 3}, {0}, {3, 1, 4}},
                        {DType::F32, DType::I64, DType::F64, DType::BF16});
}

TEST_F(Mpi, MismatchedRecvFailsOnTheReceiver) {
  Communicator& c = world();
  if (c.rank() == 0) {
    c.send(ones({2, 3}), 1, 5);
  } else if (c.rank() == 1) {
    Tensor wrong = empty({3, 2});
    try {
      c.recv(wrong, 0, 5);
      ADD_FAILURE() << "no error";
    } catch (const ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find("sent [2, 3] f32 on cpu but the receiver expects [3, 2] f32"),
                std::string::npos)
          << e.what();
    }
  }
  Tensor t = ones({2});
  EXPECT_THROW(c.isend(t, 4, 0), IndexError);
  EXPECT_THROW(c.isend(t, 1, -1), ValueError);
}

TEST_F(Mpi, AllReduceMatchesTheLocalBackendBitwise) {
  const uint64_t seed = shared_seed();
  Communicator& c = world();
  for (DType d : {DType::F32, DType::F64, DType::F16, DType::I64})
    for (int64_t n : {1, 3, 7, 4097})
      for (double scale : {1.0, 0.25}) {
        if (!is_floating(d) && scale != 1.0) continue;
        const std::string what =
            std::string(dtype_name(d)) + " x" + std::to_string(n) + " scale " + std::to_string(scale);
        std::vector<Tensor> in;
        for (int r = 0; r < kProcesses; ++r) in.push_back(rank_input(seed + n, r, {n}, d));
        Tensor t = in[c.rank()].clone();
        c.all_reduce(t, scale);
        expect_bitwise_equal(t, rank_order_sum_reference(in, scale), what);
        expect_bitwise_equal(t,
                             local_result(c.rank(),
                                          [&](Communicator& lc) {
                                            Tensor x = in[lc.rank()].clone();
                                            lc.all_reduce(x, scale);
                                            return x;
                                          }),
                             what + " vs local");
      }
}

TEST_F(Mpi, BroadcastAllGatherReduceScatterBarrier) {
  const uint64_t seed = shared_seed();
  Communicator& c = world();
  std::vector<Tensor> in;
  for (int r = 0; r < kProcesses; ++r) in.push_back(rank_input(seed, r, {8, 3}, DType::F32));

  Tensor b = in[c.rank()].clone();
  c.broadcast(b, 2);
  expect_bitwise_equal(b, in[2], "broadcast");

  Tensor g = zeros({32, 3});
  c.all_gather(in[c.rank()], g);
  expect_bitwise_equal(g,
                       local_result(c.rank(),
                                    [&](Communicator& lc) {
                                      Tensor o = zeros({32, 3});
                                      lc.all_gather(in[lc.rank()], o);
                                      return o;
                                    }),
                       "all_gather");
  expect_bitwise_equal(g.narrow(0, 8, 8).contiguous(), in[1], "all_gather slice 1");

  Tensor s = zeros({2, 3});
  c.reduce_scatter(in[c.rank()], s, 0.25);
  expect_bitwise_equal(s, rank_order_sum_reference(in, 0.25).narrow(0, 2 * c.rank(), 2).contiguous(), "reduce_scatter");

  c.barrier();
  Tensor wrong = zeros({3, 3});
  EXPECT_THROW(c.reduce_scatter(in[c.rank()], wrong), ShapeError);
}

TEST_F(Mpi, CollectiveShapeMismatchFailsOnEveryRank) {
  Communicator& c = world();
  Tensor t = ones({c.rank() == 3 ? 5 : 4});
  try {
    c.all_reduce(t);
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce: rank 3 passed [5] f32 on cpu but rank 0 passed [4] f32"),
              std::string::npos)
        << e.what();
  }
  Tensor ok = full({3}, c.rank() + 1.0);
  c.all_reduce(ok);
  EXPECT_EQ(ok.to_vector<float>(), std::vector<float>(3, 10.0f));
}

TEST_F(Mpi, SplitIntoPairsThatReduceConcurrently) {
  const uint64_t seed = shared_seed();
  Communicator& c = world();
  std::vector<Tensor> in;
  for (int r = 0; r < kProcesses; ++r) in.push_back(rank_input(seed, r, {1001}, DType::F32));
  std::shared_ptr<Communicator> low = c.split({0, 1});
  std::shared_ptr<Communicator> high = c.split({3, 2});
  std::shared_ptr<Communicator> mine = c.rank() < 2 ? low : high;
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(c.rank() < 2 ? high : low, nullptr);
  EXPECT_EQ(mine->rank(), c.rank() < 2 ? c.rank() : 3 - c.rank());
  Tensor t = in[c.rank()].clone();
  mine->all_reduce(t, 0.5);
  const std::vector<Tensor> pair = c.rank() < 2 ? std::vector<Tensor>{in[0], in[1]} : std::vector<Tensor>{in[3], in[2]};
  expect_bitwise_equal(t, rank_order_sum_reference(pair, 0.5));
  EXPECT_THROW(c.split({c.rank()}), ValueError);
}

TEST_F(Mpi, RecordsBytes) {
  Communicator& c = world();
  c.set_recording(true);
  Tensor t = ones({16}, DType::F64);
  c.all_reduce(t);
  std::vector<CommRecord> rec = c.take_records();
  c.set_recording(false);
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].op, "all_reduce");
  EXPECT_EQ(rec[0].bytes, 2 * (3 * 4 + 12) * 8);  // 4 chunks of 4 elements
}

}  // namespace
}  // namespace parallel
}  // namespace tandem

int main(int argc, char** argv) {
  return tandem::testing::mpi_test_main(argc, argv, tandem::parallel::kProcesses, 120);
}
