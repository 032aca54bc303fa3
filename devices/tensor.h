#pragma once
// Tensor: a typed, strided view of shared Storage on one Device.
//
// Value semantics. Copying a Tensor or taking a view (slice, select, reshape, transpose,
// permute, expand, squeeze, unsqueeze) shares the bytes and copies nothing. Writing goes
// through mutable_data(), which first makes this tensor the sole, contiguous owner of its
// bytes (copy-on-write). So a tensor that was sent in a message, forked into a task, or kept
// by anyone else never changes under them: the actor model's promise, by construction.
//
//   Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
//   Tensor row = a.select(0, 1);          // f32[3], shares a's bytes
//   Tensor b = a;                         // shares too
//   b.mutable_data<float>()[0] = 10;      // b copies first; a still reads 1
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "devices/device.h"
#include "devices/dtype.h"
#include "devices/error.h"
#include "devices/shape.h"
#include "devices/storage.h"
#include "devices/sync.h"

namespace troupe {

struct AutogradMeta;
namespace detail {
struct TapeAccess;
}

// What shape inference and validation see of a tensor: no bytes.
struct TensorMeta {
  DType dtype = DType::f32;
  Shape shape;
  Device device;
  std::string str() const;  // "f32[2,3]" (device added when not cpu)
  friend bool operator==(const TensorMeta&, const TensorMeta&) = default;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false
  Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape, Strides strides, int64_t offset);

  // Factories. Uninitialised memory for empty(); the others fill.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor arange(int64_t n, DType dtype = DType::f32);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  template <class T>
  static Tensor scalar(T value) { return from_vector<T>({value}, {}); }

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const;
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int64_t offset() const { return offset_; }  // in elements, into the storage
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return troupe::numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * itemsize(dtype_); }
  bool is_contiguous() const;
  TensorMeta meta() const { return {dtype_, shape_, device()}; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool shares_storage_with(const Tensor& other) const { return storage_ && storage_ == other.storage_; }

  // Read access: pointer to the first element (respect strides unless is_contiguous()).
  // DTypeError when T does not match dtype(); DeviceError on a device tensor (host code only).
  template <class T>
  const T* data() const {
    check_access(dtype_of<T>(), "data");
    return static_cast<const T*>(raw_data());
  }
  // The first element's address on the tensor's own device: for kernels of that device.
  const void* raw_data() const;
  // Write access: makes this tensor the unique, contiguous owner of its bytes first (copy-on-write);
  // DeviceError on a device tensor, as data(). mutable_raw_data() is the device-agnostic form for kernels.
  template <class T>
  T* mutable_data() {
    check_access(dtype_of<T>(), "mutable_data");
    return static_cast<T*>(mutable_raw_data());
  }
  void* mutable_raw_data();

  // Views: no copies.
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;  // ends clamp like Python
  Tensor select(int64_t dim, int64_t index) const;                                 // drops dim
  Tensor view(const Shape& shape) const;     // ShapeError when the strides cannot express it
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a contiguous copy; one -1 allowed
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor expand(const Shape& shape) const;  // size-1 dims repeat with stride 0; -1 keeps a size
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten() const { return reshape({numel()}); }

  // Copies.
  Tensor contiguous() const;  // itself when already contiguous
  Tensor clone() const;       // always fresh bytes
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;

  // Host values: item() needs exactly one element; to_vector() returns every element in order.
  template <class T>
  T item() const;
  template <class T>
  std::vector<T> to_vector() const;

  std::string str() const;  // meta and, for small tensors, values

  // Autograd: devices/autograd/autograd.h explains the rules, with an example.
  bool requires_grad() const { return autograd_ != nullptr; }  // a leaf asked for, or an op's output on the tape
  Tensor& set_requires_grad(bool enabled = true);  // leaves only; floating dtypes only
  bool is_leaf() const;
  Tensor grad() const;                 // accumulated by backward(); undefined when none
  void set_grad(const Tensor& grad);   // undefined: none (zero_grad); ValueError unless requires_grad()
  // Fills grad() of the leaves this tensor depends on. gradient: d(something)/d(this), implied 1 for
  // a one-element tensor. The graph's saved tensors are freed unless retain_graph.
  void backward() const { backward(Tensor(), false); }
  void backward(const Tensor& gradient, bool retain_graph = false) const;
  Tensor detach() const;               // the same bytes, off the tape
  uint64_t version() const;            // writes through mutable_data() since requires_grad was set
  const std::shared_ptr<AutogradMeta>& autograd_meta() const { return autograd_; }

 private:
  friend struct detail::TapeAccess;  // the tape (devices/autograd/tape.cpp) attaches and drops metas

  void check_access(DType requested, const char* what) const;
  void make_unique_contiguous();
  bool on_tape() const;  // a view method of this tensor must be recorded

  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::f32;
  Shape shape_;
  Strides strides_;
  int64_t offset_ = 0;
  std::shared_ptr<AutogradMeta> autograd_;  // shared by copies of this handle; null: not on the tape
};

// The tensor as contiguous host bytes, for code that sends or writes them: itself when it already
// is; a view's elements gathered; a device tensor copied into pinned host memory on the calling
// thread's stream (its lane's), after the lane work that wrote it, with one counted host wait.
Tensor host_contiguous(const Tensor& t);

// Every element of src (any strides, any device cpu) converted into dst's dtype, in
// row-major order, into the contiguous host buffer dst_data. The one strided copy loop.
void copy_elements(const Tensor& src, DType dst_dtype, void* dst_data);

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  if (static_cast<int64_t>(values.size()) != troupe::numel(shape))
    throw ShapeError("from_vector: " + std::to_string(values.size()) + " values do not fill shape " +
                     to_string(shape));
  Tensor t = empty(shape, dtype_of<T>());
  T* out = t.mutable_data<T>();
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return t;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  if (!defined()) throw ValueError("to_vector: the tensor is undefined");
  Tensor host = device().is_cpu() ? *this : to(Device::cpu());
  std::vector<T> out(static_cast<size_t>(host.numel()));
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(out.size());
    copy_elements(host, DType::boolean, bytes.data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = bytes[i] != 0;
  } else {
    copy_elements(host, dtype_of<T>(), out.data());
  }
  return out;
}

template <class T>
T Tensor::item() const {
  if (numel() != 1)
    throw ShapeError("item: expected a tensor with one element, got " + meta().str());
  SyncAttribution::OpScope attributed(SyncAttribution::current_op().empty() ? "item" : SyncAttribution::current_op());
  return to_vector<T>()[0];
}

}  // namespace troupe
