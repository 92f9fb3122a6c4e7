// oneDNN convolution for the CPU backend, in f32 and (on processors with native bf16) bf16: a primitive per shape,
// built once and cached (the kPlans most recently used), run single-threaded on pieces of the work fixed by the shapes
// (images, or output or input channels), the pieces spread over Tandem's pool. Why oneDNN: measured side by side, its
// JIT kernels (AVX-512 on this CPU) are several times faster than im2col
// + Tandem's GEMM, and they are what PyTorch's CPU convolutions run. Why single-threaded calls: oneDNN's own
// threads (OpenMP in Debian's build) would make its reductions depend on the thread count and spin beside
// Tandem's pool; pieces fixed by the shapes keep every result the same whatever the number of threads.
#include "kernels/cpu/nn/conv_onednn.h"

#include <algorithm>
#include <dnnl.hpp>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cpu/onednn.h"
#include "runtime/base/error.h"
#include "runtime/base/lru_cache.h"
#include "runtime/base/parallel_for.h"

namespace tandem {
namespace cpu {

namespace {

using dnnl::memory;
using Dims = memory::dims;

// Pieces per call (they run in parallel; more pieces, less reuse of the data each one reads).
constexpr int64_t kPieces = 2;
// Channels of a piece come in multiples of this (oneDNN's blocks of 16 floats).
constexpr int64_t kChannelBlock = 16;
// Plans kept (the most recently used): a model's layers need a few per shape (passes, pieces, bias or not), so
// this only drops plans in a long run through many shapes, where it bounds the memory their JIT code holds.
constexpr size_t kPlans = 1024;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& this_thread_stream() {
  onednn_single_threaded();
  thread_local dnnl::stream s(engine());
  return s;
}

// A piece: images [n0, n0 + n), input channels [c0, c0 + c) and output channels [o0, o0 + o) of g.
struct Piece {
  int64_t n0, n, c0, c, o0, o;
};

// The activations' and weights' element type (f32 or bf16); a weight gradient is f32 in both.
memory::data_type data_type(const Conv2dGeometry& g) {
  return g.dtype == DType::BF16 ? memory::data_type::bf16 : memory::data_type::f32;
}
int64_t element_bytes(const Conv2dGeometry& g) { return g.dtype == DType::BF16 ? 2 : 4; }

// Tandem's layouts as oneDNN descriptors, with explicit strides: NCHW and NHWC, whole tensors or channel slices.
memory::desc activation_md(const Conv2dGeometry& g, int64_t n, int64_t c, int64_t c_total, int64_t h, int64_t w) {
  Dims strides = g.channels_last ? Dims{h * w * c_total, 1, w * c_total, c_total} : Dims{c_total * h * w, h * w, w, 1};
  return memory::desc({n, c, h, w}, data_type(g), strides);
}

memory::desc weight_md(const Conv2dGeometry& g, const Piece& p, memory::data_type type) {
  const int64_t cg = g.c / g.groups, kh = g.kh, kw = g.kw;
  Dims strides = g.channels_last ? Dims{kh * kw * cg, 1, kw * cg, cg} : Dims{cg * kh * kw, kh * kw, kw, 1};
  if (g.groups == 1) return memory::desc({p.o, p.c, kh, kw}, type, strides);
  const int64_t og = g.o / g.groups;
  strides.insert(strides.begin(), og * cg * kh * kw);
  return memory::desc({g.groups, og, cg, kh, kw}, type, strides);
}

memory::desc any_like(const memory::desc& md) {
  return memory::desc(md.dims(), md.data_type(), memory::format_tag::any);
}

// An operand in Tandem's layout and in the one the primitive chose, with the reorder between them.
struct Operand {
  memory::desc user, prim;
  dnnl::reorder reorder;  // user -> prim for inputs, prim -> user for the output; empty when they are the same
  bool same() const { return user == prim; }
};

Operand operand(const memory::desc& user, const memory::desc& prim, bool input) {
  Operand o{user, prim, {}};
  if (!o.same())
    o.reorder = input ? dnnl::reorder(dnnl::reorder::primitive_desc(engine(), user, engine(), prim))
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

// One of a primitive's operands: its memory in Tandem's layout, in the primitive's, and its argument index.
struct Binding {
  memory::desc user, prim;
  int arg;
};

// Puts the primitive of pd into plan with its inputs in0, in1 and its output.
template <typename Primitive>
void set_primitive(Plan& plan, const typename Primitive::primitive_desc& pd, const Binding& in0, const Binding& in1,
                   const Binding& out) {
  plan.prim = Primitive(pd);
  plan.in0 = operand(in0.user, in0.prim, true);
  plan.in1 = operand(in1.user, in1.prim, true);
  plan.out = operand(out.user, out.prim, false);
  plan.in0_arg = in0.arg, plan.in1_arg = in1.arg, plan.out_arg = out.arg;
  plan.scratch_bytes = pd.scratchpad_desc().get_size();
}

// The plan for piece p of g, or null where oneDNN has no implementation for it.
std::shared_ptr<Plan> make_plan(const Conv2dGeometry& g, const Piece& p, ConvPass pass, bool bias) {
  const memory::desc x = activation_md(g, p.n, p.c, g.c, g.h, g.w);
  const memory::desc y = activation_md(g, p.n, p.o, g.o, g.oh, g.ow);
  const memory::desc w = weight_md(g, p, data_type(g)), dw = weight_md(g, p, memory::data_type::f32);
  const memory::desc b({p.o}, memory::data_type::f32, memory::format_tag::x);
  const Dims strides{g.stride_h, g.stride_w}, dilates{g.dilation_h - 1, g.dilation_w - 1};
  const Dims pad_l{g.pad_h, g.pad_w};
  const Dims pad_r{(g.oh - 1) * g.stride_h + (g.kh - 1) * g.dilation_h + 1 - g.h - g.pad_h,
                   (g.ow - 1) * g.stride_w + (g.kw - 1) * g.dilation_w + 1 - g.w - g.pad_w};
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per-thread scratch: calls may run concurrently
  const auto alg = dnnl::algorithm::convolution_direct;
  try {
    using Fwd = dnnl::convolution_forward;
    Fwd::desc fd = bias ? Fwd::desc(dnnl::prop_kind::forward_training, alg, any_like(x), any_like(w), b, any_like(y),
                                    strides, dilates, pad_l, pad_r)
                        : Fwd::desc(dnnl::prop_kind::forward_training, alg, any_like(x), any_like(w), any_like(y),
                                    strides, dilates, pad_l, pad_r);
    Fwd::primitive_desc fpd(fd, attr, engine());
    auto plan = std::make_shared<Plan>();
    if (pass == ConvPass::forward) {
      set_primitive<Fwd>(*plan, fpd, {x, fpd.src_desc(), DNNL_ARG_SRC}, {w, fpd.weights_desc(), DNNL_ARG_WEIGHTS},
                         {y, fpd.dst_desc(), DNNL_ARG_DST});
      plan->bias = b;
    } else if (pass == ConvPass::backward_data) {
      using Bwd = dnnl::convolution_backward_data;
      Bwd::primitive_desc pd(Bwd::desc(alg, any_like(x), any_like(w), any_like(y), strides, dilates, pad_l, pad_r),
                             attr, engine(), fpd);
      set_primitive<Bwd>(*plan, pd, {y, pd.diff_dst_desc(), DNNL_ARG_DIFF_DST},
                         {w, pd.weights_desc(), DNNL_ARG_WEIGHTS}, {x, pd.diff_src_desc(), DNNL_ARG_DIFF_SRC});
    } else {
      using Bwd = dnnl::convolution_backward_weights;
      Bwd::primitive_desc pd(Bwd::desc(alg, any_like(x), any_like(dw), any_like(y), strides, dilates, pad_l, pad_r),
                             attr, engine(), fpd);
      set_primitive<Bwd>(*plan, pd, {x, pd.src_desc(), DNNL_ARG_SRC}, {y, pd.diff_dst_desc(), DNNL_ARG_DIFF_DST},
                         {dw, pd.diff_weights_desc(), DNNL_ARG_DIFF_WEIGHTS});
    }
    return plan;
  } catch (const dnnl::error&) {
    return nullptr;  // no oneDNN implementation for this case: the plain kernel runs it
  }
}

// Plans by shape (null where oneDNN has no kernel), built once while kept: building one costs far more than
// running it.
std::shared_ptr<Plan> plan_for(const Conv2dGeometry& g, const Piece& p, ConvPass pass, bool bias) {
  static std::mutex mu;
  static LruCache<std::vector<int64_t>, std::shared_ptr<Plan>> cache(kPlans);
  std::vector<int64_t> key{static_cast<int64_t>(pass), bias, p.n, p.c, p.o};
  const Conv2dKey shape = conv2d_key(g);
  key.insert(key.end(), shape.begin(), shape.end());
  {
    std::lock_guard<std::mutex> lock(mu);
    if (std::shared_ptr<Plan>* kept = cache.find(key)) return *kept;
  }
  this_thread_stream();  // the building thread's OpenMP setting decides the plan's threads
  auto plan = make_plan(g, p, pass, bias);
  std::lock_guard<std::mutex> lock(mu);
  return cache.put(key, std::move(plan));
}

// Runs the plan: in0, in1 and out in Tandem's layout, or in1 already in the primitive's when in1_prim is set.
void run(const Plan& p, const void* in0, const void* in1, const void* in1_prim, const float* bias, void* out) {
  dnnl::stream& s = this_thread_stream();
  auto bind = [&](const Operand& o, const void* user, ScratchSlot slot) {
    memory u(o.user, engine(), const_cast<void*>(user));
    if (o.same()) return u;
    memory m(o.prim, engine(), thread_scratch(slot, o.prim.get_size()));
    o.reorder.execute(s, u, m);
    return m;
  };
  memory a = bind(p.in0, in0, ScratchSlot::first_input);
  memory b = in1_prim ? memory(p.in1.prim, engine(), const_cast<void*>(in1_prim))
                      : bind(p.in1, in1, ScratchSlot::second_input);
  memory out_user(p.out.user, engine(), out);
  memory o = p.out.same() ? out_user
                          : memory(p.out.prim, engine(), thread_scratch(ScratchSlot::output, p.out.prim.get_size()));
  std::unordered_map<int, memory> args{{p.in0_arg, a}, {p.in1_arg, b}, {p.out_arg, o}};
  if (p.scratch_bytes) {
    memory::desc md({static_cast<int64_t>(p.scratch_bytes)}, memory::data_type::u8, memory::format_tag::x);
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(md, engine(), thread_scratch(ScratchSlot::primitive, p.scratch_bytes)));
  }
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(p.bias, engine(), const_cast<float*>(bias)));
  p.prim.execute(s, args);
  if (!p.out.same()) p.out.reorder.execute(s, o, out_user);
  s.wait();
}

enum class Split { images, out_channels, in_channels };

// The pieces of g split along `split`, fixed by the shapes alone.
std::vector<Piece> pieces_of(const Conv2dGeometry& g, Split split) {
  std::vector<Piece> out;
  if (split == Split::images) {
    const int64_t per = (g.n + kPieces - 1) / kPieces;
    for (int64_t n0 = 0; n0 < g.n; n0 += per) out.push_back({n0, std::min(per, g.n - n0), 0, g.c, 0, g.o});
    return out;
  }
  const int64_t total = split == Split::out_channels ? g.o : g.c;
  const int64_t per = (total / kChannelBlock + kPieces - 1) / kPieces * kChannelBlock;
  for (int64_t k0 = 0; k0 < total; k0 += per) {
    const int64_t k = std::min(per, total - k0);
    out.push_back(split == Split::out_channels ? Piece{0, g.n, 0, g.c, k0, k} : Piece{0, g.n, k0, k, 0, g.o});
  }
  return out;
}

// Channels can be split where there are no groups and at least one block of them per piece.
bool channel_splittable(const Conv2dGeometry& g, int64_t channels) {
  return g.groups == 1 && channels % kChannelBlock == 0 && channels >= kPieces * kChannelBlock;
}

// Elements of the input, output and weights.
int64_t x_size(const Conv2dGeometry& g) { return g.n * g.c * g.h * g.w; }
int64_t y_size(const Conv2dGeometry& g) { return g.n * g.o * g.oh * g.ow; }
int64_t w_size(const Conv2dGeometry& g) { return g.o * (g.c / g.groups) * g.kh * g.kw; }

// Offsets, in elements, of a piece's first element in x (c: input channels) or y (c: output channels), and w.
int64_t activation_offset(const Conv2dGeometry& g, int64_t n0, int64_t c0, int64_t c, int64_t hw) {
  return n0 * c * hw + c0 * (g.channels_last ? 1 : hw);
}
int64_t weight_offset(const Conv2dGeometry& g, const Piece& p) {
  const int64_t taps = g.kh * g.kw, cg = g.c / g.groups;
  return p.o0 * cg * taps + p.c0 * (g.channels_last ? 1 : taps);
}

// The pieces of `pass` of g. Forward and backward data split by channels where the weights outweigh the
// activations (each piece then reads all the activations and its share of the weights), else by images; the
// weight gradient by output channels (each piece a slice of dw) where it can, else by images (one gradient per
// piece, summed in piece order).
std::vector<Piece> pieces_for(const Conv2dGeometry& g, ConvPass pass) {
  switch (pass) {
    case ConvPass::forward:
      return pieces_of(g, channel_splittable(g, g.o) && w_size(g) > x_size(g) ? Split::out_channels : Split::images);
    case ConvPass::backward_data:
      return pieces_of(g, channel_splittable(g, g.c) && w_size(g) > y_size(g) ? Split::in_channels : Split::images);
    case ConvPass::backward_weight:
      return pieces_of(g, channel_splittable(g, g.o) ? Split::out_channels : Split::images);
  }
  TD_THROW(InternalError, "unknown convolution pass");
}

// Runs `pass` over the pieces, piece i writing to outs[i] when outs is given. x, w and y hold g's dtype; a
// weight gradient (out or outs) is f32.
void run_pieces(const Conv2dGeometry& g, ConvPass pass, const std::vector<Piece>& pieces, const void* x, const void* w,
                const void* y, const float* bias, void* out, float* const* outs) {
  std::vector<std::shared_ptr<Plan>> plans;
  for (const Piece& p : pieces) {
    plans.push_back(plan_for(g, p, pass, bias != nullptr));
    TD_ASSERT(plans.back() != nullptr, "oneDNN convolution: no kernel for a piece (select_cpu_conv_path checks)");
  }
  const int64_t hw = g.h * g.w, ohw = g.oh * g.ow;
  // Weights shared whole by every piece go to the primitive's layout once.
  const void* shared = nullptr;
  const Plan& first = *plans[0];
  if (pass != ConvPass::backward_weight && pieces[0].o == g.o && pieces[0].c == g.c && !first.in1.same()) {
    dnnl::stream& s = this_thread_stream();
    float* buf = thread_scratch(ScratchSlot::shared_weights, first.in1.prim.get_size());
    memory u(first.in1.user, engine(), const_cast<void*>(w));
    memory m(first.in1.prim, engine(), buf);
    first.in1.reorder.execute(s, u, m);
    s.wait();
    shared = buf;
  }
  parallel_for(0, static_cast<int64_t>(pieces.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const Piece& p = pieces[i];
      const Plan& plan = *plans[i];
      // Each op leaves one of x, w, y null: no offset is applied to it. Offsets count elements of g's dtype,
      // or of f32 in a weight gradient.
      auto at = [&](const void* base, int64_t elements, int64_t bytes) {
        return base ? static_cast<const char*>(base) + elements * bytes : nullptr;
      };
      const int64_t e = element_bytes(g);
      const void* xp = at(x, activation_offset(g, p.n0, p.c0, g.c, hw), e);
      const void* yp = at(y, activation_offset(g, p.n0, p.o0, g.o, ohw), e);
      const void* wp = at(w, weight_offset(g, p), e);
      const void* w_prim = shared && plan.in1.prim == first.in1.prim ? shared : nullptr;
      void* o = outs ? static_cast<void*>(outs[i]) : out;
      auto out_at = [&](int64_t elements, int64_t bytes) {
        return static_cast<void*>(static_cast<char*>(o) + elements * bytes);
      };
      if (pass == ConvPass::forward)
        run(plan, xp, wp, w_prim, bias ? bias + p.o0 : nullptr, out_at(activation_offset(g, p.n0, p.o0, g.o, ohw), e));
      else if (pass == ConvPass::backward_data)
        run(plan, yp, wp, w_prim, nullptr, out_at(activation_offset(g, p.n0, p.c0, g.c, hw), e));
      else
        run(plan, xp, yp, nullptr, nullptr, out_at(outs ? 0 : weight_offset(g, p), sizeof(float)));
    }
  });
}

}  // namespace

bool onednn_conv_supports(const Conv2dGeometry& g, ConvPass pass, bool bias) {
  for (const Piece& p : pieces_for(g, pass))
    if (!plan_for(g, p, pass, bias)) return false;
  return true;
}

void onednn_conv_forward(const Conv2dGeometry& g, const void* x, const void* w, const float* bias, void* y) {
  run_pieces(g, ConvPass::forward, pieces_for(g, ConvPass::forward), x, w, nullptr, bias, y, nullptr);
}

void onednn_conv_backward_data(const Conv2dGeometry& g, const void* dy, const void* w, void* dx) {
  run_pieces(g, ConvPass::backward_data, pieces_for(g, ConvPass::backward_data), nullptr, w, dy, nullptr, dx, nullptr);
}

void onednn_conv_backward_weight(const Conv2dGeometry& g, const void* x, const void* dy, float* dw) {
  const std::vector<Piece> pieces = pieces_for(g, ConvPass::backward_weight);
  if (pieces.size() == 1 || pieces[0].o < g.o)
    return run_pieces(g, ConvPass::backward_weight, pieces, x, nullptr, dy, nullptr, dw, nullptr);
  const int64_t wsize = w_size(g);
  float* parts = thread_scratch(ScratchSlot::piece_gradients, pieces.size() * wsize * sizeof(float));
  std::vector<float*> outs;
  for (size_t i = 0; i < pieces.size(); ++i) outs.push_back(parts + i * wsize);
  run_pieces(g, ConvPass::backward_weight, pieces, x, nullptr, dy, nullptr, dw, outs.data());
  std::copy(parts, parts + wsize, dw);
  for (size_t i = 1; i < pieces.size(); ++i)
    for (int64_t j = 0; j < wsize; ++j) dw[j] += parts[i * wsize + j];
}

}  // namespace cpu
}  // namespace tandem
