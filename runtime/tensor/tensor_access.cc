// The bytes a tensor's view spans, from its first element to its last (strides may leave gaps inside).
#include "runtime/tensor/tensor_access.h"

namespace tandem {
namespace stream_check {

namespace {

Access span(const Tensor& t, bool write) {
  if (!t.defined() || t.numel() == 0) return Access{};
  int64_t last = 0;
  for (int64_t i = 0; i < t.dim(); ++i) last += (t.shape()[i] - 1) * t.strides()[i];
  return Access{t.raw_data(), write, static_cast<size_t>(last + 1) * dtype_size(t.dtype())};
}

}  // namespace

Access reads(const Tensor& t) { return span(t, false); }
Access writes(const Tensor& t) { return span(t, true); }

}  // namespace stream_check
}  // namespace tandem
