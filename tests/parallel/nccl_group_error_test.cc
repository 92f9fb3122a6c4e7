// An NCCL call that fails inside ncclGroupStart/ncclGroupEnd must not leave the group open on the calling
// thread (its next NCCL calls would be deferred into it and never run). Its own binary: the test makes a GPU
// fault, and the error is sticky for the rest of the process.
#include <gtest/gtest.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "parallel/nccl_comm.h"
#include "parallel/worker.h"
#include "runtime/base/error.h"
#include "runtime/tensor/backend.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace {

TEST(NcclGroup, AFailureInsideAGroupClosesIt) {
  TD_REQUIRE_GPU();
  const int n = cuda_device_count();
  if (n < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has 1";
  const Device a = Device::cuda(n - 2), b = Device::cuda(n - 1);
  std::vector<Worker> workers = make_workers(a.str() + "," + b.str());
  std::vector<std::shared_ptr<Communicator>> comms = make_nccl_group(workers);
  Tensor t = ones({1}, a), elsewhere = ones({4}, b);
  current_stream(a).synchronize();  // the fills are done before other streams use the tensors
  current_stream(b).synchronize();
  // A kernel on GPU a given memory of GPU b, which it has no access to: GPU a faults, and its error is sticky
  // (reported by the launch's own check when the kernel has already run, else by the synchronize).
  EXPECT_THROW(
      {
        backend_for(a).unary({UnaryOp::Neg, DType::F32, elsewhere.raw_data(), elsewhere.raw_data(), 4, UnaryParams()},
                             workers[0].compute);
        workers[0].compute.synchronize();
      },
      Error);
  // With the comm stream current the all-reduce queues no event first: its first NCCL call to fail is the
  // ncclSend inside its reduce-scatter group (rank 0 owns no chunk of one element, so it allocates nothing).
  StreamGuard guard(workers[0].comm);
  try {
    comms[0]->all_reduce(t);
    ADD_FAILURE() << "an all_reduce on a faulted GPU succeeded";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("ncclSend"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage) << "the failed all_reduce left its NCCL group open on this thread";
}

}  // namespace
}  // namespace parallel
}  // namespace tandem
