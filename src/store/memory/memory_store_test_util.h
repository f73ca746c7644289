// Copyright tollgate authors. What the memory store's tests share.
#ifndef TOLLGATE_SRC_STORE_MEMORY_MEMORY_STORE_TEST_UTIL_H_
#define TOLLGATE_SRC_STORE_MEMORY_MEMORY_STORE_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "src/store/memory/memory_store_impl.h"
#include "tests/support/decisions.h"
#include "tests/support/limits.h"
#include "tollgate/clock.h"
#include "tollgate/limit.h"
#include "tollgate/memory_store.h"
#include "tollgate/store.h"

namespace tollgate::memory_test {

inline constexpr int64_t kSecond = 1'000'000;

using ::tollgate::memory::MemoryStoreImpl;
using ::tollgate::memory::PreparedLimit;
using ::tollgate::testing::TokenBucket;
using ::tollgate::testing::Window;

inline std::unique_ptr<MemoryStoreImpl> NewStore(Clock* clock, int shards = 64,
                                                 int64_t max_keys = 1'000'000) {
  auto store = MemoryStoreImpl::Create({.clock = clock, .shards = shards, .max_keys = max_keys});
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(store).value();
}

inline Decision CheckOne(Store& store, const Limit& limit, std::string key, int64_t cost = 1) {
  auto decisions = store.Apply({CheckItem{&limit, std::move(key), cost}});
  EXPECT_TRUE(decisions.ok()) << decisions.status();
  EXPECT_EQ(decisions->size(), 1u);
  return decisions->at(0);
}

// The two paths of one store decide alike, source included.
inline void ExpectSameDecision(const Decision& a, const Decision& b, const std::string& context) {
  testing::ExpectSameDecision(a, b, context);
  EXPECT_EQ(a.source, b.source) << context;
}

inline Decision ApplyOne(Store& store, const Limit& limit, std::string key, int64_t cost, ItemOp op,
                         std::string id) {
  CheckItem item{&limit, std::move(key), cost};
  item.op = op;
  item.id = std::move(id);
  auto decisions = store.Apply({std::move(item)});
  EXPECT_TRUE(decisions.ok()) << decisions.status();
  return decisions.ok() ? decisions->at(0) : Decision{};
}

}  // namespace tollgate::memory_test

#endif  // TOLLGATE_SRC_STORE_MEMORY_MEMORY_STORE_TEST_UTIL_H_
