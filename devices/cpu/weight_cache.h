#pragma once
// Forms of a weight computed once and kept while the weight's bytes live and are unchanged (the
// packed f32 panels of gemm_packed.h, the bf16 blocks of gemm_bf16.h). Internal to devices/cpu.
//
//   static WeightCache<PackedWeight> cache;
//   std::shared_ptr<const PackedWeight> p = cache.get(w, PackWhen::second_use, bytes, [&] { return pack(w); });
//
// An entry is keyed by the weight's storage, its view (offset, sizes, strides) and the storage's
// version (bumped by every Tensor::mutable_data()), so a weight written since is packed again.
// Each cache holds at most TROUPE_PACKED_CACHE_MB (default 4096: an XLM-R-large encoder's 1.2 GB
// of weights stay packed), least recently used first out.
#include <cstdlib>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "devices/error.h"
#include "devices/tensor.h"

namespace troupe {

//   first_use: packed now (the LSTM reuses its weights T times within one call).
//   second_use: nullptr the first time a weight is seen, packed the next: a weight used once per
//               version (training writes it every step) never pays for packing.
enum class PackWhen { first_use, second_use };

inline size_t weight_cache_capacity_bytes() {
  static const size_t bytes = [] {
    const char* text = std::getenv("TROUPE_PACKED_CACHE_MB");
    if (!text || !*text) return size_t(4096) << 20;
    char* end = nullptr;
    const long long mb = std::strtoll(text, &end, 10);
    if (*end != '\0' || mb < 0)
      throw ValueError(std::string("TROUPE_PACKED_CACHE_MB: expected megabytes >= 0, got '") + text + "'");
    return static_cast<size_t>(mb) << 20;
  }();
  return bytes;
}

template <class Form>  // Form::nbytes() says what an entry costs
class WeightCache {
 public:
  // The weight's cached form, made by make() (a shared_ptr<const Form>) when missing; see PackWhen.
  // A form larger than the whole cache is made for this use only (first_use) or not at all.
  template <class Make>
  std::shared_ptr<const Form> get(const Tensor& w, PackWhen when, size_t bytes, Make make) {
    if (bytes > weight_cache_capacity_bytes()) return when == PackWhen::first_use ? make() : nullptr;
    const Key key{w.storage().get(), w.offset(), w.size(0), w.size(1), w.strides()[0], w.strides()[1]};
    const uint64_t version = w.storage()->version();
    const auto found = find(key, w.storage(), version);
    if (found && *found) return *found;
    if (!found && when == PackWhen::second_use) {
      insert({key, w.storage(), version, nullptr});
      return nullptr;
    }
    std::shared_ptr<const Form> form = make();
    insert({key, w.storage(), version, form});
    return form;
  }

  size_t bytes() {
    std::lock_guard lock(mutex_);
    return bytes_;
  }

  void clear() {
    std::lock_guard lock(mutex_);
    entries_.clear();
    index_.clear();
    bytes_ = 0;
  }

 private:
  struct Key {
    const Storage* storage;
    int64_t offset, n, k, row_stride, col_stride;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& key) const {
      size_t h = std::hash<const void*>()(key.storage);
      for (int64_t v : {key.offset, key.n, key.k, key.row_stride, key.col_stride}) h = h * 1000003u ^ std::hash<int64_t>()(v);
      return h;
    }
  };
  struct Entry {
    Key key;
    std::weak_ptr<Storage> storage;  // expired: the weight is gone (and the address may be reused)
    uint64_t version;
    std::shared_ptr<const Form> form;  // null: seen once, not packed yet (PackWhen::second_use)
  };
  using Index = std::unordered_map<Key, typename std::list<Entry>::iterator, KeyHash>;

  static size_t entry_bytes(const Entry& entry) { return entry.form ? entry.form->nbytes() : 0; }

  // The current entry for the weight (a form, or a seen-once marker), or nullopt.
  std::optional<std::shared_ptr<const Form>> find(const Key& key, const std::shared_ptr<Storage>& storage,
                                                  uint64_t version) {
    std::lock_guard lock(mutex_);
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    Entry& entry = *it->second;
    if (entry.storage.lock() != storage || entry.version != version) {
      erase(it);
      return std::nullopt;
    }
    entries_.splice(entries_.begin(), entries_, it->second);  // most recently used first
    return entry.form;
  }

  void insert(Entry entry) {
    std::lock_guard lock(mutex_);
    if (auto it = index_.find(entry.key); it != index_.end()) erase(it);
    // Weights that died since are dropped first, then the least recently used beyond capacity.
    for (auto it = entries_.begin(); it != entries_.end();) {
      auto next = std::next(it);
      if (it->storage.expired()) erase(index_.find(it->key));
      it = next;
    }
    bytes_ += entry_bytes(entry);
    entries_.push_front(std::move(entry));
    index_[entries_.front().key] = entries_.begin();
    while (bytes_ > weight_cache_capacity_bytes() && !entries_.empty()) erase(index_.find(entries_.back().key));
  }

  void erase(typename Index::iterator it) {
    bytes_ -= entry_bytes(*it->second);
    entries_.erase(it->second);
    index_.erase(it);
  }

  std::mutex mutex_;
  std::list<Entry> entries_;
  Index index_;
  size_t bytes_ = 0;
};

}  // namespace troupe
