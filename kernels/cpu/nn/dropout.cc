// CPU dropout: Philox masks (bit-identical to the CUDA ones) and the masked scaling.
#include "kernels/cpu/nn/cpu_nn_backend.h"
#include "kernels/dispatch.h"
#include "runtime/base/parallel_for.h"
#include "runtime/base/philox.h"

namespace tandem {
namespace cpu {

void CpuNNBackend::dropout_mask(const DropoutMaskArgs& args, const Stream&) {
  TD_CHECK_DEVICE(args.offset_delta == nullptr, "dropout_mask: a device offset is for CUDA graphs, not the CPU");
  int64_t blocks = (args.n + 3) / 4;
  parallel_for(0, blocks, 1024, [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      philox::Block b = philox::generate(args.seed, args.offset + static_cast<uint64_t>(blk));
      for (int w = 0; w < 4 && blk * 4 + w < args.n; ++w)
        args.mask[blk * 4 + w] = philox::uniform32(b.x[w]) >= args.p ? 1 : 0;
    }
  });
}

void CpuNNBackend::masked_scale(const MaskedScaleArgs& args, const Stream&) {
  TD_DISPATCH_FLOAT_BF16(args.t, "dropout", {
    using C = compute_t<scalar_t>;
    const scalar_t* xs = static_cast<const scalar_t*>(args.x);
    scalar_t* ys = static_cast<scalar_t*>(args.y);
    const C sc = static_cast<C>(args.scale);
    parallel_for(0, args.n, 1 << 16, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) ys[i] = scalar_t(args.mask[i] ? C(xs[i]) * sc : C(0));
    });
  });
}

}  // namespace cpu
}  // namespace tandem
