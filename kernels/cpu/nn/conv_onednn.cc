// oneDNN convolution for the CPU backend: a primitive per shape, built once and cached, run single-threaded on
// pieces of the batch fixed by the shapes, the pieces spread over Tandem's pool.
// Why: measured side by side, oneDNN's JIT kernels (AVX-512 on this CPU) are several times faster than im2col +
// Tandem's GEMM, and they are what PyTorch's CPU convolutions run. Why single-threaded calls: oneDNN's own
// threads (OpenMP in Debian's build) would make its reductions depend on the thread count and spin beside
// Tandem's pool; a split fixed by the shapes keeps every result the same whatever the number of threads.
#include "kernels/cpu/nn/conv_onednn.h"

#include <omp.h>

#include <algorithm>
#include <dnnl.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/config.h"
#include "runtime/parallel_for.h"

namespace tandem {
namespace cpu {

namespace {

using dnnl::memory;
using Dims = memory::dims;

// At most this many pieces of the batch per call (the pieces run in parallel; more pieces, less reuse of the
// weights in each).
constexpr int64_t kMaxPieces = 2;

enum class Op { forward, backward_data, backward_weight };

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// oneDNN sizes its parallel regions from the calling thread's OpenMP setting: one thread, every call.
dnnl::stream& this_thread_stream() {
  thread_local bool one_thread = (omp_set_num_threads(1), true);
  thread_local dnnl::stream s(engine());
  (void)one_thread;
  return s;
}

// Tandem's layouts as oneDNN descriptors (explicit strides, so NCHW and NHWC are the same code).
memory::desc activation_md(const Conv2dGeometry& g, int64_t n, int64_t c, int64_t h, int64_t w) {
  Dims strides = g.channels_last ? Dims{h * w * c, 1, w * c, c} : Dims{c * h * w, h * w, w, 1};
  return memory::desc({n, c, h, w}, memory::data_type::f32, strides);
}

memory::desc weight_md(const Conv2dGeometry& g) {
  const int64_t og = g.o / g.groups, cg = g.c / g.groups, kh = g.kh, kw = g.kw;
  if (g.groups == 1) {
    Dims strides = g.channels_last ? Dims{kh * kw * cg, 1, kw * cg, cg} : Dims{cg * kh * kw, kh * kw, kw, 1};
    return memory::desc({og, cg, kh, kw}, memory::data_type::f32, strides);
  }
  Dims strides = g.channels_last ? Dims{og * kh * kw * cg, kh * kw * cg, 1, kw * cg, cg}
                                 : Dims{og * cg * kh * kw, cg * kh * kw, kh * kw, kw, 1};
  return memory::desc({g.groups, og, cg, kh, kw}, memory::data_type::f32, strides);
}

memory::desc any_like(const memory::desc& md) {
  return memory::desc(md.dims(), memory::data_type::f32, memory::format_tag::any);
}

// An operand in Tandem's layout and in the one the primitive chose, with the reorder between them.
struct Operand {
  memory::desc user, prim;
  dnnl::reorder reorder;  // user -> prim for inputs, prim -> user for the output; empty when they are the same
  bool same() const { return user == prim; }
};

Operand operand(const memory::desc& user, const memory::desc& prim, bool input) {
  Operand o{user, prim, {}};
  if (!o.same()) o.reorder = input ? dnnl::reorder(dnnl::reorder::primitive_desc(engine(), user, engine(), prim))
                                   : dnnl::reorder(dnnl::reorder::primitive_desc(engine(), prim, engine(), user));
  return o;
}

// in0, in1 -> out: forward (src, weights -> dst), backward data (diff_dst, weights -> diff_src), backward
// weights (src, diff_dst -> diff_weights).
struct Plan {
  dnnl::primitive prim;
  Operand in0, in1, out;
  int in0_arg, in1_arg, out_arg;
  memory::desc bias;
  size_t scratch_bytes = 0;
};

// The plan for `images` images of g, or null where oneDNN has no implementation for it.
std::shared_ptr<Plan> make_plan(const Conv2dGeometry& g, int64_t images, Op op, bool bias) {
  const memory::desc x = activation_md(g, images, g.c, g.h, g.w);
  const memory::desc y = activation_md(g, images, g.o, g.oh, g.ow);
  const memory::desc w = weight_md(g);
  const memory::desc b({g.o}, memory::data_type::f32, memory::format_tag::x);
  const Dims strides{g.stride_h, g.stride_w}, dilates{g.dilation_h - 1, g.dilation_w - 1};
  const Dims pad_l{g.pad_h, g.pad_w};
  const Dims pad_r{(g.oh - 1) * g.stride_h + (g.kh - 1) * g.dilation_h + 1 - g.h - g.pad_h,
                   (g.ow - 1) * g.stride_w + (g.kw - 1) * g.dilation_w + 1 - g.w - g.pad_w};
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per-thread scratch: calls may run concurrently
  const auto alg = dnnl::algorithm::convolution_direct;
  try {
    using Fwd = dnnl::convolution_forward;
    Fwd::desc fd = bias ? Fwd::desc(dnnl::prop_kind::forward_training, alg, any_like(x), any_like(w), b,
                                    any_like(y), strides, dilates, pad_l, pad_r)
                        : Fwd::desc(dnnl::prop_kind::forward_training, alg, any_like(x), any_like(w),
                                    any_like(y), strides, dilates, pad_l, pad_r);
    Fwd::primitive_desc fpd(fd, attr, engine());
    auto plan = std::make_shared<Plan>();
    if (op == Op::forward) {
      plan->prim = Fwd(fpd);
      plan->in0 = operand(x, fpd.src_desc(), true);
      plan->in1 = operand(w, fpd.weights_desc(), true);
      plan->out = operand(y, fpd.dst_desc(), false);
      plan->in0_arg = DNNL_ARG_SRC, plan->in1_arg = DNNL_ARG_WEIGHTS, plan->out_arg = DNNL_ARG_DST;
      plan->bias = b;
      plan->scratch_bytes = fpd.scratchpad_desc().get_size();
    } else if (op == Op::backward_data) {
      using Bwd = dnnl::convolution_backward_data;
      Bwd::primitive_desc pd(Bwd::desc(alg, any_like(x), any_like(w), any_like(y), strides, dilates, pad_l, pad_r),
                             attr, engine(), fpd);
      plan->prim = Bwd(pd);
      plan->in0 = operand(y, pd.diff_dst_desc(), true);
      plan->in1 = operand(w, pd.weights_desc(), true);
      plan->out = operand(x, pd.diff_src_desc(), false);
      plan->in0_arg = DNNL_ARG_DIFF_DST, plan->in1_arg = DNNL_ARG_WEIGHTS, plan->out_arg = DNNL_ARG_DIFF_SRC;
      plan->scratch_bytes = pd.scratchpad_desc().get_size();
    } else {
      using Bwd = dnnl::convolution_backward_weights;
      Bwd::primitive_desc pd(Bwd::desc(alg, any_like(x), any_like(w), any_like(y), strides, dilates, pad_l, pad_r),
                             attr, engine(), fpd);
      plan->prim = Bwd(pd);
      plan->in0 = operand(x, pd.src_desc(), true);
      plan->in1 = operand(y, pd.diff_dst_desc(), true);
      plan->out = operand(w, pd.diff_weights_desc(), false);
      plan->in0_arg = DNNL_ARG_SRC, plan->in1_arg = DNNL_ARG_DIFF_DST, plan->out_arg = DNNL_ARG_DIFF_WEIGHTS;
      plan->scratch_bytes = pd.scratchpad_desc().get_size();
    }
    return plan;
  } catch (const dnnl::error&) {
    return nullptr;  // no oneDNN implementation for this case: the plain kernel runs it
  }
}

// Plans by shape, built once: building one costs far more than running it.
std::shared_ptr<Plan> plan_for(const Conv2dGeometry& g, int64_t images, Op op, bool bias) {
  static std::mutex mu;
  static std::map<std::vector<int64_t>, std::shared_ptr<Plan>> cache;
  std::vector<int64_t> key{static_cast<int64_t>(op), bias, g.channels_last, images, g.c, g.h, g.w, g.o, g.kh,
                           g.kw, g.oh, g.ow, g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dilation_h,
                           g.dilation_w, g.groups};
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  this_thread_stream();  // the building thread's OpenMP setting decides the plan's threads
  auto plan = make_plan(g, images, op, bias);
  std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(key, plan).first->second;
}

// Scratch buffers of the calling thread, reused across calls.
float* scratch(int slot, size_t bytes) {
  thread_local std::vector<float> bufs[5];
  auto& b = bufs[slot];
  if (b.size() * sizeof(float) < bytes) b.resize((bytes + sizeof(float) - 1) / sizeof(float));
  return b.data();
}

// Runs the plan on one piece: in0 and in1 in Tandem's layout (in1 already in the primitive's when
// in1_prim is set), out in Tandem's layout.
void run(const Plan& p, const float* in0, const float* in1, const float* in1_prim, const float* bias, float* out) {
  dnnl::stream& s = this_thread_stream();
  auto bind = [&](const Operand& o, const float* user, int slot) {
    memory u(o.user, engine(), const_cast<float*>(user));
    if (o.same()) return u;
    memory m(o.prim, engine(), scratch(slot, o.prim.get_size()));
    o.reorder.execute(s, u, m);
    return m;
  };
  memory a = bind(p.in0, in0, 0);
  memory b = in1_prim ? memory(p.in1.prim, engine(), const_cast<float*>(in1_prim)) : bind(p.in1, in1, 1);
  memory out_user(p.out.user, engine(), out);
  memory o = p.out.same() ? out_user : memory(p.out.prim, engine(), scratch(2, p.out.prim.get_size()));
  std::unordered_map<int, memory> args{{p.in0_arg, a}, {p.in1_arg, b}, {p.out_arg, o}};
  if (p.scratch_bytes) args.emplace(DNNL_ARG_SCRATCHPAD, memory(memory::desc({static_cast<int64_t>(p.scratch_bytes)},
                                                                              memory::data_type::u8,
                                                                              memory::format_tag::x),
                                                                 engine(), scratch(3, p.scratch_bytes)));
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(p.bias, engine(), const_cast<float*>(bias)));
  p.prim.execute(s, args);
  if (!p.out.same()) p.out.reorder.execute(s, o, out_user);
  s.wait();
}

// The batch in pieces fixed by the shapes: piece i holds images [i * per, min(n, (i + 1) * per)).
struct Pieces {
  int64_t count, per;
};

Pieces pieces_of(const Conv2dGeometry& g) {
  const int64_t count = std::min(g.n, kMaxPieces);
  const int64_t per = (g.n + count - 1) / count;
  return {(g.n + per - 1) / per, per};
}

// Runs op over the pieces (image strides in elements; in1_image 0: in1 is the weights, shared by all pieces),
// writing piece i to outs[i] when outs is given, else into out.
bool run_pieces(const Conv2dGeometry& g, Op op, const float* in0, int64_t in0_image, const float* in1,
                int64_t in1_image, const float* bias, float* out, int64_t out_image, float* const* outs) {
  if (!cpu_onednn()) return false;
  const Pieces pc = pieces_of(g);
  const int64_t last = g.n - (pc.count - 1) * pc.per;
  std::vector<std::shared_ptr<Plan>> plans{plan_for(g, pc.per, op, bias != nullptr),
                                           plan_for(g, last, op, bias != nullptr)};
  if (!plans[0] || !plans[1]) return false;
  // Shared weights go to the primitive's layout once, for every piece whose plan wants that layout.
  const float* shared = nullptr;
  std::vector<float> shared_buf;
  if (in1_image == 0 && !plans[0]->in1.same()) {
    shared_buf.resize(plans[0]->in1.prim.get_size() / sizeof(float));
    dnnl::stream& s = this_thread_stream();
    memory u(plans[0]->in1.user, engine(), const_cast<float*>(in1));
    memory m(plans[0]->in1.prim, engine(), shared_buf.data());
    plans[0]->in1.reorder.execute(s, u, m);
    s.wait();
    shared = shared_buf.data();
  }
  parallel_for(0, pc.count, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const Plan& p = *plans[i == pc.count - 1 ? 1 : 0];
      const int64_t n0 = i * pc.per;
      const float* in1_prim = shared && p.in1.prim == plans[0]->in1.prim ? shared : nullptr;
      run(p, in0 + n0 * in0_image, in1 + n0 * in1_image, in1_prim, bias,
          outs ? outs[i] : out + n0 * out_image);
    }
  });
  return true;
}

}  // namespace

bool onednn_conv_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  return run_pieces(g, Op::forward, x, g.c * g.h * g.w, w, 0, bias, y, g.o * g.oh * g.ow, nullptr);
}

bool onednn_conv_backward_data(const Conv2dGeometry& g, const float* dy, const float* w, float* dx) {
  return run_pieces(g, Op::backward_data, dy, g.o * g.oh * g.ow, w, 0, nullptr, dx, g.c * g.h * g.w, nullptr);
}

bool onednn_conv_backward_weight(const Conv2dGeometry& g, const float* x, const float* dy, float* dw) {
  const Pieces pc = pieces_of(g);
  const int64_t wsize = g.o * (g.c / g.groups) * g.kh * g.kw;
  if (pc.count == 1)
    return run_pieces(g, Op::backward_weight, x, g.c * g.h * g.w, dy, g.o * g.oh * g.ow, nullptr, dw, 0, nullptr);
  // One gradient per piece, summed in piece order.
  std::vector<float> parts(static_cast<size_t>(pc.count * wsize));
  std::vector<float*> outs(static_cast<size_t>(pc.count));
  for (int64_t i = 0; i < pc.count; ++i) outs[i] = parts.data() + i * wsize;
  if (!run_pieces(g, Op::backward_weight, x, g.c * g.h * g.w, dy, g.o * g.oh * g.ow, nullptr, dw, 0, outs.data()))
    return false;
  parallel_for(0, wsize, 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) {
      float s = parts[j];
      for (int64_t i = 1; i < pc.count; ++i) s += parts[i * wsize + j];
      dw[j] = s;
    }
  });
  return true;
}

}  // namespace cpu
}  // namespace tandem
