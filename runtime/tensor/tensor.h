// Tensor: a strided view of a Storage (shape, strides, dtype, device) with autograd metadata.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/base/device.h"
#include "runtime/base/dtype.h"
#include "runtime/memory/storage.h"
#include "runtime/memory/stream.h"

namespace tandem {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[2, 3]"
int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& s);
int64_t wrap_dim(int64_t dim, int64_t ndim);  // negative dims count from the end; throws IndexError

namespace autograd {
class Node;
}

struct TensorOptions {
  DType dtype = DType::F32;
  std::optional<Device> device;  // unset: current_device()
  bool requires_grad = false;
  bool pinned = false;  // page-locked host memory (CPU tensors, when a GPU is present)

  TensorOptions() = default;
  TensorOptions(DType d) : dtype(d) {}    // NOLINT: implicit on purpose, empty({2}, DType::F64)
  TensorOptions(Device d) : device(d) {}  // NOLINT: implicit on purpose, zeros({2}, Device::cuda())
  TensorOptions with_dtype(DType d) const {
    auto o = *this;
    o.dtype = d;
    return o;
  }
  TensorOptions with_device(Device d) const {
    auto o = *this;
    o.device = d;
    return o;
  }
  TensorOptions with_requires_grad(bool r = true) const {
    auto o = *this;
    o.requires_grad = r;
    return o;
  }
  TensorOptions with_pinned(bool p = true) const {
    auto o = *this;
    o.pinned = p;
    return o;
  }
  Device resolved_device() const;
};

class Tensor;

// The state one or more Tensor handles share. Only Tensor reads and writes it: everything else goes through
// Tensor's operations.
class TensorImpl {
 public:
  TensorImpl(Storage storage, int64_t offset, Shape shape, Shape strides, DType dtype)
      : storage(std::move(storage)),
        offset(offset),
        shape(std::move(shape)),
        strides(std::move(strides)),
        dtype(dtype) {}

 private:
  friend class Tensor;
  Storage storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;  // in elements
  DType dtype = DType::F32;
  // Autograd.
  bool requires_grad = false;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  int output_nr = 0;                        // which output of grad_fn this is
  std::weak_ptr<autograd::Node> grad_accumulator;
  std::shared_ptr<TensorImpl> grad;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

  // Metadata.
  const Shape& shape() const;
  int64_t size(int64_t dim) const;
  int64_t dim() const;
  int64_t numel() const;
  const Shape& strides() const;
  int64_t stride(int64_t dim) const;
  int64_t storage_offset() const;
  DType dtype() const;
  Device device() const;
  // Its dtype and device, for tensors made like it: empty(shape, x.options()), x.options().with_dtype(DType::U8).
  TensorOptions options() const { return TensorOptions(dtype()).with_device(device()); }
  bool is_contiguous() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  const Storage& storage() const;
  void* raw_data() const;  // address of the element at index 0
  template <typename T>
  T* data() const;  // checks that T matches the dtype

  // Views: they share storage (and its version counter) with this tensor.
  Tensor view(const Shape& shape) const;     // one dim may be -1; needs compatible strides
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a contiguous copy
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose of a 2-D tensor
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor expand(const Shape& shape) const;  // broadcast view (stride 0)

  // Copies and conversions.
  Tensor contiguous() const;  // row-major (this tensor itself when already so)
  Tensor clone() const;       // in this tensor's layout when it is dense (empty_like), else contiguous
  // A copy in page-locked host memory (this tensor itself when it is already one; a CPU tensor only), which
  // GPUs copy from and to without stalling the host thread.
  Tensor pinned() const;
  // A copy on `device` (this tensor itself when already there), in this tensor's layout when it is dense, else
  // contiguous. CUDA copies are queued on `stream` (default: the current stream of the CUDA side, the
  // destination's between two GPUs) after the work queued so far on the source device's current stream, and
  // synchronized when the destination is the CPU.
  Tensor to(Device device) const;
  Tensor to(Device device, const Stream& stream) const;
  Tensor to(DType dtype) const;      // this tensor itself when already of that dtype; the layout is kept
  Tensor& copy_(const Tensor& src);  // any device or dtype; src broadcast to this shape
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  // Points this tensor, and every handle sharing it, at `storage` from element `offset` (shape, strides and
  // dtype unchanged; views made earlier keep what they had): parameters living in one flat buffer. The
  // storage must be on this tensor's device and hold its elements. An empty Storage drops the memory; the
  // tensor then has no data until it is pointed at some again.
  Tensor& set_storage_(Storage storage, int64_t offset = 0);
  // Host copies of the elements in row-major order, converted to T.
  template <typename T>
  std::vector<T> to_vector() const;
  template <typename T>
  T item() const;  // the single element
  std::string str(int64_t max_elements = 64) const;

  // Autograd.
  bool requires_grad() const;
  Tensor& set_requires_grad(bool on = true);  // leaves only
  bool is_leaf() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  Tensor grad() const;  // accumulated gradient of a leaf (undefined before the first backward)
  void set_grad(const Tensor& g);
  void zero_grad();  // drops the gradient
  // Autograd's bookkeeping (runtime/tensor/autograd.cc): makes this tensor output `output_nr` of `fn` (and so
  // requiring grad), and the node that accumulates a leaf's gradient (held weakly: the graph owns it).
  void set_grad_fn(std::shared_ptr<autograd::Node> fn, int output_nr);
  int output_nr() const;
  std::shared_ptr<autograd::Node> grad_accumulator() const;
  void set_grad_accumulator(const std::shared_ptr<autograd::Node>& node);
  Tensor detach() const;  // same storage, no autograd history
  // Backpropagates from this tensor: a scalar, or with `gradient` of the same shape.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  uint64_t version() const { return storage().version(); }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Factories. Device defaults to current_device().
Tensor empty(const Shape& shape, TensorOptions opts = {});
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
// *_like: t's shape, dtype and device, and t's strides when t is dense (is_dense in layout.h: a channels-last
// tensor makes channels-last ones, as PyTorch's preserve_format), else contiguous.
Tensor empty_like(const Tensor& t);
Tensor empty_like(const Tensor& t, TensorOptions opts);  // with opts' dtype and device
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor arange(int64_t n, TensorOptions opts = {});  // 0 .. n-1
Tensor scalar_tensor(double value, TensorOptions opts = {});
// A tensor holding `values` (row-major) with the dtype of T, on `device`.
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, std::optional<Device> device = std::nullopt);

}  // namespace tandem
