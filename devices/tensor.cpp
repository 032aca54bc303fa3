#include "devices/tensor.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "devices/autograd/grad_mode.h"
#include "devices/autograd/node.h"
#include "devices/autograd/tape.h"
#include "devices/backend.h"
#include "devices/lane.h"
#include "devices/sync.h"

namespace troupe {

std::string TensorMeta::str() const {
  std::string s = std::string(name(dtype)) + to_string(shape);
  if (!device.is_cpu()) s += "@" + device.str();
  return s;
}

Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape, Strides strides, int64_t offset)
    : storage_(std::move(storage)), dtype_(dtype), shape_(std::move(shape)), strides_(std::move(strides)),
      offset_(offset) {
  if (shape_.size() != strides_.size())
    throw ShapeError("Tensor: shape " + to_string(shape_) + " and strides " + to_string(strides_) +
                     " differ in rank");
  for (int64_t d : shape_)
    if (d < 0) throw ShapeError("Tensor: negative size in shape " + to_string(shape_));
  if (storage_ && numel() > 0) {  // every addressed element must lie inside the storage
    int64_t lo = offset_, hi = offset_;
    for (size_t i = 0; i < shape_.size(); ++i) {
      const int64_t reach = (shape_[i] - 1) * strides_[i];
      (reach < 0 ? lo : hi) += reach;
    }
    if (lo < 0 || static_cast<size_t>(hi + 1) * itemsize(dtype_) > storage_->nbytes())
      throw ShapeError("Tensor: view " + std::string(name(dtype_)) + to_string(shape_) + " with strides " +
                       to_string(strides_) + " at offset " + std::to_string(offset_) + " exceeds its storage of " +
                       std::to_string(storage_->nbytes()) + " bytes");
  }
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape)
    if (d < 0) throw ShapeError("empty: negative size in shape " + to_string(shape));
  auto storage = std::make_shared<Storage>(static_cast<size_t>(troupe::numel(shape)) * itemsize(dtype), device);
  return Tensor(std::move(storage), dtype, shape, contiguous_strides(shape), 0);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor host = empty(shape, dtype);
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = convert<T>(value);
    T* p = static_cast<T*>(host.storage_->data());
    std::fill(p, p + host.numel(), v);
  });
  return device.is_cpu() ? host : host.to(device);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

Tensor Tensor::arange(int64_t n, DType dtype) {
  Tensor t = empty({n}, dtype);
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(t.storage_->data());
    for (int64_t i = 0; i < n; ++i) p[i] = convert<T>(i);
  });
  return t;
}

Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

int64_t Tensor::size(int64_t d) const { return shape_[wrap_dim("size", d, dim())]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void Tensor::check_access(DType requested, const char* what) const {
  if (!defined()) throw ValueError(std::string(what) + ": the tensor is undefined");
  if (!device().is_cpu()) {
    const std::string_view op = SyncAttribution::current_op();
    throw DeviceError((op.empty() ? std::string() : std::string(op) + ": ") + what + "<" + name(requested) +
                      ">() of a " + meta().str() + " tensor: host code cannot touch " + device().str() +
                      " memory (move it with .to(Device::cpu()), or run a " + device().str() + " kernel)");
  }
  if (requested != dtype_)
    throw DTypeError(std::string(what) + ": asked for " + name(requested) + " elements of a " + meta().str() +
                     " tensor");
}

const void* Tensor::raw_data() const {
  if (!defined()) throw ValueError("data: the tensor is undefined");
  return static_cast<const char*>(storage_->data()) + offset_ * static_cast<int64_t>(itemsize(dtype_));
}

void Tensor::make_unique_contiguous() {
  // use_count() == 1 means no other handle (in this or any thread) can see these bytes.
  if (storage_.use_count() == 1 && is_contiguous()) return;
  std::shared_ptr<AutogradMeta> meta = std::move(autograd_);  // the handle keeps its place on the tape
  *this = detach().clone();
  autograd_ = std::move(meta);
}

void* Tensor::mutable_raw_data() {
  if (!defined()) throw ValueError("mutable_data: the tensor is undefined");
  make_unique_contiguous();
  storage_->bump_version();  // before the caller writes: caches of these bytes go stale
  if (autograd_) ++autograd_->version;  // backward refuses tensors it saved at an older version
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(itemsize(dtype_));
}

bool Tensor::on_tape() const { return autograd_ && grad_enabled(); }

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  if (on_tape())
    return record_method("slice", *this, {{"dim", d}, {"start", start}, {"end", end}, {"step", step}},
                         [&](const Tensor& x) { return x.slice(d, start, end, step); });
  d = wrap_dim("slice", d, dim());
  if (dim() == 0) throw ShapeError("slice: cannot slice a 0-d tensor " + meta().str());
  if (step <= 0) throw ValueError("slice: step must be positive, got " + std::to_string(step));
  const int64_t n = shape_[d];
  auto clamp = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  start = clamp(start);
  end = std::max(clamp(end), start);
  Shape shape = shape_;
  Strides strides = strides_;
  shape[d] = (end - start + step - 1) / step;
  strides[d] *= step;
  return Tensor(storage_, dtype_, shape, strides, offset_ + start * strides_[d]);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  if (on_tape())
    return record_method("select", *this, {{"dim", d}, {"index", index}},
                         [&](const Tensor& x) { return x.select(d, index); });
  if (dim() == 0) throw ShapeError("select: cannot select from a 0-d tensor " + meta().str());
  d = wrap_dim("select", d, dim());
  const int64_t n = shape_[d];
  if (index < -n || index >= n)
    throw IndexError("select: index " + std::to_string(index) + " out of range for dim " + std::to_string(d) +
                     " of size " + std::to_string(n) + " in " + meta().str());
  if (index < 0) index += n;
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return Tensor(storage_, dtype_, shape, strides, offset_ + index * strides_[d]);
}

namespace {

Shape infer_reshape(const char* op, const Shape& from, Shape to) {
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < to.size(); ++i) {
    if (to[i] == -1) {
      if (infer_at >= 0) throw ShapeError(std::string(op) + ": more than one -1 in " + to_string(to));
      infer_at = static_cast<int64_t>(i);
    } else if (to[i] < 0) {
      throw ShapeError(std::string(op) + ": invalid size in " + to_string(to));
    } else {
      known *= to[i];
    }
  }
  const int64_t n = numel(from);
  if (infer_at >= 0) {
    if (known == 0 || n % known != 0)
      throw ShapeError(std::string(op) + ": cannot reshape " + to_string(from) + " into " + to_string(to));
    to[infer_at] = n / known;
  }
  if (numel(to) != n)
    throw ShapeError(std::string(op) + ": cannot reshape " + to_string(from) + " (" + std::to_string(n) +
                     " elements) into " + to_string(to));
  return to;
}

// Strides that express `to` over the same elements as (from, strides); false when none do.
// Walks `from` from the innermost dim, cutting it into chunks whose dims are contiguous among
// themselves; each chunk must be covered exactly by consecutive dims of `to`.
bool view_strides(const Shape& from, const Strides& strides, const Shape& to, Strides& out) {
  out.assign(to.size(), 1);
  if (numel(from) == 0 || from.empty()) {
    out = contiguous_strides(to);
    return true;
  }
  int64_t to_d = static_cast<int64_t>(to.size()) - 1;
  int64_t chunk_stride = strides.back(), chunk_from = 1, chunk_to = 1;
  for (int64_t d = static_cast<int64_t>(from.size()) - 1; d >= 0; --d) {
    chunk_from *= from[d];
    const bool chunk_ends = d == 0 || (from[d - 1] != 1 && strides[d - 1] != chunk_from * chunk_stride);
    if (!chunk_ends) continue;
    while (to_d >= 0 && (chunk_to < chunk_from || to[to_d] == 1)) {
      out[to_d] = chunk_to * chunk_stride;
      chunk_to *= to[to_d--];
    }
    if (chunk_to != chunk_from) return false;
    if (d > 0) {
      chunk_stride = strides[d - 1];
      chunk_from = chunk_to = 1;
    }
  }
  return to_d == -1;
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  if (on_tape()) return record_method("reshape", *this, {}, [&](const Tensor& x) { return x.view(shape); });
  Shape target = infer_reshape("view", shape_, shape);
  Strides strides;
  if (!view_strides(shape_, strides_, target, strides))
    throw ShapeError("view: a " + meta().str() + " tensor with strides " + to_string(strides_) +
                     " cannot be viewed as " + to_string(target) + " without a copy (use reshape)");
  return Tensor(storage_, dtype_, target, strides, offset_);
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (on_tape()) return record_method("reshape", *this, {}, [&](const Tensor& x) { return x.reshape(shape); });
  Shape target = infer_reshape("reshape", shape_, shape);
  Strides strides;
  if (view_strides(shape_, strides_, target, strides)) return Tensor(storage_, dtype_, target, strides, offset_);
  Tensor c = contiguous();
  return Tensor(c.storage_, dtype_, target, contiguous_strides(target), c.offset_);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (on_tape())
    return record_method("transpose", *this, {{"dim0", d0}, {"dim1", d1}},
                         [&](const Tensor& x) { return x.transpose(d0, d1); });
  if (dim() == 0) return *this;
  d0 = wrap_dim("transpose", d0, dim());
  d1 = wrap_dim("transpose", d1, dim());
  Shape shape = shape_;
  Strides strides = strides_;
  std::swap(shape[d0], shape[d1]);
  std::swap(strides[d0], strides[d1]);
  return Tensor(storage_, dtype_, shape, strides, offset_);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  if (on_tape())
    return record_method("permute", *this, {{"dims", dims}}, [&](const Tensor& x) { return x.permute(dims); });
  if (static_cast<int64_t>(dims.size()) != dim())
    throw ShapeError("permute: " + std::to_string(dims.size()) + " dims given for a tensor of rank " +
                     std::to_string(dim()) + " (" + meta().str() + ")");
  Shape shape(dims.size());
  Strides strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim("permute", dims[i], dim());
    if (seen[d]) throw ShapeError("permute: dim " + std::to_string(d) + " repeated in " + to_string(dims));
    seen[d] = true;
    shape[i] = shape_[d];
    strides[i] = strides_[d];
  }
  return Tensor(storage_, dtype_, shape, strides, offset_);
}

Tensor Tensor::expand(const Shape& shape) const {
  if (on_tape()) return record_method("expand", *this, {}, [&](const Tensor& x) { return x.expand(shape); });
  if (shape.size() < shape_.size())
    throw ShapeError("expand: cannot expand " + meta().str() + " to fewer dims " + to_string(shape));
  const size_t lead = shape.size() - shape_.size();
  Shape out(shape.size());
  Strides strides(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      if (shape[i] < 0) throw ShapeError("expand: -1 not allowed for new leading dims in " + to_string(shape));
      out[i] = shape[i];
      continue;
    }
    const int64_t have = shape_[i - lead];
    const int64_t want = shape[i] == -1 ? have : shape[i];
    if (have == want) {
      out[i] = have;
      strides[i] = strides_[i - lead];
    } else if (have == 1) {
      out[i] = want;
    } else {
      throw ShapeError("expand: cannot expand " + meta().str() + " to " + to_string(shape) + " (dim " +
                       std::to_string(i) + " is " + std::to_string(have) + ", not 1)");
    }
  }
  return Tensor(storage_, dtype_, out, strides, offset_);
}

Tensor Tensor::squeeze() const {
  if (on_tape()) return record_method("reshape", *this, {}, [&](const Tensor& x) { return x.squeeze(); });
  Shape shape;
  Strides strides;
  for (size_t i = 0; i < shape_.size(); ++i)
    if (shape_[i] != 1) {
      shape.push_back(shape_[i]);
      strides.push_back(strides_[i]);
    }
  return Tensor(storage_, dtype_, shape, strides, offset_);
}

Tensor Tensor::squeeze(int64_t d) const {
  if (on_tape()) return record_method("reshape", *this, {}, [&](const Tensor& x) { return x.squeeze(d); });
  if (dim() == 0) return *this;
  d = wrap_dim("squeeze", d, dim());
  if (shape_[d] != 1) return *this;  // PyTorch: squeezing a dim that is not 1 is a no-op
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return Tensor(storage_, dtype_, shape, strides, offset_);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  if (on_tape()) return record_method("reshape", *this, {}, [&](const Tensor& x) { return x.unsqueeze(d); });
  d = wrap_dim("unsqueeze", d, dim() + 1);
  Shape shape = shape_;
  Strides strides = strides_;
  const int64_t stride = d < dim() ? strides_[d] * shape_[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return Tensor(storage_, dtype_, shape, strides, offset_);
}

void copy_elements(const Tensor& src, DType dst_dtype, void* dst_data) {
  if (!src.device().is_cpu())
    throw DeviceError("copy_elements: expects a cpu tensor, got " + src.meta().str());
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src.is_contiguous() && src.dtype() == dst_dtype) {
    std::memcpy(dst_data, src.raw_data(), src.nbytes());
    return;
  }
  dispatch(src.dtype(), [&](auto stag) {
    using S = typename decltype(stag)::type;
    dispatch(dst_dtype, [&](auto dtag) {
      using D = typename decltype(dtag)::type;
      const S* in = static_cast<const S*>(src.raw_data());
      D* out = static_cast<D*>(dst_data);
      if (src.is_contiguous()) {
        for (int64_t i = 0; i < n; ++i) out[i] = convert<D>(in[i]);
        return;
      }
      // Odometer over all dims but the last; the innermost loop runs with a fixed stride.
      const auto& shape = src.shape();
      const auto& strides = src.strides();
      const int64_t rank = src.dim();
      const int64_t inner = shape[rank - 1], inner_stride = strides[rank - 1];
      std::vector<int64_t> index(rank, 0);
      int64_t base = 0;
      for (int64_t written = 0; written < n; written += inner) {
        const S* row = in + base;
        for (int64_t j = 0; j < inner; ++j) out[written + j] = convert<D>(row[j * inner_stride]);
        for (int64_t d = rank - 2; d >= 0; --d) {
          base += strides[d];
          if (++index[d] < shape[d]) break;
          base -= strides[d] * shape[d];
          index[d] = 0;
        }
      }
    });
  });
}

namespace {

// Fresh contiguous tensor of dtype on src's device holding src's elements.
Tensor materialize(const Tensor& src, DType dtype) {
  Tensor out = Tensor::empty(src.shape(), dtype, src.device());
  if (src.device().is_cpu()) {
    copy_elements(src, dtype, out.storage()->data());
    return out;
  }
  if (backend(src.device().type).copy_elements(src, out)) return out;
  return materialize(src.to(Device::cpu()), dtype).to(src.device());  // no device kernel: via the host
}

}  // namespace

Tensor Tensor::contiguous() const {
  if (!defined()) throw ValueError("contiguous: the tensor is undefined");
  if (on_tape() && !is_contiguous())
    return record_method("contiguous", *this, {}, [](const Tensor& x) { return x.contiguous(); });
  return is_contiguous() ? *this : materialize(*this, dtype_);
}

Tensor Tensor::clone() const {
  if (!defined()) throw ValueError("clone: the tensor is undefined");
  if (on_tape()) return record_method("clone", *this, {}, [](const Tensor& x) { return x.clone(); });
  return materialize(*this, dtype_);
}

Tensor Tensor::to(DType dtype) const {
  if (!defined()) throw ValueError("to: the tensor is undefined");
  if (on_tape() && dtype != dtype_)
    return record_method("cast", *this, {}, [dtype](const Tensor& x) { return x.to(dtype); });
  return dtype == dtype_ ? *this : materialize(*this, dtype);
}

Tensor Tensor::to(Device target) const {
  if (!defined()) throw ValueError("to: the tensor is undefined");
  const Device here = device();
  if (target == here) return *this;
  if (here.is_cuda()) await_ready(*this);  // the copy's stream reads after the lane that wrote these bytes
  if (here.is_cuda() && target.is_cuda())  // between GPUs: through the host, simple and rare
    return to(Device::cpu()).to(target);
  Tensor src = contiguous();
  Tensor out = empty(shape_, dtype_, target);
  DeviceBackend& b = backend(here.is_cuda() ? here.type : target.type);
  b.copy(out.storage()->data(), target, src.raw_data(), here, src.nbytes());
  return out;
}

Tensor host_contiguous(const Tensor& t) {
  if (!t.defined() || t.device().is_cpu()) return t.contiguous();
  await_ready(t);
  return backend(t.device().type).to_host(t.contiguous());
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(" << meta().str();
  if (numel() <= 16) {
    os << " {";
    auto values = to_vector<double>();
    for (size_t i = 0; i < values.size(); ++i) os << (i ? ", " : "") << values[i];
    os << "}";
  }
  os << ")";
  return os.str();
}

}  // namespace troupe
