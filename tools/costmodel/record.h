// Ops of work too large to run on the simulated GPU, recorded there at two small sizes and extrapolated to the
// size asked (scaling.h): kernels_bench's cases over n elements, and models_bench's steps at a batch. Each run is
// warmed up once unrecorded; model steps record dry (cuDNN and cuBLAS skip their arithmetic).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/costmodel/counters.h"
#include "tools/costmodel/kernel_cases.h"
#include "tools/costmodel/op_record.h"

namespace tandem {
namespace costmodel {

// How the ops at the size asked come from small runs: along the line through two sizes, or from the smaller
// size alone with every count scaled in proportion (launches kept), which costs a fifth and still shows a
// change in what a kernel does per element or per sample (the calibration test's baseline; not a prediction).
enum class Extrapolation { TwoSizes, Proportional };

// The ops of one launch of case c over n elements, from n_small and 4 n_small elements, and the case's least
// bytes at n (`bytes`).
std::vector<OpCounts> record_kernel_case(const KernelCase& c, int64_t n, int64_t n_small, double* bytes,
                                         Extrapolation how = Extrapolation::TwoSizes);

struct StepSpec {
  std::string model;  // zoo spec (resnet50, mobilenet_v2, ...)
  std::string mode;   // fwd, fwd_bwd, step
  int64_t size = 224;
  int64_t batch = 256;
  bool channels_last = true;
  std::string label() const;  // "resnet50/224/fwd_bwd batch 256"
};

// The ops of one step of spec at spec.batch, from dry steps of one model on GPU 0 at batches b and 2 b.
std::vector<OpCounts> record_model_step(const StepSpec& spec, int64_t b = 1,
                                        Extrapolation how = Extrapolation::TwoSizes);
// The same, by the profiler's op that launched each (op_record.h; along the line through two sizes).
OpsByOp record_model_step_by_op(const StepSpec& spec, int64_t b = 1);

}  // namespace costmodel
}  // namespace tandem
