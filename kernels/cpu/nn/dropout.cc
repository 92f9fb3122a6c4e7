// CPU dropout: Philox masks (bit-identical to the CUDA ones) and the masked scaling.
#include "kernels/cpu/nn/cpu_nn_backend.h"
#include "kernels/dispatch.h"
#include "runtime/base/parallel_for.h"
#include "runtime/base/philox.h"

namespace tandem {
namespace cpu {

void CpuNNBackend::dropout_mask(int64_t n, double p, uint64_t seed, uint64_t offset, const uint64_t* offset_delta,
                                uint8_t* mask, const Stream&) {
  TD_CHECK_DEVICE(offset_delta == nullptr, "dropout_mask: a device offset is for CUDA graphs, not the CPU");
  int64_t blocks = (n + 3) / 4;
  parallel_for(0, blocks, 1024, [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      philox::Block b = philox::generate(seed, offset + static_cast<uint64_t>(blk));
      for (int w = 0; w < 4 && blk * 4 + w < n; ++w) mask[blk * 4 + w] = philox::uniform32(b.x[w]) >= p ? 1 : 0;
    }
  });
}

void CpuNNBackend::masked_scale(DType t, const void* x, const uint8_t* mask, double scale, void* y, int64_t n,
                                const Stream&) {
  TD_DISPATCH_FLOAT(t, "dropout", {
    const scalar_t* xs = static_cast<const scalar_t*>(x);
    scalar_t* ys = static_cast<scalar_t*>(y);
    scalar_t sc = static_cast<scalar_t>(scale);
    parallel_for(0, n, 1 << 16, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) ys[i] = mask[i] ? xs[i] * sc : scalar_t(0);
    });
  });
}

}  // namespace cpu
}  // namespace tandem
