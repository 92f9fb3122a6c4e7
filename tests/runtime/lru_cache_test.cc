// LruCache against the definition of least-recently-used replacement, kept naively (every key with the time of
// its last use), over random finds and puts; and its refusal of a zero capacity.
#include "runtime/base/lru_cache.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

#include "runtime/base/error.h"
#include "tests/testing.h"

namespace tandem {
namespace {

TEST(LruCache, MatchesLeastRecentlyUsedReplacement) {
  std::mt19937_64 gen(testing::fresh_seed());
  for (size_t capacity : {1, 2, 3, 7}) {
    LruCache<int, std::string> cache(capacity);
    std::map<int, std::pair<long, std::string>> model;  // key -> (time of last use, value)
    long now = 0;
    size_t dropped = 0;
    for (int op = 0; op < 2000; ++op) {
      const int key = std::uniform_int_distribution<int>(0, 3 * static_cast<int>(capacity))(gen);
      ++now;
      if (gen() % 2 == 0) {
        std::string* v = cache.find(key);
        auto it = model.find(key);
        ASSERT_EQ(v != nullptr, it != model.end()) << "key " << key;
        if (v == nullptr) continue;
        EXPECT_EQ(*v, it->second.second);
        it->second.first = now;
      } else {
        const std::string value = std::to_string(gen());
        if (model.count(key) == 0 && model.size() == capacity) {
          auto oldest = model.begin();
          for (auto it = model.begin(); it != model.end(); ++it)
            if (it->second.first < oldest->second.first) oldest = it;
          model.erase(oldest);
          ++dropped;
        }
        model[key] = {now, value};
        EXPECT_EQ(cache.put(key, value), value);
      }
      ASSERT_EQ(cache.size(), model.size());
      ASSERT_EQ(cache.evictions(), dropped);
    }
    for (const auto& [key, entry] : model) {
      const std::string* v = cache.find(key);
      ASSERT_NE(v, nullptr) << key;
      EXPECT_EQ(*v, entry.second);
    }
  }
}

TEST(LruCache, RefusesZeroCapacity) { EXPECT_THROW((LruCache<int, int>(0)), Error); }

}  // namespace
}  // namespace tandem
