// dropout: a Philox mask (the same on every device for the same generator state) and its backward.
#include <memory>

#include "runtime/base/error.h"
#include "runtime/memory/cuda_graph.h"
#include "runtime/nn/nn_backend.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/layout.h"
#include "runtime/tensor/profiler.h"
#include "runtime/tensor/tensor_desc.h"

namespace tandem {

namespace {
// In a CUDA graph capture: the device value a replay adds to the generator's offsets of the capture. The capture
// draws from the generator as one step would and then gives the offsets back; each replay takes the offsets of one
// step from where the generator is then, as an eager step would.
const uint64_t* replay_offset_delta(Generator& gen, Device device) {
  GraphCapture* c = active_capture();
  if (c == nullptr || c->stream().device() != device) return nullptr;
  return static_cast<const uint64_t*>(c->keyed(&gen, [&] {
    const uint64_t start = gen.offset();
    auto drawn = std::make_shared<uint64_t>(0), base = std::make_shared<uint64_t>(0);
    c->on_end([&gen, start, drawn] {
      *drawn = gen.offset() - start;
      gen.set_state(gen.seed(), start);
    });
    c->on_replay([&gen, drawn, base] {
      *base = gen.offset();
      gen.set_state(gen.seed(), *base + *drawn);
    });
    return static_cast<const void*>(c->replay_u64([start, base] { return *base - start; }));
  }));
}
}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  ProfileScope scope("dropout");
  TD_CHECK(x.defined(), "dropout: the input is undefined");
  check_float_or_bf16(x, "dropout");
  TD_CHECK(p >= 0 && p <= 1, "dropout probability must be in [0, 1], got ", p);
  if (!training || p == 0) return x;
  // Element i of the memory order of the dense input (any layout; a contiguous copy of others) gets Philox value i.
  Tensor xd = is_dense(x) ? x : x.contiguous();
  Tensor y = empty_like(xd);
  Tensor mask = empty_like(xd, xd.options().with_dtype(DType::U8));
  const int64_t n = x.numel();
  const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  if (n > 0) {
    NNBackend& nn = nn_backend_for(x.device());
    Stream stream = current_stream(x.device());
    const uint64_t* delta = replay_offset_delta(gen, x.device());
    uint64_t offset = gen.advance(n);
    nn.dropout_mask({n, p, gen.seed(), offset, mask.data<uint8_t>(), delta}, stream);
    nn.masked_scale({x.dtype(), xd.raw_data(), mask.data<uint8_t>(), scale, y.raw_data(), n}, stream);
  }
  if (autograd::any_requires_grad({x})) {
    autograd::SavedTensor sm(mask);
    autograd::record("dropout", {x}, {y}, [sm, scale](std::vector<Tensor>& grads, const std::vector<bool>&) {
      Tensor m = sm.unpack("dropout");
      Tensor gy = in_layout_of(grads[0], m);
      Tensor gx = empty_like(m, gy.options());
      if (gx.numel() > 0)
        nn_backend_for(gy.device())
            .masked_scale({gy.dtype(), gy.raw_data(), m.data<uint8_t>(), scale, gx.raw_data(), gx.numel()},
                          current_stream(gy.device()));
      return std::vector<Tensor>{gx};
    });
  }
  return y;
}

}  // namespace tandem
