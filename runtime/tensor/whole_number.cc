// Whole-number checks of checkpoint tensors before they are converted to integer types.
#include "runtime/tensor/whole_number.h"

#include <cmath>
#include <limits>
#include <vector>

#include "runtime/base/error.h"

namespace tandem {

namespace {

// The range of an integer dtype, as doubles (int64's ends are powers of two, hence exact).
void integer_range(DType t, double* lo, double* hi) {
  switch (t) {
    case DType::U8:
      *lo = 0;
      *hi = 255;
      return;
    case DType::I32:
      *lo = std::numeric_limits<int32_t>::min();
      *hi = std::numeric_limits<int32_t>::max();
      return;
    default:
      *lo = -9223372036854775808.0;
      *hi = 9223372036854775808.0;
      return;  // hi is exclusive for I64
  }
}

}  // namespace

void check_converts_exactly(const Tensor& t, DType to, const std::string& what) {
  if (is_floating(to)) return;
  double lo = 0, hi = 0;
  integer_range(to, &lo, &hi);
  const bool exclusive_hi = to == DType::I64;
  if (is_floating(t.dtype())) {
    const std::vector<double> v = t.detach().to(Device::cpu()).to(DType::F64).contiguous().to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i)
      TD_CHECK(std::isfinite(v[i]) && std::floor(v[i]) == v[i] && v[i] >= lo && (exclusive_hi ? v[i] < hi : v[i] <= hi),
               what, ": element ", i, " is ", v[i], ", not a whole number that fits ", dtype_name(to));
  } else if (to != DType::I64) {
    const std::vector<int64_t> v = t.detach().to(Device::cpu()).to(DType::I64).contiguous().to_vector<int64_t>();
    for (size_t i = 0; i < v.size(); ++i)
      TD_CHECK(v[i] >= lo && v[i] <= hi, what, ": element ", i, " is ", v[i], ", outside the range of ",
               dtype_name(to));
  }
}

int64_t whole_number(const Tensor& t, const std::string& what) {
  TD_CHECK_SHAPE(t.numel() == 1, what, " must hold one number, got shape ", shape_str(t.shape()));
  check_converts_exactly(t, DType::I64, what);
  return t.detach().to(Device::cpu()).to(DType::I64).item<int64_t>();
}

}  // namespace tandem
