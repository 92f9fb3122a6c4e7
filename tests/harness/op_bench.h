// The op harness's benchmark mode (as ggml's test-backend-ops has one): times an OpCase on a device at a benchmark
// size (its batch inputs' dimension 0 multiplied), forward and, where it has gradients, forward + backward, counts
// its bytes and FLOPs, and measures the device's ceilings (a large copy's bandwidth, a large matmul's FLOP/s) that
// the results are held against, roofline-wise.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/base/device.h"
#include "tests/harness/op_harness.h"

namespace tandem {
namespace testing {

struct BenchOptions {
  Device device = Device::cpu();
  DType dtype = DType::F32;
  int64_t elements = 0;      // multiply the batch inputs' dimension 0 until the first has this many (0: test size)
  double min_seconds = 0.1;  // time each pass for at least this long
  int min_reps = 3;          // and for at least this many calls (after one untimed call)
};

struct BenchResult {
  std::string pass;           // "forward" or "forward+backward"
  std::vector<Shape> shapes;  // the inputs' shapes as run
  double seconds = 0;         // per call, the mean over the timed calls
  // Forward: the inputs read and the outputs written, each once (a view counts as written). Forward + backward:
  // that, plus the outputs' gradients read and the inputs' gradients written.
  double bytes = 0;
  // Forward: the case's flops() (0 when it counts none); forward + backward: 3 times that (a backward costs about
  // twice its forward: the gradients with respect to both operands of each product).
  double flops = 0;
  int reps = 0;
};

struct Ceilings {
  double bytes_per_s = 0;  // a contiguous copy: bytes read + written per second
  double flops_per_s = 0;  // a square matmul
};

// The factor bench_case multiplies the batch inputs' dimension 0 by to give the first at least `elements`
// elements (1 for a case without batch inputs, or when `elements` is 0).
int64_t batch_factor(const OpCase& c, int64_t elements);
// The case's inputs' shapes at that factor.
std::vector<Shape> bench_shapes(const OpCase& c, int64_t elements);
// Forward, then forward + backward where the case has gradients. The inputs are the case's test-size draws
// repeated along dimension 0 (so that they keep what its samplers guarantee, such as positive or distinct values).
std::vector<BenchResult> bench_case(const OpCase& c, const BenchOptions& o);
// The ceilings on o.device in o.dtype: a copy of `copy_elements` and a matmul of two `gemm_side` squares.
Ceilings measure_ceilings(const BenchOptions& o, int64_t copy_elements, int64_t gemm_side);

// One pass of a case at input shapes of its own (not its test shapes grown by batch), as kernels_bench times
// it: a single op's kernel launches (tests/opbench/kernel_cases.h).
enum class Pass {
  Forward,   // the case's call, without autograd
  Backward,  // the backward of the op that made the case's outputs, alone (after one forward, untimed)
};
struct ShapedCall {
  std::vector<Tensor> operands;  // kept alive for `call`
  std::function<void()> call;    // queues the pass on the device's current stream
  // What its kernel calls declare they read and write (tests/harness/call_counts.h), counted on one call.
  double bytes = 0;
};
// The case's inputs at `shapes` on `device` (dtype `dtype`): floating inputs uniform in [-2, 2), drawn on the
// device by `gen`, channels-last where the case's input is; integer or mask inputs are refused. The backward
// pass needs the float outputs to come from one autograd node; its output gradients are uniform like the inputs,
// each in its output's layout. Makes one call (counting the bytes), which serves as a warm-up.
ShapedCall shaped_call(const OpCase& c, const std::vector<Shape>& shapes, Pass pass, Device device, DType dtype,
                       Generator& gen);

// The share of its ceiling a result reaches: FLOP/s against the matmul's when the case's FLOPs per byte exceed
// the ceilings' (it is compute-bound), else bytes/s against the copy's.
struct Utilisation {
  bool compute_bound = false;
  double fraction = 0;
};
Utilisation utilisation(const BenchResult& r, const Ceilings& c);

}  // namespace testing
}  // namespace tandem
