// LruCache: a map of at most `capacity` entries that drops the least recently used one to make room, for caches
// of per-shape or per-stream objects (cuDNN descriptors, workspaces) that a long run with changing shapes or
// streams must not let grow without end. Not thread-safe: an owner shares it under its lock or keeps it per thread.
#pragma once

#include <cstddef>
#include <iterator>
#include <list>
#include <map>
#include <utility>

#include "runtime/base/error.h"

namespace tandem {

template <typename K, typename V>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {
    TD_CHECK(capacity > 0, "an LruCache needs room for at least one entry");
  }

  // The value of `key`, now the most recently used; nullptr when absent. Valid until the entry is dropped.
  V* find(const K& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    items_.splice(items_.begin(), items_, it->second);
    return &it->second->second;
  }

  // Sets `key` to `value` as the most recently used entry, first dropping the least recently used one when a new
  // key finds the cache full. Returns the stored value.
  V& put(const K& key, V value) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      it->second->second = std::move(value);
      items_.splice(items_.begin(), items_, it->second);
      return it->second->second;
    }
    if (items_.size() == capacity_) {
      index_.erase(items_.back().first);
      items_.pop_back();
      ++evictions_;
    }
    items_.emplace_front(key, std::move(value));
    index_.emplace(key, items_.begin());
    return items_.front().second;
  }

  size_t size() const { return items_.size(); }
  size_t capacity() const { return capacity_; }
  // Entries dropped to make room so far.
  size_t evictions() const { return evictions_; }

 private:
  using Items = std::list<std::pair<K, V>>;  // most recently used first
  size_t capacity_;
  size_t evictions_ = 0;
  Items items_;
  std::map<K, typename Items::iterator> index_;
};

}  // namespace tandem
