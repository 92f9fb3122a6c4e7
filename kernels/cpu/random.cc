// CPU Philox random fills (bit-identical to the CUDA kernels).
#include "kernels/cpu/cpu_backend.h"
#include "kernels/dispatch.h"
#include "runtime/base/parallel_for.h"
#include "runtime/base/philox.h"

namespace tandem {
namespace cpu {

void CpuBackend::random(const RandomArgs& args, const Stream&) {
  TD_DISPATCH_FLOAT(args.t, "random", {
    scalar_t* o = static_cast<scalar_t*>(args.out);
    int64_t blocks = (args.n + 3) / 4;
    parallel_for(0, blocks, 1024, [&](int64_t lo, int64_t hi) {
      for (int64_t blk = lo; blk < hi; ++blk) {
        philox::Block b = philox::generate(args.seed, args.offset + static_cast<uint64_t>(blk));
        if (blk * 4 + 4 <= args.n) {
          philox::sample_block<scalar_t>(b, args.spec.normal, args.spec.a, args.spec.b, o + blk * 4);
          continue;
        }
        for (int w = 0; blk * 4 + w < args.n; ++w)
          o[blk * 4 + w] = philox::sample<scalar_t>(b, w, args.spec.normal, args.spec.a, args.spec.b);
      }
    });
  });
}

}  // namespace cpu
}  // namespace tandem
