// A channels-last convolution pass run in NCHW, for what cuDNN offers no channels-last algorithm (cuDNN 9.19
// has none for float64 backward data with NHWC tensors, nor do its documented tables list one for float64
// backward filter): the same results, for three layout copies and their scratch memory.
#pragma once

#include <functional>

#include "kernels/cudnn/conv_pass.h"
#include "runtime/memory/stream.h"
#include "runtime/nn/nn_backend.h"

namespace tandem {
namespace cudnn {

// Copies the operands `pass` reads from channels-last (g.channels_last) into NCHW scratch, calls `run` with the
// NCHW geometry and operands (o.out's NCHW copy too when o.accumulate), and copies its output into o.out in
// channels-last. Returns run's answer; when it
// is false (no NCHW algorithm either) o.out is left as it was. Every copy is queued on `s`.
bool run_in_nchw(ConvPass pass, const Conv2dGeometry& g, const ConvOperands& o, const Stream& s,
                 const std::function<bool(const Conv2dGeometry&, const ConvOperands&)>& run);

}  // namespace cudnn
}  // namespace tandem
