// Op cases for joining and splitting (concat, split, chunk along each dim) and indexing (index_select,
// gather, one_hot).
#include "runtime/tensor/ops.h"
#include "tests/runtime/op_cases.h"

namespace tandem {
namespace testing {

namespace {

std::string dim_name(int64_t d) { return d < 0 ? "dim_neg" + std::to_string(-d) : "dim_" + std::to_string(d); }

// The shape [2, 3, 4] with `dim` set to `size`.
Shape with_dim(int64_t dim, int64_t size) {
  Shape s{2, 3, 4};
  s[dim < 0 ? dim + 3 : dim] = size;
  return s;
}

void add_concat(std::vector<OpCase>& cs) {
  for (int64_t dim : {0, 1, 2, -1}) {
    cs.push_back(make_case(
        "concat_" + dim_name(dim), {float_in(with_dim(dim, 1)), float_in(with_dim(dim, 2)), float_in(with_dim(dim, 3))},
        [dim](const TV& in, DType) { return TV{concat(in, dim)}; },
        [dim](const HV& in) { return HV{ref::concat(in, dim)}; }));
  }
  // A strided part, and one that does not require grad.
  OpCase mixed = make_case(
      "concat_strided_and_constant", {float_in({4, 3}), float_in({2, 4}, normal_values(), false)},
      [](const TV& in, DType) {
        return TV{concat({in[0].t(), in[1]}, 0)};
      },
      [](const HV& in) {
        return HV{ref::concat({ref::transpose(in[0], 0, 1), in[1]}, 0)};
      });
  cs.push_back(mixed);
}

void add_split_chunk(std::vector<OpCase>& cs) {
  const std::pair<int64_t, std::vector<int64_t>> splits[] = {{0, {1, 1}}, {1, {1, 2}}, {2, {1, 0, 3}}, {-1, {2, 2}}};
  for (const auto& [d, s] : splits) {
    int64_t dim = d;
    std::vector<int64_t> sizes = s;
    cs.push_back(make_case(
        "split_sizes_" + dim_name(dim), {float_in({2, 3, 4})},
        [dim, sizes](const TV& in, DType) { return split(in[0], sizes, dim); },
        [dim, sizes](const HV& in) { return ref::split(in[0], sizes, dim); }));
  }
  cs.push_back(make_case(
      "split_equal_with_remainder", {float_in({2, 3, 5})},
      [](const TV& in, DType) { return split(in[0], int64_t{2}, 2); },
      [](const HV& in) {
        return ref::split(in[0], {2, 2, 1}, 2);
      }));
  const std::tuple<const char*, Shape, int64_t, int64_t, std::vector<int64_t>> chunks[] = {
      {"chunk_dim_0", {4, 3, 2}, 2, 0, {2, 2}},
      {"chunk_dim_1_uneven", {2, 5, 3}, 2, 1, {3, 2}},
      {"chunk_dim_neg1", {2, 3, 4}, 3, -1, {2, 2}},
      {"chunk_dim_2_exact", {2, 3, 6}, 3, 2, {2, 2, 2}}};
  for (const auto& [name, shape, n, d, s] : chunks) {
    int64_t count = n, dim = d;
    std::vector<int64_t> sizes = s;
    cs.push_back(make_case(
        name, {float_in(shape)}, [count, dim](const TV& in, DType) { return chunk(in[0], count, dim); },
        [dim, sizes](const HV& in) { return ref::split(in[0], sizes, dim); }));
  }
  // Only some parts used: the unused ones get zero gradients.
  cs.push_back(make_case(
      "split_first_part_only", {float_in({4, 3})},
      [](const TV& in, DType) {
        return TV{split(in[0], std::vector<int64_t>{1, 3}, 0)[1]};
      },
      [](const HV& in) { return HV{ref::slice(in[0], 0, 1, 4, 1)}; }));
}

void add_indexing(std::vector<OpCase>& cs) {
  // Indices repeat (5 draws from 4 or fewer values), so the backward must accumulate.
  const std::tuple<int64_t, Shape, int64_t> selects[] = {
      {0, {4, 3, 2}, 5}, {1, {2, 5, 3}, 6}, {2, {2, 3, 5}, 7}, {-1, {3, 4}, 2}};
  for (const auto& [d, shape, n] : selects) {
    int64_t dim = d;
    int64_t bound = shape[ref::wrap(dim, static_cast<int64_t>(shape.size()))];
    cs.push_back(make_case(
        "index_select_" + dim_name(dim), {float_in(shape), index_in({n}, bound)},
        [dim](const TV& in, DType) { return TV{index_select(in[0], dim, in[1])}; },
        [dim](const HV& in) { return HV{ref::index_select(in[0], dim, in[1])}; }));
  }
  const std::tuple<int64_t, Shape, Shape> gathers[] = {{0, {4, 3}, {5, 3}},
                                                       {1, {3, 4}, {3, 6}},
                                                       {2, {2, 3, 4}, {2, 3, 5}},
                                                       {1, {2, 3, 4}, {2, 2, 4}},
                                                       {-1, {3, 4}, {3, 2}}};
  for (const auto& [d, xs, is] : gathers) {
    int64_t dim = d;
    int64_t bound = xs[ref::wrap(dim, static_cast<int64_t>(xs.size()))];
    cs.push_back(make_case(
        "gather_" + dim_name(dim) + "_" + std::to_string(xs.size()) + "d", {float_in(xs), index_in(is, bound)},
        [dim](const TV& in, DType) { return TV{gather(in[0], dim, in[1])}; },
        [dim](const HV& in) { return HV{ref::gather(in[0], dim, in[1])}; }));
  }
  cs.push_back(make_case(
      "one_hot_2d", {index_in({2, 3}, 5)}, [](const TV& in, DType dt) { return TV{one_hot(in[0], 5, dt)}; },
      [](const HV& in) { return HV{ref::one_hot(in[0], 5)}; }, false));
  cs.push_back(make_case(
      "one_hot_1d_u8", {index_in({6}, 4)}, [](const TV& in, DType) { return TV{one_hot(in[0], 4, DType::U8)}; },
      [](const HV& in) {
        HostTensor y = ref::one_hot(in[0], 4);
        y.dtype = DType::U8;
        return HV{y};
      },
      false));
}
}  // namespace

std::vector<OpCase> join_index_cases() {
  std::vector<OpCase> cs;
  add_concat(cs);
  add_split_chunk(cs);
  add_indexing(cs);
  return cs;
}

}  // namespace testing
}  // namespace tandem
