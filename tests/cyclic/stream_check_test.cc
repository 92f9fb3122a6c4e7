// Cyclic DP under the stream checker on CPU workers: buffers that cross between a worker's compute and comm lanes
// (received activations, gradients, parameters and gradient sums; gradient shares summed on the comm lane) are
// freed only once the other lane's use of them is ordered before the free, and checking changes no result.
#include <gtest/gtest.h>

#include <string>

#include "parallel/cyclic/trainer.h"
#include "runtime/base/error.h"
#include "tests/cyclic/cyclic_testing.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace cyclic {
namespace {

using testing::make_trainer;
using testing::pair_by_name;

struct Case {
  Mode mode;
  GradSync sync;
  const char* name;
};

class CrossLaneBuffers : public ::testing::TestWithParam<Case> {};

TEST_P(CrossLaneBuffers, AreFreedOnlyAfterTheOtherLaneIsDoneWithThem) {
  const testing::SeededResnet tiny({2, 3, 8, 8});
  TrainerOptions o;
  o.rule = Rule::CdpV1;
  o.mode = GetParam().mode;
  o.micro_batches = 3;
  o.stages = 3;
  o.sync = GetParam().sync;
  CyclicTrainer plain = tiny.trainer(o);
  plain.train(2, tiny.batches);
  NamedTensors checked_params[3];
  {
    tandem::testing::StreamCheckOn on;
    {
      CyclicTrainer checked = tiny.trainer(o);
      EXPECT_NO_THROW(checked.train(2, tiny.batches));
      for (int i = 0; i < 3; ++i) checked_params[i] = checked.view_parameters(i);
    }
    EXPECT_NO_THROW(Stream().synchronize());  // raises what the trainer's last frees left
  }
  for (int i = 0; i < 3; ++i)
    for (auto& p : pair_by_name(plain.view_parameters(i), checked_params[i]))
      tandem::testing::expect_bitwise_equal(p.second, p.first, "micro-batch " + std::to_string(i));
}

INSTANTIATE_TEST_SUITE_P(Modes, CrossLaneBuffers,
                         ::testing::Values(Case{Mode::ModelParallel, GradSync::AllReduce, "mp_recv_act_and_grad"},
                                           Case{Mode::Zero, GradSync::AllReduce, "zero_recv_params"},
                                           Case{Mode::DpWorkers, GradSync::Chain, "dp_workers_chain"},
                                           Case{Mode::DpWorkers, GradSync::AllReduce, "dp_workers_all_reduce"}),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
