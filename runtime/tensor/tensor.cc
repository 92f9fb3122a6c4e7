// Tensor metadata, factories, views (with their backward), copies across devices and dtypes, printing.
#include "runtime/tensor/tensor.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "runtime/base/cuda_check.h"
#include "runtime/base/device_errors.h"
#include "runtime/base/error.h"
#include "runtime/memory/cuda_graph.h"
#include "runtime/memory/stream_check.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/layout.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor_access.h"
#include "runtime/tensor/tensor_desc.h"

namespace tandem {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

int64_t wrap_dim(int64_t dim, int64_t ndim) {
  // A 0-dim tensor has no dim to index: every caller reads shape()[dim] afterwards.
  TD_CHECK_INDEX(dim >= -ndim && dim < ndim, "dim ", dim, " is out of range for a tensor with ", ndim, " dims");
  return dim < 0 ? dim + ndim : dim;
}

Device TensorOptions::resolved_device() const { return device ? *device : current_device(); }

// ---- metadata ----

#define TD_DEFINED() TD_CHECK(impl_ != nullptr, "operation on an undefined tensor")

const Shape& Tensor::shape() const {
  TD_DEFINED();
  return impl_->shape;
}
int64_t Tensor::dim() const {
  TD_DEFINED();
  return static_cast<int64_t>(impl_->shape.size());
}
int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim())]; }
int64_t Tensor::numel() const { return shape_numel(shape()); }
const Shape& Tensor::strides() const {
  TD_DEFINED();
  return impl_->strides;
}
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim())]; }
int64_t Tensor::storage_offset() const {
  TD_DEFINED();
  return impl_->offset;
}
DType Tensor::dtype() const {
  TD_DEFINED();
  return impl_->dtype;
}
Device Tensor::device() const {
  TD_DEFINED();
  return impl_->storage.device();
}
const Storage& Tensor::storage() const {
  TD_DEFINED();
  return impl_->storage;
}

bool Tensor::is_contiguous() const {
  TD_DEFINED();
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (impl_->shape[i] != 1 && impl_->strides[i] != expected) return false;
    expected *= impl_->shape[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  TD_DEFINED();
  return static_cast<char*>(impl_->storage.data()) + impl_->offset * static_cast<int64_t>(dtype_size(impl_->dtype));
}

template <typename T>
T* Tensor::data() const {
  TD_CHECK_DTYPE(dtype() == dtype_of<T>::value, "data<T>() asked for ", dtype_name(dtype_of<T>::value),
                 " but the tensor holds ", dtype_name(dtype()));
  return static_cast<T*>(raw_data());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int32_t* Tensor::data<int32_t>() const;
template int64_t* Tensor::data<int64_t>() const;
template uint8_t* Tensor::data<uint8_t>() const;

// ---- factories ----

Tensor empty(const Shape& shape, TensorOptions opts) {
  for (int64_t d : shape) TD_CHECK_SHAPE(d >= 0, "negative dimension in shape ", shape_str(shape));
  TD_CHECK_SHAPE(static_cast<int64_t>(shape.size()) <= kMaxDims, "tensors have at most ", kMaxDims, " dims, got ",
                 shape_str(shape));
  Device device = opts.resolved_device();
  size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(opts.dtype);
  Tensor t(std::make_shared<TensorImpl>(Storage::allocate(bytes, device, current_stream(device), opts.pinned), 0, shape,
                                        contiguous_strides(shape), opts.dtype));
  if (opts.requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor full(const Shape& shape, double value, TensorOptions opts) {
  bool rg = opts.requires_grad;
  Tensor t = empty(shape, opts.with_requires_grad(false));
  {
    autograd::NoGradGuard ng;
    t.fill_(value);
  }
  if (rg) t.set_requires_grad(true);
  return t;
}
Tensor zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0.0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1.0, opts); }

Tensor empty_like(const Tensor& t, TensorOptions opts) {
  if (!is_dense(t) || t.is_contiguous()) return empty(t.shape(), opts);
  // The same bytes read in t's order: element 0 comes first in memory in every dense layout.
  Tensor out(std::make_shared<TensorImpl>(empty(t.shape(), opts.with_requires_grad(false)).storage(), 0, t.shape(),
                                          t.strides(), opts.dtype));
  if (opts.requires_grad) out.set_requires_grad(true);
  return out;
}
Tensor empty_like(const Tensor& t) { return empty_like(t, t.options()); }
Tensor full_like(const Tensor& t, double v) {
  Tensor out = empty_like(t);
  autograd::NoGradGuard ng;
  return out.fill_(v);
}
Tensor zeros_like(const Tensor& t) { return full_like(t, 0.0); }
Tensor ones_like(const Tensor& t) { return full_like(t, 1.0); }
Tensor scalar_tensor(double value, TensorOptions opts) { return full({}, value, opts); }

Tensor arange(int64_t n, TensorOptions opts) {
  TD_CHECK(n >= 0, "arange(", n, "): n must be >= 0");
  std::vector<double> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0);
  return from_vector(v, {n}, opts.resolved_device()).to(opts.dtype);
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, std::optional<Device> device) {
  TD_CHECK_SHAPE(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
                 " values do not fill shape ", shape_str(shape));
  Tensor host = empty(shape, TensorOptions(dtype_of<T>::value).with_device(Device::cpu()));
  if (!values.empty()) std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(T));
  Device d = device ? *device : current_device();
  return d.is_cpu() ? host : host.to(d);
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&, std::optional<Device>);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, std::optional<Device>);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&, std::optional<Device>);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, std::optional<Device>);
template Tensor from_vector<uint8_t>(const std::vector<uint8_t>&, const Shape&, std::optional<Device>);

// ---- views ----

namespace {
// A view sharing t's storage with new geometry; no autograd.
Tensor make_view(const Tensor& t, Shape shape, Shape strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(t.storage(), offset, std::move(shape), std::move(strides), t.dtype()));
}

Shape infer_shape(const Shape& requested, int64_t numel) {
  Shape s = requested;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      TD_CHECK_SHAPE(infer < 0, "only one dimension can be -1 in ", shape_str(requested));
      infer = static_cast<int64_t>(i);
    } else {
      TD_CHECK_SHAPE(s[i] >= 0, "invalid dimension ", s[i], " in ", shape_str(requested));
      known *= s[i];
    }
  }
  if (infer >= 0) {
    TD_CHECK_SHAPE(known != 0 && numel % known == 0, "shape ", shape_str(requested), " is invalid for ", numel,
                   " elements");
    s[infer] = numel / known;
  }
  TD_CHECK_SHAPE(shape_numel(s) == numel, "shape ", shape_str(requested), " is invalid for ", numel, " elements");
  return s;
}

// Strides for viewing (shape, strides) as new_shape without a copy, or empty if impossible.
std::optional<Shape> view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape) {
  if (shape_numel(shape) == 0 || shape.empty()) return contiguous_strides(new_shape);
  Shape out(new_shape.size());
  // Walk chunks of old dims that are contiguous among themselves, matching them to new dims.
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}
}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  Shape s = infer_shape(requested, numel());
  auto st = view_strides(shape(), strides(), s);
  TD_CHECK_SHAPE(st.has_value(), "view(", shape_str(requested), ") is impossible on a tensor of shape ",
                 shape_str(shape()), " with strides ", shape_str(strides()), "; use reshape() to copy");
  Tensor out = make_view(*this, s, *st, storage_offset());
  Shape in_shape = shape();
  autograd::record("view", {*this}, {out}, [in_shape](std::vector<Tensor>& g, const std::vector<bool>&) {
    return std::vector<Tensor>{g[0].reshape(in_shape)};
  });
  return out;
}

Tensor Tensor::reshape(const Shape& requested) const {
  Shape s = infer_shape(requested, numel());
  if (view_strides(shape(), strides(), s)) return view(s);
  return contiguous().view(s);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  int64_t n = dim();
  TD_CHECK_SHAPE(static_cast<int64_t>(dims.size()) == n, "permute: ", dims.size(), " dims given for a ", n,
                 "-dim tensor");
  std::vector<int64_t> d(dims.size());
  std::vector<bool> seen(n, false);
  for (int64_t i = 0; i < n; ++i) {
    d[i] = wrap_dim(dims[i], n);
    TD_CHECK_SHAPE(!seen[d[i]], "permute: dim ", d[i], " repeated");
    seen[d[i]] = true;
  }
  Shape s(n), st(n);
  for (int64_t i = 0; i < n; ++i) {
    s[i] = shape()[d[i]];
    st[i] = strides()[d[i]];
  }
  Tensor out = make_view(*this, s, st, storage_offset());
  std::vector<int64_t> inverse(n);
  for (int64_t i = 0; i < n; ++i) inverse[d[i]] = i;
  autograd::record("permute", {*this}, {out}, [inverse](std::vector<Tensor>& g, const std::vector<bool>&) {
    return std::vector<Tensor>{g[0].permute(inverse)};
  });
  return out;
}

Tensor Tensor::transpose(int64_t a, int64_t b) const {
  int64_t n = dim();
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[wrap_dim(a, n)], p[wrap_dim(b, n)]);
  return permute(p);
}

Tensor Tensor::t() const {
  TD_CHECK_SHAPE(dim() == 2, "t() needs a 2-D tensor, got shape ", shape_str(shape()));
  return transpose(0, 1);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim());
  int64_t n = shape()[d];
  TD_CHECK_INDEX(step > 0, "slice step must be positive, got ", step);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape(), st = strides();
  s[d] = (end - start + step - 1) / step;
  st[d] *= step;
  Tensor out = make_view(*this, s, st, storage_offset() + start * strides()[d]);
  Shape in_shape = shape();
  autograd::record("slice", {*this}, {out},
                   [in_shape, d, start, end, step](std::vector<Tensor>& g, const std::vector<bool>&) {
                     Tensor gx = zeros(in_shape, g[0].options());
                     gx.slice(d, start, end, step).copy_(g[0]);
                     return std::vector<Tensor>{gx};
                   });
  return out;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim());
  TD_CHECK_INDEX(start >= 0 && length >= 0 && start + length <= shape()[d], "narrow(dim ", d, ", start ", start,
                 ", length ", length, ") is out of range for size ", shape()[d]);
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d, dim());
  int64_t n = shape()[d];
  TD_CHECK_INDEX(index >= -n && index < n, "select: index ", index, " is out of range for size ", n);
  if (index < 0) index += n;
  return narrow(d, index, 1).squeeze(d);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1);
  Shape s = shape();
  s.insert(s.begin() + d, 1);
  return view(s);
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, dim());
  TD_CHECK_SHAPE(shape()[d] == 1, "squeeze: dim ", d, " has size ", shape()[d], ", not 1");
  Shape s = shape();
  s.erase(s.begin() + d);
  Shape st = strides();
  st.erase(st.begin() + d);
  Tensor out = make_view(*this, s, st, storage_offset());
  Shape in_shape = shape();
  autograd::record("squeeze", {*this}, {out}, [in_shape](std::vector<Tensor>& g, const std::vector<bool>&) {
    return std::vector<Tensor>{g[0].reshape(in_shape)};
  });
  return out;
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return reshape({1});
  start = wrap_dim(start, dim());
  end = wrap_dim(end, dim());
  TD_CHECK_SHAPE(start <= end, "flatten: start dim ", start, " after end dim ", end);
  Shape s(shape().begin(), shape().begin() + start);
  int64_t m = 1;
  for (int64_t i = start; i <= end; ++i) m *= shape()[i];
  s.push_back(m);
  s.insert(s.end(), shape().begin() + end + 1, shape().end());
  return reshape(s);
}

Tensor Tensor::expand(const Shape& target) const {
  StridedDesc d = broadcast_desc(*this, target);
  Shape st(d.strides, d.strides + d.ndim);
  Tensor out = make_view(*this, target, st, storage_offset());
  Shape in_shape = shape();
  autograd::record("expand", {*this}, {out}, [in_shape](std::vector<Tensor>& g, const std::vector<bool>&) {
    return std::vector<Tensor>{sum_to(g[0], in_shape)};
  });
  return out;
}

// ---- copies ----

namespace {
// A copy of t in `out` (t's shape) that passes the gradient through.
Tensor copy_into(const Tensor& t, Tensor out) {
  {
    autograd::NoGradGuard ng;
    out.copy_(t);
  }
  autograd::record("clone", {t}, {out},
                   [](std::vector<Tensor>& g, const std::vector<bool>&) { return std::vector<Tensor>{g[0]}; });
  return out;
}
}  // namespace

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return copy_into(*this, empty(shape(), options()));
}

Tensor Tensor::clone() const { return copy_into(*this, empty_like(*this)); }

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  Tensor out = empty_like(*this, TensorOptions(t).with_device(device()));
  {
    autograd::NoGradGuard ng;
    out.copy_(*this);
  }
  if (carries_grad(t) && carries_grad(dtype())) {
    DType from = dtype();
    autograd::record("to_dtype", {*this}, {out}, [from](std::vector<Tensor>& g, const std::vector<bool>&) {
      return std::vector<Tensor>{g[0].to(from)};
    });
  }
  return out;
}

Tensor Tensor::pinned() const {
  TD_DEFINED();
  TD_CHECK_DEVICE(device().is_cpu(), "pinned() makes page-locked host memory from a CPU tensor, not from ", device());
  if (storage().pinned()) return *this;
  Tensor out = empty_like(*this, TensorOptions(dtype()).with_device(Device::cpu()).with_pinned());
  autograd::NoGradGuard ng;
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  Device cuda_side = d.is_cuda() ? d : device();
  return to(d, current_stream(cuda_side));
}

namespace {
// Orders `stream` after the work queued so far on `producer` (when they differ), on any devices.
void wait_for(const Stream& producer, const Stream& stream) {
  if (producer == stream) return;
  Event done;
  done.record(producer);
  stream.wait(done);
}

// Copies the bytes of contiguous `src` into contiguous `dst` (same dtype and size) across devices.
void copy_bytes_across(const Tensor& src, const Tensor& dst, const Stream& stream) {
  size_t n = src.nbytes();
  if (n == 0) return;
  Device sd = src.device(), dd = dst.device();
  // A copy from pageable host memory reads it on the host before returning (CUDA stages it), so only the
  // device side is stream-ordered; pinned memory is read by the stream, later.
  const bool staged = sd.is_cpu() && !src.storage().pinned();
  if (staged)
    check_not_capturing(stream, "a copy from pageable host memory to " + dd.str(),
                        "copy inputs into device tensors made before the capture (from pinned memory) before "
                        "replay(), and make constants on the device");
  if (sd.is_cuda() && dd.is_cpu())
    check_not_capturing(stream,
                        "a copy from " + sd.str() +
                            " to the host (Tensor::item, to(Device::cpu()), "
                            "printing a tensor)",
                        "copy results into device tensors made before the capture and read them after replay()");
  if (staged) note_pageable_copy(dd, n);
  if (stream_check::enabled()) {
    if (staged) {
      stream_check::on_op("copy to the device (staged from pageable memory)", Stream(), {stream_check::reads(src)});
      stream_check::on_op("copy to the device", stream, {stream_check::writes(dst)});
    } else {
      stream_check::on_op("copy across devices", stream, {stream_check::reads(src), stream_check::writes(dst)});
    }
  }
  if (sd.is_cpu() && dd.is_cuda()) {
    TD_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), n, cudaMemcpyHostToDevice, stream.cuda()));
    dst.storage().record_stream(stream);
    if (!staged) src.storage().record_stream(stream);
  } else if (sd.is_cuda() && dd.is_cpu()) {
    src.storage().record_stream(stream);
    TD_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), n, cudaMemcpyDeviceToHost, stream.cuda()));
    stream.synchronize();
    raise_device_errors(sd);
  } else {
    src.storage().record_stream(stream);
    dst.storage().record_stream(stream);
    TD_CUDA_CHECK(cudaMemcpyPeerAsync(dst.raw_data(), dd.index, src.raw_data(), sd.index, n, stream.cuda()));
  }
}
}  // namespace

Tensor Tensor::to(Device d, const Stream& stream) const {
  if (d == device()) return *this;
  check_device_available(d);
  TD_CHECK_DEVICE(stream.device().is_cuda(), "a copy between ", device(), " and ", d, " needs a CUDA stream, got ",
                  stream.device());
  // A dense tensor travels as its bytes and keeps its layout; others are made contiguous first.
  Tensor src = is_dense(*this) ? *this : contiguous();
  Tensor out;
  {
    StreamGuard sg(stream);
    out = empty_like(src, TensorOptions(dtype()).with_device(d));
  }
  // The source is ready on its device's current stream, and a destination allocated on another stream than
  // the copy's is usable in that stream's order: the copy waits for both (across devices too).
  if (src.device().is_cuda()) wait_for(current_stream(src.device()), stream);
  if (d.is_cuda() && d != stream.device()) wait_for(current_stream(d), stream);
  copy_bytes_across(src, out, stream);
  Device from = device();
  autograd::record("to_device", {*this}, {out}, [from](std::vector<Tensor>& g, const std::vector<bool>&) {
    return std::vector<Tensor>{g[0].to(from)};
  });
  return out;
}

Tensor& Tensor::copy_(const Tensor& src) {
  TD_DEFINED();
  TD_CHECK(src.defined(), "copy_ from an undefined tensor");
  autograd::check_inplace(*this, "copy_");
  if (numel() == 0) return *this;
  Tensor s = src;
  if (s.device() != device()) {
    autograd::NoGradGuard ng;
    s = s.to(device());
  }
  if (s.shape() == shape() && is_dense(s) && is_dense(*this) && !same_layout(s, *this)) count_layout_conversion();
  StridedDesc sd = broadcast_desc(s, shape());
  backend_of(*this).copy({s.dtype(), s.raw_data(), sd, dtype(), raw_data(), desc_of(*this)}, current_stream(device()));
  storage().bump_version();
  return *this;
}

Tensor& Tensor::set_storage_(Storage storage, int64_t offset) {
  TD_DEFINED();
  if (storage.data() != nullptr) {
    TD_CHECK_DEVICE(storage.device() == device() || impl_->storage.data() == nullptr, "set_storage_: storage on ",
                    storage.device(), ", tensor on ", device());
    int64_t last = offset;  // the furthest element the geometry reaches
    for (size_t d = 0; d < impl_->shape.size(); ++d)
      if (impl_->shape[d] > 0) last += (impl_->shape[d] - 1) * impl_->strides[d];
    const int64_t need = numel() == 0 ? 0 : (last + 1) * static_cast<int64_t>(dtype_size(dtype()));
    TD_CHECK(offset >= 0 && need <= static_cast<int64_t>(storage.nbytes()), "set_storage_: a tensor of shape ",
             shape_str(shape()), " from element ", offset, " needs ", need, " bytes; the storage has ",
             storage.nbytes());
  }
  impl_->storage = std::move(storage);
  impl_->offset = offset;
  return *this;
}

Tensor& Tensor::fill_(double value) {
  TD_DEFINED();
  autograd::check_inplace(*this, "fill_");
  if (numel() == 0) return *this;
  backend_of(*this).fill({dtype(), raw_data(), desc_of(*this), value}, current_stream(device()));
  storage().bump_version();
  return *this;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  autograd::NoGradGuard ng;
  Tensor h = to(Device::cpu()).to(dtype_of<T>::value).contiguous();
  std::vector<T> out(static_cast<size_t>(h.numel()));
  if (!out.empty()) std::memcpy(out.data(), h.raw_data(), out.size() * sizeof(T));
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

template <typename T>
T Tensor::item() const {
  TD_CHECK_SHAPE(numel() == 1, "item() needs exactly one element, the tensor has shape ", shape_str(shape()));
  return to_vector<T>()[0];
}
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int32_t Tensor::item<int32_t>() const;
template int64_t Tensor::item<int64_t>() const;
template uint8_t Tensor::item<uint8_t>() const;

std::string Tensor::str(int64_t max_elements) const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype()) << ", device=" << device();
  if (requires_grad()) os << ", requires_grad";
  os << ")\n";
  std::vector<double> v = to_vector<double>();
  int64_t n = static_cast<int64_t>(v.size());
  int64_t last = dim() == 0 ? 1 : shape().back();
  os << std::setprecision(6);
  for (int64_t i = 0; i < n && i < max_elements; ++i) {
    os << (i % std::max<int64_t>(last, 1) == 0 ? (i ? "\n  " : "  ") : " ") << v[i];
  }
  if (n > max_elements) os << " ... (" << n - max_elements << " more)";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

// ---- autograd accessors ----

bool Tensor::requires_grad() const {
  TD_DEFINED();
  return impl_->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool on) {
  TD_DEFINED();
  TD_CHECK_T(AutogradError, impl_->grad_fn == nullptr,
             "set_requires_grad is for leaf tensors; this tensor was computed by ", "an op (use detach() first)");
  if (on) check_float_or_bf16(*this, "requires_grad");
  impl_->requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const {
  TD_DEFINED();
  return impl_->grad_fn == nullptr;
}
const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  TD_DEFINED();
  return impl_->grad_fn;
}
Tensor Tensor::grad() const {
  TD_DEFINED();
  return Tensor(impl_->grad);
}

void Tensor::set_grad(const Tensor& g) {
  TD_DEFINED();
  if (g.defined()) {
    TD_CHECK_SHAPE(g.shape() == shape(), "set_grad: gradient shape ", shape_str(g.shape()), " differs from ",
                   shape_str(shape()));
    TD_CHECK_DEVICE(g.device() == device(), "set_grad: gradient on ", g.device(), ", tensor on ", device());
  }
  impl_->grad = g.impl_ptr();
}

void Tensor::zero_grad() {
  TD_DEFINED();
  impl_->grad.reset();
}

void Tensor::set_grad_fn(std::shared_ptr<autograd::Node> fn, int output_nr) {
  TD_DEFINED();
  impl_->grad_fn = std::move(fn);
  impl_->output_nr = output_nr;
  impl_->requires_grad = true;
}

int Tensor::output_nr() const {
  TD_DEFINED();
  return impl_->output_nr;
}

std::shared_ptr<autograd::Node> Tensor::grad_accumulator() const {
  TD_DEFINED();
  return impl_->grad_accumulator.lock();
}

void Tensor::set_grad_accumulator(const std::shared_ptr<autograd::Node>& node) {
  TD_DEFINED();
  impl_->grad_accumulator = node;
}

Tensor Tensor::detach() const { return make_view(*this, shape(), strides(), storage_offset()); }

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  TD_DEFINED();
  autograd::backward({*this}, {gradient}, retain_graph);
}

}  // namespace tandem
