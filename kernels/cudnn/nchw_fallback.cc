// Running a channels-last convolution pass in NCHW through layout copies (the CUDA backend's copy kernels).
#include "kernels/cudnn/nchw_fallback.h"

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "runtime/base/dtype.h"

namespace tandem {
namespace cudnn {

namespace {

enum class Role { Input, Weight, Output };

// The roles of a pass's operands, in ConvOperands' order (in0, in1, out).
struct Roles {
  Role in0, in1, out;
};
Roles roles(ConvPass pass) {
  switch (pass) {
    case ConvPass::Forward: return {Role::Input, Role::Weight, Role::Output};
    case ConvPass::BackwardData: return {Role::Output, Role::Weight, Role::Input};
    case ConvPass::BackwardFilter: return {Role::Input, Role::Output, Role::Weight};
  }
  return {Role::Input, Role::Weight, Role::Output};
}

// A tensor of role r as [n, c, h, w] (the weight as [o, c / groups, kh, kw]) in NCHW or in channels-last order.
StridedDesc layout(const Conv2dGeometry& g, Role r, bool channels_last) {
  int64_t n = g.n, c = g.c, h = g.h, w = g.w;
  if (r == Role::Weight) n = g.o, c = g.c / g.groups, h = g.kh, w = g.kw;
  if (r == Role::Output) c = g.o, h = g.oh, w = g.ow;
  StridedDesc d;
  d.ndim = 4;
  d.shape[0] = n, d.shape[1] = c, d.shape[2] = h, d.shape[3] = w;
  if (channels_last)
    d.strides[0] = h * w * c, d.strides[1] = 1, d.strides[2] = w * c, d.strides[3] = c;
  else
    d.strides[0] = c * h * w, d.strides[1] = h * w, d.strides[2] = w, d.strides[3] = 1;
  return d;
}

// The copy kernels, called directly: the pass's own operands were already reported to the stream checker, and
// the scratch is this call's alone.
cuda::CudaBackend& copies() {
  static cuda::CudaBackend backend;
  return backend;
}

// Scratch holding the NCHW form of role r; with `from`, a copy of that channels-last tensor.
Storage nchw_copy(const Conv2dGeometry& g, Role r, const void* from, const Stream& s) {
  const StridedDesc nchw = layout(g, r, false);
  Storage scratch = cuda::scratch(static_cast<size_t>(nchw.numel()) * dtype_size(g.dtype), s);
  if (from != nullptr) copies().copy({g.dtype, from, layout(g, r, true), g.dtype, scratch.data(), nchw}, s);
  return scratch;
}

}  // namespace

bool run_in_nchw(ConvPass pass, const Conv2dGeometry& g, const ConvOperands& o, const Stream& s,
                 const std::function<bool(const Conv2dGeometry&, const ConvOperands&)>& run) {
  Conv2dGeometry nchw = g;
  nchw.channels_last = false;
  const Roles r = roles(pass);
  Storage in0 = nchw_copy(g, r.in0, o.in0, s), in1 = nchw_copy(g, r.in1, o.in1, s),
          out = nchw_copy(g, r.out, o.accumulate ? o.out : nullptr, s);
  if (!run(nchw, {in0.data(), in1.data(), out.data(), o.accumulate})) return false;
  copies().copy({g.dtype, out.data(), layout(g, r.out, false), g.dtype, o.out, layout(g, r.out, true)}, s);
  return true;
}

}  // namespace cudnn
}  // namespace tandem
