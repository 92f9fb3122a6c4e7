// Op cases for Tensor's views (view, reshape, permute, transpose, slice, narrow, select, unsqueeze, squeeze,
// flatten, expand) and copies (contiguous, clone, to(dtype), copy_, fill_).
#include <cmath>

#include "runtime/tensor/ops.h"
#include "tests/runtime/op_cases.h"

namespace tandem {
namespace testing {

namespace {
using ViewFn = std::function<Tensor(const Tensor&)>;
using ViewRef = std::function<HostTensor(const HostTensor&)>;

OpCase view_case(const std::string& name, Shape shape, ViewFn f, ViewRef r, bool grad = true) {
  return make_case(
      name, {float_in(std::move(shape))}, [f](const TV& in, DType) { return TV{f(in[0])}; },
      [r](const HV& in) { return HV{r(in[0])}; }, grad);
}

// A view that keeps the input's values in their order under the shape `out`: its reference is a reshape.
OpCase reshaped_case(const std::string& name, Shape shape, ViewFn f, Shape out) {
  return view_case(name, std::move(shape), std::move(f), [out](const HostTensor& h) { return ref::reshape(h, out); });
}

void add_views(std::vector<OpCase>& cs) {
  const Shape x{2, 3, 4};
  cs.push_back(reshaped_case("view_6x4", x, [](const Tensor& t) { return t.view({6, 4}); }, {6, 4}));
  cs.push_back(reshaped_case("view_infer_dim", x, [](const Tensor& t) { return t.view({-1, 2}); }, {12, 2}));
  // A view of a permuted tensor that only splits its contiguous last dim: no copy needed.
  cs.push_back(view_case(
      "view_of_permuted", x,
      [](const Tensor& t) {
        return t.permute({1, 0, 2}).view({3, 2, 2, 2});
      },
      [](const HostTensor& h) {
        return ref::reshape(ref::permute(h, {1, 0, 2}), {3, 2, 2, 2});
      }));
  cs.push_back(reshaped_case("reshape_view_path", x, [](const Tensor& t) { return t.reshape({4, 6}); }, {4, 6}));
  cs.push_back(view_case(
      "reshape_copy_path", x,
      [](const Tensor& t) {
        return t.permute({2, 0, 1}).reshape({-1});
      },
      [](const HostTensor& h) {
        return ref::reshape(ref::permute(h, {2, 0, 1}), {24});
      }));
  cs.push_back(view_case(
      "permute_2_0_1", x,
      [](const Tensor& t) {
        return t.permute({2, 0, 1});
      },
      [](const HostTensor& h) {
        return ref::permute(h, {2, 0, 1});
      }));
  cs.push_back(view_case(
      "permute_negative_dims", x,
      [](const Tensor& t) {
        return t.permute({-1, -3, -2});
      },
      [](const HostTensor& h) {
        return ref::permute(h, {2, 0, 1});
      }));
  cs.push_back(view_case(
      "transpose_0_2", x, [](const Tensor& t) { return t.transpose(0, 2); },
      [](const HostTensor& h) { return ref::transpose(h, 0, 2); }));
  cs.push_back(view_case(
      "transpose_neg", x, [](const Tensor& t) { return t.transpose(-1, -2); },
      [](const HostTensor& h) { return ref::transpose(h, 1, 2); }));
  cs.push_back(view_case(
      "t_2d", {3, 5}, [](const Tensor& t) { return t.t(); },
      [](const HostTensor& h) { return ref::transpose(h, 0, 1); }));
  cs.push_back(view_case(
      "slice_step_2", {2, 5, 4}, [](const Tensor& t) { return t.slice(1, 0, 5, 2); },
      [](const HostTensor& h) { return ref::slice(h, 1, 0, 5, 2); }));
  cs.push_back(view_case(
      "slice_step_3_offset", {2, 3, 7}, [](const Tensor& t) { return t.slice(2, 1, 7, 3); },
      [](const HostTensor& h) { return ref::slice(h, 2, 1, 7, 3); }));
  cs.push_back(view_case(
      "slice_negative_bounds", x, [](const Tensor& t) { return t.slice(-1, -3, -1); },
      [](const HostTensor& h) { return ref::slice(h, 2, -3, -1, 1); }));
  cs.push_back(view_case(
      "slice_clamped_bounds", x, [](const Tensor& t) { return t.slice(0, -10, 10); },
      [](const HostTensor& h) { return ref::slice(h, 0, -10, 10, 1); }));
  cs.push_back(view_case(
      "slice_of_transposed", {5, 4}, [](const Tensor& t) { return t.t().slice(1, 1, 5, 2); },
      [](const HostTensor& h) { return ref::slice(ref::transpose(h, 0, 1), 1, 1, 5, 2); }));
  cs.push_back(view_case(
      "narrow_dim_2", x, [](const Tensor& t) { return t.narrow(2, 1, 2); },
      [](const HostTensor& h) { return ref::slice(h, 2, 1, 3, 1); }));
  auto select_ref = [](const HostTensor& h, int64_t dim, int64_t i) {
    HostTensor s = ref::slice(h, dim, i, i + 1, 1);
    s.shape.erase(s.shape.begin() + dim);
    return s;
  };
  cs.push_back(view_case(
      "select_dim_1_neg_index", x, [](const Tensor& t) { return t.select(1, -1); },
      [select_ref](const HostTensor& h) { return select_ref(h, 1, 2); }));
  cs.push_back(view_case(
      "select_dim_0", x, [](const Tensor& t) { return t.select(0, 1); },
      [select_ref](const HostTensor& h) { return select_ref(h, 0, 1); }));
  cs.push_back(reshaped_case("unsqueeze_0", x, [](const Tensor& t) { return t.unsqueeze(0); }, {1, 2, 3, 4}));
  cs.push_back(view_case(
      "unsqueeze_neg1_of_transposed", {3, 4}, [](const Tensor& t) { return t.t().unsqueeze(-1); },
      [](const HostTensor& h) {
        return ref::reshape(ref::transpose(h, 0, 1), {4, 3, 1});
      }));
  cs.push_back(reshaped_case("squeeze_1", {2, 1, 4}, [](const Tensor& t) { return t.squeeze(1); }, {2, 4}));
  cs.push_back(reshaped_case("flatten_1_2", {2, 3, 4, 2}, [](const Tensor& t) { return t.flatten(1, 2); }, {2, 12, 2}));
  cs.push_back(view_case(
      "flatten_all_of_permuted", x,
      [](const Tensor& t) {
        return t.permute({1, 2, 0}).flatten();
      },
      [](const HostTensor& h) {
        return ref::reshape(ref::permute(h, {1, 2, 0}), {24});
      }));
  cs.push_back(reshaped_case("flatten_0d", {}, [](const Tensor& t) { return t.flatten(); }, {1}));
  cs.push_back(view_case(
      "expand_3x1_to_2x3x4", {3, 1},
      [](const Tensor& t) {
        return t.expand({2, 3, 4});
      },
      [](const HostTensor& h) {
        return ref::broadcast_to(h, {2, 3, 4});
      }));
  cs.push_back(view_case(
      "expand_0d", {},
      [](const Tensor& t) {
        return t.expand({2, 3});
      },
      [](const HostTensor& h) {
        return ref::broadcast_to(h, {2, 3});
      }));
}

void add_copies(std::vector<OpCase>& cs) {
  const Shape x{2, 3, 4};
  cs.push_back(view_case(
      "contiguous_of_permuted", x,
      [](const Tensor& t) {
        return t.permute({2, 0, 1}).contiguous();
      },
      [](const HostTensor& h) {
        return ref::permute(h, {2, 0, 1});
      }));
  cs.back().batch_inputs = {0};  // the copies here work on any batch (the benchmark may scale it)
  cs.push_back(view_case(
      "clone", x, [](const Tensor& t) { return t.clone(); }, [](const HostTensor& h) { return h; }));
  cs.back().batch_inputs = {0};
  cs.push_back(view_case(
      "clone_of_expanded", {3, 1},
      [](const Tensor& t) {
        return t.expand({2, 3, 4}).clone();
      },
      [](const HostTensor& h) {
        return ref::broadcast_to(h, {2, 3, 4});
      }));
  // Conversions between the compute dtypes. Finite differences through an f32 rounding would mean nothing, so
  // the inputs are multiples of 2^-8 in [-4, 4) and the step is 2^-8: x and x +- step are exact in f32, the cast
  // is then the identity on them and the difference quotient its exact derivative. The f64 run checks the
  // f64 -> f32 cast's backward (to_f32) and the f32 run the f32 -> f64 one (to_f64) against it.
  const double step = 1.0 / 256;
  for (DType to : {DType::F32, DType::F64}) {
    cs.push_back(make_case(
        std::string("to_") + dtype_name(to), {float_in(x, grid_values(step, -4, 4))},
        [to](const TV& in, DType) { return TV{in[0].to(to)}; },
        [to](const HV& in) {
          HostTensor y = in[0];
          y.dtype = to;
          return HV{y};
        }));
    cs.back().fd_step = step;
    cs.back().batch_inputs = {0};
  }
  // To bf16 (8 significant bits), rounded to nearest with ties to even: multiples of 2^-12 in [-4, 4) are exact
  // in f32 and f64 (no double rounding) and include values halfway between two bf16 neighbours.
  cs.push_back(make_case(
      "to_bf16", {float_in(x, grid_values(1.0 / 4096, -4, 4))},
      [](const TV& in, DType) { return TV{in[0].to(DType::BF16)}; },
      [](const HV& in) {
        HostTensor y = ref::map(in[0], [](double v) {
          if (v == 0) return v;
          const double ulp = std::ldexp(1.0, std::ilogb(v) - 7);  // 2^(exponent - 7)
          return std::nearbyint(v / ulp) * ulp;                   // the default rounding: ties to even
        });
        y.dtype = DType::BF16;
        return HV{y};
      },
      false));
  cs.back().batch_inputs = {0};
  cs.push_back(make_case(
      "contiguous_of_t_2d", {float_in({3, 4})}, [](const TV& in, DType) { return TV{in[0].t().contiguous()}; },
      [](const HV& in) {
        return HV{ref::permute(in[0], {1, 0})};
      }));
  cs.back().batch_inputs = {0};
  cs.push_back(make_case(
      "copy_into_permuted", {float_in(x)},
      [](const TV& in, DType dt) {
        Tensor dst = zeros({4, 3, 2}, TensorOptions(dt).with_device(in[0].device()));
        dst.permute({2, 1, 0}).copy_(in[0]);
        return TV{dst};
      },
      [](const HV& in) {
        return HV{ref::permute(in[0], {2, 1, 0})};
      },
      false));
  cs.push_back(make_case(
      "copy_broadcast_other_dtype", {float_in({3, 1})},
      [x](const TV& in, DType dt) {
        DType other = dt == DType::F32 ? DType::F64 : DType::F32;
        Tensor dst = zeros(x, TensorOptions(other).with_device(in[0].device()));
        dst.copy_(in[0]);
        return TV{dst.to(dt)};
      },
      [x](const HV& in) { return HV{ref::broadcast_to(in[0], x)}; }, false));
  cs.push_back(make_case(
      "fill_stepped_slice", {float_in(x)},
      [](const TV& in, DType) {
        Tensor y = in[0].clone();
        y.slice(1, 0, 3, 2).fill_(2.5);
        return TV{y};
      },
      [](const HV& in) {
        HostTensor y = in[0];
        for (int64_t i = 0; i < y.numel(); ++i)
          if (ref::unravel(i, y.shape)[1] % 2 == 0) y.v[i] = 2.5;
        return HV{y};
      },
      false));
}
}  // namespace

std::vector<OpCase> view_copy_cases() {
  std::vector<OpCase> cs;
  add_views(cs);
  add_copies(cs);
  return cs;
}

}  // namespace testing
}  // namespace tandem
