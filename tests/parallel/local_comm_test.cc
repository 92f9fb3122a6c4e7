// Tests of the local communicator on CPU workers (threads): point-to-point, collectives, split, errors.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "parallel/communicator.h"
#include "parallel/worker.h"
#include "runtime/base/error.h"
#include "tests/parallel/comm_testing.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace {

using tandem::testing::expect_bitwise_equal;
using tandem::testing::expect_error;
using tandem::testing::fresh_seed;
using testing::exact_sum;
using testing::expect_ring_with_tags;
using testing::rank_input;
using testing::rank_order_sum_reference;
using testing::run_local;

constexpr int kRanks = 4;

std::vector<Tensor> inputs_of(uint64_t seed, int n, const Shape& shape, DType dtype) {
  std::vector<Tensor> in;
  for (int r = 0; r < n; ++r) in.push_back(rank_input(seed, r, shape, dtype));
  return in;
}

TEST(LocalSendRecv, ShapesDtypesAndTagsAroundARing) {
  const uint64_t seed = fresh_seed();
  const std::vector<Shape> shapes = {{5}, {2, 3}, {3, 1, 4}, {0}, {1}};
  const std::vector<DType> dtypes = {DType::F32, DType::F64, DType::I64, DType::F16, DType::U8};
  run_local(kRanks, [&](Worker&, Communicator& c) { expect_ring_with_tags(c, seed, shapes, dtypes); });
}

TEST(LocalSendRecv, IsendCompletesOnlyOnceReceived) {
  const uint64_t seed = fresh_seed();
  std::atomic<bool> receiving{false};
  run_local(2, [&](Worker&, Communicator& c) {
    if (c.rank() == 0) {
      Tensor a = rank_input(seed, 0, {64}, DType::F32);
      Request r = c.isend(a, 1, 7);
      EXPECT_TRUE(r.pending());
      r.wait();
      EXPECT_TRUE(receiving.load());  // wait() returned after the receiver started its recv
      EXPECT_FALSE(r.pending());
      a.fill_(0.0);  // the receiver already has its copy
      r.wait();      // a second wait is a no-op
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      receiving = true;
      Tensor got = empty({64}, DType::F32);
      c.recv(got, 0, 7);
      expect_bitwise_equal(got, rank_input(seed, 0, {64}, DType::F32));
    }
  });
}

TEST(LocalSendRecv, StridedViewsAndSelfSend) {
  const uint64_t seed = fresh_seed();
  run_local(2, [&](Worker&, Communicator& c) {
    Tensor src = rank_input(seed, c.rank(), {3, 4}, DType::F32);
    Request r = c.isend(src.t(), 1 - c.rank(), 0);  // a transposed (strided) view
    Request self = c.isend(src, c.rank(), 1);
    Tensor buf = zeros({3, 4}, DType::F32);
    Tensor view = buf.t();  // receive into a strided view
    c.recv(view, 1 - c.rank(), 0);
    expect_bitwise_equal(buf, rank_input(seed, 1 - c.rank(), {3, 4}, DType::F32), "strided");
    Tensor mine = zeros({3, 4}, DType::F32);
    c.recv(mine, c.rank(), 1);
    expect_bitwise_equal(mine, src, "self");
    r.wait();
    self.wait();
  });
}

TEST(LocalSendRecv, MismatchedShapeOrDtypeFailsOnBothEnds) {
  run_local(2, [&](Worker&, Communicator& c) {
    if (c.rank() == 0) {
      Request r = c.isend(ones({2, 3}, DType::F32), 1, 0);
      expect_error<ShapeError>([&] { r.wait(); }, "[2, 3] f32 on cpu but the receiver expects [3, 2] f32");
      Request d = c.isend(ones({4}, DType::F64), 1, 1);
      expect_error<DTypeError>([&] { d.wait(); }, "f64");
    } else {
      Tensor wrong = empty({3, 2}, DType::F32);
      expect_error<ShapeError>([&] { c.recv(wrong, 0, 0); }, "recv on rank 1 from rank 0 (tag 0)");
      Tensor f32 = empty({4}, DType::F32);
      expect_error<DTypeError>([&] { c.recv(f32, 0, 1); }, "sent [4] f64");
    }
  });
}

TEST(LocalSendRecv, InIssueOrderPairsMessagesAsNcclDoesAndRejectsAnotherOrder) {
  const uint64_t seed = fresh_seed();
  // Tags in the order they were sent: the values arrive as with tag matching, and the communicators ask for
  // one issuing thread (as NCCL's do).
  run_local(
      2,
      [&](Worker&, Communicator& c) {
        EXPECT_TRUE(c.needs_one_issuer());
        std::shared_ptr<Communicator> sub = c.split({1, 0});
        EXPECT_TRUE(sub->needs_one_issuer());
        if (c.rank() == 0) {
          std::vector<Request> sent;
          for (int k = 0; k < 3; ++k) sent.push_back(c.isend(rank_input(seed + k, 0, {4}, DType::F32), 1, 10 + k));
          for (Request& r : sent) r.wait();
        } else {
          for (int k = 0; k < 3; ++k) {
            Tensor got = zeros({4});
            c.recv(got, 0, 10 + k);
            expect_bitwise_equal(got, rank_input(seed + k, 0, {4}, DType::F32), "message " + std::to_string(k));
          }
        }
      },
      MessageMatching::InIssueOrder);
  // Received in another order than sent: by tag that is fine, in issue order both ends fail.
  for (MessageMatching m : {MessageMatching::ByTag, MessageMatching::InIssueOrder}) {
    const bool strict = m == MessageMatching::InIssueOrder;
    run_local(
        2,
        [&](Worker&, Communicator& c) {
          EXPECT_EQ(c.needs_one_issuer(), strict);
          if (c.rank() == 0) {
            Request a = c.isend(rank_input(seed, 0, {2}, DType::F32), 1, 1);
            Request b = c.isend(rank_input(seed + 1, 0, {2}, DType::F32), 1, 2);
            if (!strict) {
              a.wait();
              b.wait();
            } else {
              EXPECT_THROW(a.wait(), Error);
            }
          } else {
            Tensor got = zeros({2});
            if (!strict) {
              c.recv(got, 0, 2);
              expect_bitwise_equal(got, rank_input(seed + 1, 0, {2}, DType::F32), "tag 2 first");
              c.recv(got, 0, 1);
              expect_bitwise_equal(got, rank_input(seed, 0, {2}, DType::F32), "tag 1 second");
            } else {
              expect_error<BackendError>([&] { c.recv(got, 0, 2); }, "rank 0's next message to rank 1 has tag 1");
            }
          }
        },
        m);
  }
}

TEST(LocalSendRecv, BadRanksAndTags) {
  std::vector<std::shared_ptr<Communicator>> g = make_local_group(make_workers("cpu:4"));
  Communicator& c = *g[0];
  EXPECT_EQ(c.size(), 4);
  EXPECT_EQ(c.backend(), "local");
  Tensor t = ones({2});
  expect_error<IndexError>([&] { c.isend(t, 4, 0); }, "rank 4 is out of range for a group of 4");
  expect_error<IndexError>([&] { c.recv(t, -1, 0); }, "rank -1 is out of range");
  expect_error<ValueError>([&] { c.isend(t, 1, -3); }, "tags must be >= 0");
  expect_error<IndexError>([&] { c.broadcast(t, 9); }, "rank 9");
  Tensor ints = ones({2}, DType::I32);
  expect_error<ValueError>([&] { c.all_reduce(ints, 0.5); }, "takes no scale");
  expect_error<ValueError>([&] { make_local_group({}); }, "at least one worker");
}

struct AllReduceCase {
  DType dtype;
  int64_t numel;
  bool mean;
};

TEST(LocalAllReduce, BitwiseEqualToTheRankOrderSumOnEveryRank) {
  std::vector<AllReduceCase> cases;
  for (DType d : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8})
    for (int64_t n : {1, 3, 7, 1000, 4097})  // fewer elements than ranks, odd sizes, more than one block
      for (bool mean : {false, true})
        if (is_floating(d) || !mean) cases.push_back({d, n, mean});
  const uint64_t seed = fresh_seed();
  for (const AllReduceCase& k : cases) {
    const std::string what =
        std::string(dtype_name(k.dtype)) + " x" + std::to_string(k.numel) + (k.mean ? " mean" : "");
    const double scale = k.mean ? 1.0 / kRanks : 1.0;
    std::vector<Tensor> in = inputs_of(seed + k.numel, kRanks, {k.numel}, k.dtype);
    Tensor want = rank_order_sum_reference(in, scale);
    std::vector<double> exact = exact_sum(in, scale);
    std::vector<Tensor> out(kRanks);
    run_local(kRanks, [&](Worker&, Communicator& c) {
      Tensor t = in[c.rank()].clone();
      c.all_reduce(t, scale);
      out[c.rank()] = t;
    });
    for (int r = 0; r < kRanks; ++r) expect_bitwise_equal(out[r], want, what + " rank " + std::to_string(r));
    const double tol = k.dtype == DType::F16    ? 2e-3
                       : k.dtype == DType::BF16 ? 1e-2
                       : k.dtype == DType::F32  ? 4e-6
                                                : 1e-12;
    std::vector<double> got = out[0].to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], exact[i], tol * (1 + std::abs(exact[i]))) << what;
  }
}

TEST(LocalAllReduce, StridedTensorAndSingleRank) {
  const uint64_t seed = fresh_seed();
  std::vector<Tensor> in = inputs_of(seed, 3, {4, 5}, DType::F32);
  std::vector<Tensor> out(3);
  run_local(3, [&](Worker&, Communicator& c) {
    Tensor buf = in[c.rank()].clone();
    Tensor view = buf.t();  // [5, 4] strided: the sum lands in buf element by element
    c.all_reduce(view, 0.5);
    out[c.rank()] = buf;
  });
  for (int r = 0; r < 3; ++r) expect_bitwise_equal(out[r], rank_order_sum_reference(in, 0.5));

  run_local(1, [&](Worker&, Communicator& c) {
    Tensor t = in[0].clone();
    c.all_reduce(t, 3.0);
    expect_bitwise_equal(t, rank_order_sum_reference({in[0]}, 3.0));
  });
}

TEST(LocalAllReduce, MismatchedShapesFailOnEveryRankAndTheGroupGoesOn) {
  std::atomic<int> failures{0};
  run_local(kRanks, [&](Worker&, Communicator& c) {
    Tensor t = ones({c.rank() == 3 ? 5 : 4});
    expect_error<ShapeError>([&] { c.all_reduce(t); },
                             "all_reduce: rank 3 passed [5] f32 on cpu but rank 0 passed [4] f32");
    ++failures;
    Tensor d = ones({2}, c.rank() == 1 ? DType::F64 : DType::F32);
    expect_error<DTypeError>([&] { c.all_reduce(d); }, "rank 1 passed [2] f64");
    Tensor ok = full({3}, c.rank() + 1.0);
    c.all_reduce(ok);
    EXPECT_EQ(ok.to_vector<float>(), std::vector<float>(3, 10.0f));
  });
  EXPECT_EQ(failures.load(), kRanks);
}

TEST(LocalCollectives, BroadcastFromEachRoot) {
  const uint64_t seed = fresh_seed();
  for (int root = 0; root < kRanks; ++root) {
    run_local(kRanks, [&](Worker&, Communicator& c) {
      Tensor t = rank_input(seed, c.rank(), {3, 7}, DType::F64);
      Tensor i = rank_input(seed, c.rank(), {5}, DType::I64);
      c.broadcast(t, root);
      c.broadcast(i, root);
      expect_bitwise_equal(t, rank_input(seed, root, {3, 7}, DType::F64));
      expect_bitwise_equal(i, rank_input(seed, root, {5}, DType::I64));
    });
  }
}

TEST(LocalCollectives, AllGatherConcatenatesInRankOrder) {
  const uint64_t seed = fresh_seed();
  std::vector<Tensor> in = inputs_of(seed, kRanks, {2, 3}, DType::F32);
  Tensor want = zeros({8, 3}, DType::F32);
  for (int r = 0; r < kRanks; ++r) want.narrow(0, 2 * r, 2).copy_(in[r]);
  run_local(kRanks, [&](Worker&, Communicator& c) {
    Tensor out = full({8, 3}, -1.0);
    c.all_gather(in[c.rank()], out);
    expect_bitwise_equal(out, want);
    Tensor wrong = empty({6, 3});
    expect_error<ShapeError>([&] { c.all_gather(in[c.rank()], wrong); }, "needs out of shape [8, 3] f32");
  });
}

TEST(LocalCollectives, ReduceScatterGivesEachRankItsSliceOfTheSum) {
  const uint64_t seed = fresh_seed();
  std::vector<Tensor> in = inputs_of(seed, kRanks, {8, 5}, DType::F32);
  Tensor sum = rank_order_sum_reference(in, 0.25);
  run_local(kRanks, [&](Worker&, Communicator& c) {
    Tensor out = zeros({2, 5});
    c.reduce_scatter(in[c.rank()], out, 0.25);
    expect_bitwise_equal(out, sum.narrow(0, 2 * c.rank(), 2).contiguous());
    Tensor odd = ones({7, 5}), small = zeros({1, 5});
    expect_error<ShapeError>([&] { c.reduce_scatter(odd, small); }, "first dim divisible by 4");
  });
}

TEST(LocalCollectives, BarrierSeparatesBeforeFromAfter) {
  std::atomic<int> arrived{0};
  run_local(kRanks, [&](Worker&, Communicator& c) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * c.rank()));
    ++arrived;
    c.barrier();
    EXPECT_EQ(arrived.load(), kRanks);
    c.barrier();
  });
}

TEST(LocalSplit, TwoDisjointPairsReduceConcurrently) {
  const uint64_t seed = fresh_seed();
  std::vector<Tensor> in = inputs_of(seed, kRanks, {1001}, DType::F32);
  run_local(kRanks, [&](Worker&, Communicator& c) {
    std::shared_ptr<Communicator> low = c.split({0, 1});
    std::shared_ptr<Communicator> high = c.split({3, 2});  // sub-ranks follow the list's order
    std::shared_ptr<Communicator>& mine = c.rank() < 2 ? low : high;
    std::shared_ptr<Communicator>& other = c.rank() < 2 ? high : low;
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ(other, nullptr);
    EXPECT_EQ(mine->size(), 2);
    EXPECT_EQ(mine->rank(), c.rank() < 2 ? c.rank() : 3 - c.rank());
    Tensor t = in[c.rank()].clone();
    for (int i = 0; i < 3; ++i) {  // several rounds, so the pairs interleave
      t.copy_(in[c.rank()]);
      mine->all_reduce(t, 0.5);
    }
    const std::vector<Tensor> pair =
        c.rank() < 2 ? std::vector<Tensor>{in[0], in[1]} : std::vector<Tensor>{in[3], in[2]};
    expect_bitwise_equal(t, rank_order_sum_reference(pair, 0.5));
    // Point-to-point inside a pair uses sub-ranks.
    Tensor got = zeros({1001});
    Request r = mine->isend(in[c.rank()], 1 - mine->rank());
    mine->recv(got, 1 - mine->rank());
    r.wait();
    expect_bitwise_equal(got, in[c.rank() < 2 ? 1 - c.rank() : 5 - c.rank()]);
    c.barrier();  // the parent group still works
  });
}

TEST(LocalSplit, BadListsAreRejected) {
  run_local(2, [&](Worker&, Communicator& c) {
    expect_error<ValueError>([&] { c.split({}); }, "at least one rank");
    expect_error<ValueError>([&] { c.split({0, 0}); }, "twice");
    expect_error<IndexError>([&] { c.split({0, 2}); }, "rank 2 is out of range");
    expect_error<ValueError>([&] { c.split({c.rank()}); }, "every rank must pass the same list");
    EXPECT_NE(c.split({1, 0}), nullptr);
  });
}

TEST(LocalRecords, BytesAndTimesPerOperation) {
  run_local(2, [&](Worker&, Communicator& c) {
    c.set_recording(true);
    Tensor t = ones({10}, DType::F64);     // 80 bytes
    Tensor got = empty({10}, DType::F64);  // not t: the peer reads t until the send completes
    Request r = c.isend(t, 1 - c.rank());
    c.recv(got, 1 - c.rank());
    r.wait();
    c.all_reduce(t);
    std::vector<CommRecord> rec = c.take_records();
    ASSERT_EQ(rec.size(), 3u);
    EXPECT_EQ(rec[0].op, "send");
    EXPECT_EQ(rec[0].bytes, 80);
    EXPECT_EQ(rec[1].op, "recv");
    EXPECT_EQ(rec[2].op, "all_reduce");
    EXPECT_EQ(rec[2].bytes, 2 * 80);  // 2 ranks: send half and receive half, twice
    EXPECT_LE(rec[0].time_s, rec[2].time_s);
    EXPECT_EQ(c.bytes_moved(), 80 + 80 + 160);
    EXPECT_TRUE(c.take_records().empty());
    c.set_recording(false);
    c.barrier();
    EXPECT_TRUE(c.take_records().empty());
  });
}

TEST(LocalFailure, AThrowingWorkerDoesNotHangItsPeers) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<Worker> workers = make_workers("cpu:4");
  std::vector<std::shared_ptr<Communicator>> comms = make_local_group(workers);
  expect_error<IndexError>(
      [&] {
        run_on_workers(workers, [&](Worker& w) {
          Communicator& c = *comms[w.rank];
          if (w.rank == 2) {
            std::this_thread::sleep_for(std::chrono::milliseconds(30));
            TD_THROW(IndexError, "worker two broke");
          }
          Tensor t = ones({16});
          if (w.rank == 3) {
            c.recv(t, 2);  // waits for a message that never comes
          } else {
            c.all_reduce(t);  // waits for rank 2, which never arrives
          }
        });
      },
      "worker two broke");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // The group is aborted: later calls fail at once instead of hanging.
  Tensor t = ones({4});
  expect_error<BackendError>([&] { comms[0]->recv(t, 1); }, "a worker failed");
}

}  // namespace
}  // namespace parallel
}  // namespace tandem
