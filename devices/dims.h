#pragma once
// Dims: the list of int64 a shape or strides is, with room for 6 of them inside the object (as
// PyTorch keeps sizes in a SmallVector): copying a tensor handle, which every op does to its
// inputs and outputs, then allocates nothing. It behaves as std::vector<int64_t> does and converts
// to and from one; past 6 dims it holds them on the heap.
//
//   Dims d{2, 3, 4};
//   d.push_back(5);
//   std::vector<int64_t> v = d;   // a copy
#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace troupe {

class Dims {
 public:
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;
  static constexpr size_t kInline = 6;

  Dims() = default;
  explicit Dims(size_t n, int64_t value = 0) { assign(n, value); }
  Dims(std::initializer_list<int64_t> values) { assign(values.begin(), values.end()); }
  template <class It>
    requires std::input_iterator<It>
  Dims(It first, It last) {
    assign(first, last);
  }
  Dims(const std::vector<int64_t>& values) { assign(values.begin(), values.end()); }  // NOLINT: as a vector
  Dims(const Dims& other) { assign(other.begin(), other.end()); }
  Dims(Dims&& other) noexcept { take(other); }
  Dims& operator=(const Dims& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  Dims& operator=(Dims&& other) noexcept {
    if (this != &other) {
      heap_.reset();
      take(other);
    }
    return *this;
  }
  Dims& operator=(std::initializer_list<int64_t> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  operator std::vector<int64_t>() const { return {begin(), end()}; }  // NOLINT: as a vector

  template <class It>
  void assign(It first, It last) {
    clear();
    if constexpr (std::random_access_iterator<It>) {
      reserve(static_cast<size_t>(last - first));
      int64_t* out = data();
      for (; first != last; ++first) *out++ = static_cast<int64_t>(*first);
      size_ = static_cast<size_t>(out - data());
    } else {
      for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
    }
  }
  void assign(size_t n, int64_t value) {
    clear();
    resize(n, value);
  }

  int64_t* data() { return heap_ ? heap_.get() : inline_; }
  const int64_t* data() const { return heap_ ? heap_.get() : inline_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return heap_ ? capacity_ : kInline; }
  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  const_iterator cbegin() const { return begin(); }
  const_iterator cend() const { return end(); }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }
  int64_t& operator[](size_t i) { return data()[i]; }
  const int64_t& operator[](size_t i) const { return data()[i]; }
  int64_t& at(size_t i) {
    if (i >= size_) throw std::out_of_range("Dims::at: index " + std::to_string(i) + " of " + std::to_string(size_));
    return data()[i];
  }
  const int64_t& at(size_t i) const { return const_cast<Dims*>(this)->at(i); }
  int64_t& front() { return data()[0]; }
  const int64_t& front() const { return data()[0]; }
  int64_t& back() { return data()[size_ - 1]; }
  const int64_t& back() const { return data()[size_ - 1]; }

  void reserve(size_t n) {
    if (n > capacity()) grow(n);
  }
  void clear() { size_ = 0; }
  void push_back(int64_t value) {
    if (size_ == capacity()) grow(std::max<size_t>(2 * size_, kInline + 1));
    data()[size_++] = value;
  }
  int64_t& emplace_back(int64_t value) {
    push_back(value);
    return back();
  }
  void pop_back() { --size_; }
  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) data()[i] = value;
    size_ = n;
  }
  iterator insert(const_iterator at, int64_t value) { return insert(at, size_t{1}, value); }
  iterator insert(const_iterator at, size_t n, int64_t value) {
    const size_t index = static_cast<size_t>(at - begin());
    open(index, n);
    std::fill_n(data() + index, n, value);
    return data() + index;
  }
  template <class It>
    requires std::input_iterator<It>
  iterator insert(const_iterator at, It first, It last) {
    const Dims values(first, last);  // they may be this one's own
    const size_t index = static_cast<size_t>(at - begin());
    open(index, values.size());
    std::copy(values.begin(), values.end(), data() + index);
    return data() + index;
  }
  iterator insert(const_iterator at, std::initializer_list<int64_t> values) {
    return insert(at, values.begin(), values.end());
  }
  iterator erase(const_iterator at) { return erase(at, at + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t index = static_cast<size_t>(first - begin()), n = static_cast<size_t>(last - first);
    std::copy(data() + index + n, end(), data() + index);
    size_ -= n;
    return data() + index;
  }
  void swap(Dims& other) noexcept {
    Dims t(std::move(other));
    other = std::move(*this);
    *this = std::move(t);
  }

  friend bool operator==(const Dims& a, const Dims& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }
  friend std::strong_ordering operator<=>(const Dims& a, const Dims& b) {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const Dims& a, const std::vector<int64_t>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  void grow(size_t n) {
    auto bigger = std::make_unique<int64_t[]>(n);
    std::copy(begin(), end(), bigger.get());
    heap_ = std::move(bigger);
    capacity_ = n;
  }
  // Makes room for n values at index, moving the later ones up.
  void open(size_t index, size_t n) {
    reserve(size_ + n);
    std::copy_backward(data() + index, end(), end() + n);
    size_ += n;
  }
  void take(Dims& other) {
    size_ = other.size_;
    capacity_ = other.capacity_;
    if (other.heap_) {
      heap_ = std::move(other.heap_);
    } else {
      std::copy(other.inline_, other.inline_ + other.size_, inline_);
    }
    other.size_ = 0;
  }

  int64_t inline_[kInline];
  std::unique_ptr<int64_t[]> heap_;  // set once past kInline
  size_t size_ = 0;
  size_t capacity_ = 0;  // of heap_
};

inline void swap(Dims& a, Dims& b) noexcept { a.swap(b); }

}  // namespace troupe
