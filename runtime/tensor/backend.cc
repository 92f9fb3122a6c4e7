// The backend registry and the Tensor -> StridedDesc helpers.
#include "runtime/tensor/backend.h"

#include "runtime/base/error.h"
#include "runtime/tensor/checked_backend.h"
#include "runtime/tensor/kernel_registry.h"
#include "runtime/tensor/tensor_desc.h"

namespace tandem {

namespace {
KernelRegistry<Backend>& registry() {
  static KernelRegistry<Backend> r([](Backend& k) { return observe_backend(k, stream_check_observer()); }, "kernels");
  return r;
}
}  // namespace

void register_backend(DeviceType type, Backend* backend) { registry().set(type, backend); }

Backend* registered_backend(DeviceType type) { return registry().registered(type); }

Backend& backend_for(Device device) { return registry().get(device); }

Backend& backend_of(const Tensor& t) { return backend_for(t.device()); }

StridedDesc desc_of(const Tensor& t) {
  TD_CHECK_SHAPE(t.dim() <= kMaxDims, "tensors have at most ", kMaxDims, " dims, got ", shape_str(t.shape()));
  StridedDesc d;
  d.ndim = static_cast<int>(t.dim());
  for (int i = 0; i < d.ndim; ++i) {
    d.shape[i] = t.shape()[i];
    d.strides[i] = t.strides()[i];
  }
  return d;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TD_CHECK_SHAPE(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
                   " do not broadcast (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

StridedDesc broadcast_desc(const Tensor& t, const Shape& out) {
  TD_CHECK_SHAPE(static_cast<int64_t>(out.size()) <= kMaxDims, "tensors have at most ", kMaxDims, " dims");
  TD_CHECK_SHAPE(t.dim() <= static_cast<int64_t>(out.size()), "cannot broadcast ", shape_str(t.shape()), " to ",
                 shape_str(out));
  StridedDesc d;
  d.ndim = static_cast<int>(out.size());
  size_t lead = out.size() - t.shape().size();
  for (size_t i = 0; i < out.size(); ++i) {
    d.shape[i] = out[i];
    if (i < lead) {
      d.strides[i] = 0;
      continue;
    }
    int64_t s = t.shape()[i - lead];
    TD_CHECK_SHAPE(s == out[i] || s == 1, "cannot broadcast ", shape_str(t.shape()), " to ", shape_str(out));
    d.strides[i] = (s == 1 && out[i] != 1) ? 0 : t.strides()[i - lead];
  }
  return d;
}

void check_same_device(const std::vector<Tensor>& ts, const char* op) {
  for (const Tensor& t : ts) TD_CHECK(t.defined(), op, ": an input tensor is undefined");
  for (size_t i = 1; i < ts.size(); ++i)
    TD_CHECK_DEVICE(ts[i].device() == ts[0].device(), op, ": inputs are on different devices (", ts[0].device(),
                    " and ", ts[i].device(), "); move them with .to(device)");
}

void check_same_dtype(const std::vector<Tensor>& ts, const char* op) {
  for (size_t i = 1; i < ts.size(); ++i)
    TD_CHECK_DTYPE(ts[i].dtype() == ts[0].dtype(), op, ": inputs have different dtypes (", dtype_name(ts[0].dtype()),
                   " and ", dtype_name(ts[i].dtype()), "); convert with .to(dtype)");
}

void check_float(const Tensor& t, const char* op) {
  TD_CHECK_DTYPE(is_compute_float(t.dtype()), op, " needs an f32 or f64 tensor, got ", dtype_name(t.dtype()),
                 " (convert with .to(DType::F32))");
}

}  // namespace tandem
