#pragma once
// Value: what travels along a dataflow edge. A Tensor (stored inline, no allocation) or any
// other movable C++ value (held once, shared by every consumer, read-only like a tensor's bytes).
//
//   Value a = Tensor::ones({2});              // a.tensor()
//   Value b = std::string("tokens");          // b.get<std::string>()
//   Value c = std::make_unique<Request>(...); // move-only values too: c.get<std::unique_ptr<Request>>()
//   if (b.is<std::string>()) ...
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>

#include "devices/error.h"
#include "devices/tensor.h"

namespace troupe {

std::string demangled_type_name(const std::type_info& type);

class Value {
 public:
  Value() = default;  // empty: has_value() is false
  Value(Tensor tensor) : tensor_(std::move(tensor)), type_(&typeid(Tensor)) {}
  template <class T>
    requires(!std::is_same_v<std::decay_t<T>, Value> && !std::is_same_v<std::decay_t<T>, Tensor>)
  Value(T&& value)
      : other_(std::make_shared<const std::decay_t<T>>(std::forward<T>(value))), type_(&typeid(std::decay_t<T>)) {}

  bool has_value() const { return type_ != nullptr; }
  bool is_tensor() const { return is<Tensor>(); }
  template <class T>
  bool is() const {
    return type_ && (type_ == &typeid(T) || *type_ == typeid(T));
  }
  // The tensor; ValueError naming the held type otherwise.
  const Tensor& tensor() const {
    if (!is_tensor()) wrong_type(typeid(Tensor));
    return tensor_;
  }
  // The held T; ValueError naming both types otherwise.
  template <class T>
  const T& get() const {
    if constexpr (std::is_same_v<T, Tensor>) {
      return tensor();
    } else {
      if (!is<T>()) wrong_type(typeid(T));
      return *static_cast<const T*>(other_.get());
    }
  }
  // The tensor's meta, or none for other values.
  std::optional<TensorMeta> meta() const {
    if (is_tensor() && tensor_.defined()) return tensor_.meta();
    return std::nullopt;
  }
  std::string type_name() const { return type_ ? demangled_type_name(*type_) : "empty"; }

 private:
  [[noreturn]] void wrong_type(const std::type_info& wanted) const {
    throw ValueError("Value: expected " + demangled_type_name(wanted) + ", holds " + type_name());
  }
  Tensor tensor_;
  std::shared_ptr<const void> other_;
  const std::type_info* type_ = nullptr;
};

}  // namespace troupe
