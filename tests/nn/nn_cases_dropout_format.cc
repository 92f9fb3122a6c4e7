// dropout against the mask of the Philox stream (the seed an input, so that every evaluation draws the same
// mask) and the memory-format conversions (values unchanged, gradients through them).
#include <gtest/gtest.h>

#include "runtime/base/philox.h"
#include "runtime/nn/nn_ops.h"
#include "tests/nn/nn_cases.h"

namespace tandem {
namespace testing {

bool philox_kept(uint64_t seed, uint64_t counter, int64_t i, double p) {
  philox::Block b = philox::generate(seed, counter + static_cast<uint64_t>(i / 4));
  return philox::uniform32(b.x[i % 4]) >= p;
}

std::vector<OpCase> dropout_format_cases() {
  std::vector<OpCase> cs;
  for (double p : {0.4, 0.75}) {
    cs.push_back(make_case(
        "dropout_p" + std::to_string(static_cast<int>(p * 100)), {float_in({2, 3, 4, 5}), index_in({1}, 1ll << 40)},
        [p](const TV& in, DType) {
          Generator gen(static_cast<uint64_t>(in[1].to(Device::cpu()).item<int64_t>()));
          return TV{dropout(in[0], p, true, gen)};
        },
        [p](const HV& in) {
          const uint64_t seed = static_cast<uint64_t>(in[1].v[0]);
          HostTensor y = in[0];
          for (int64_t i = 0; i < y.numel(); ++i)
            y.v[i] = philox_kept(seed, 0, i, p) ? y.v[i] * (1.0 / (1.0 - p)) : 0.0;
          return HV{y};
        }));
  }
  cs.push_back(make_case(
      "to_channels_last", {float_in({2, 3, 4, 5})},
      [](const TV& in, DType) {
        Tensor y = to_channels_last(in[0]);
        EXPECT_TRUE(is_channels_last(y));
        return TV{y};
      },
      [](const HV& in) { return HV{in[0]}; }));
  cs.push_back(make_case(
      "to_nchw_of_channels_last", {in_channels_last(float_in({2, 3, 4, 5}))},
      [](const TV& in, DType) {
        EXPECT_TRUE(is_channels_last(in[0]));
        Tensor y = to_nchw(in[0]);
        EXPECT_EQ(y.strides(), contiguous_strides(y.shape()));
        return TV{y};
      },
      [](const HV& in) { return HV{in[0]}; }));
  for (OpCase& c : cs) c.batch_inputs = {0};  // each works on any batch (the benchmark may scale it)
  return cs;
}

}  // namespace testing
}  // namespace tandem
