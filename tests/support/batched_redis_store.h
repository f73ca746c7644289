// Copyright tollgate authors. A RedisStore whose every request is decided inside a batch, for
// the conformance suites.
#ifndef TOLLGATE_TESTS_SUPPORT_BATCHED_REDIS_STORE_H_
#define TOLLGATE_TESTS_SUPPORT_BATCHED_REDIS_STORE_H_

#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "src/store/redis/redis_store_impl.h"
#include "tests/support/limits.h"
#include "tollgate/redis_store.h"

namespace tollgate::testing {

// Each ApplyAsync runs on the store's I/O thread between two requests of another limit on the
// same entity key (a peek, then a check), so the three join one flush and go to Redis in one
// script call per hash slot: the path a flush takes, with the request decided between others.
// kAdd batches go straight to the store.
class BatchedRedisStore final : public Store {
 public:
  explicit BatchedRedisStore(std::unique_ptr<RedisStore> store)
      : store_(std::move(store)),
        impl_(static_cast<redis::RedisStoreImpl*>(store_.get())),
        companion_(TokenBucket("batch-companion", 1'000'000, 1)) {}

  void ApplyAsync(std::vector<CheckItem> items, CheckCallback done) override {
    if (items.empty() || items.front().op == ItemOp::kAdd) {
      store_->ApplyAsync(std::move(items), std::move(done));
      return;
    }
    impl_->client().Post([this, items = std::move(items), done = std::move(done)]() mutable {
      const std::string key = items.front().key;
      auto ignore = [](const absl::StatusOr<std::vector<Decision>>&) {};
      impl_->ApplyAsync({{&companion_, key, 0}}, ignore);
      impl_->ApplyAsync(std::move(items), std::move(done));
      impl_->ApplyAsync({{&companion_, key, 1}}, ignore);
    });
  }
  std::string_view Name() const override { return store_->Name(); }

 private:
  std::unique_ptr<RedisStore> store_;
  redis::RedisStoreImpl* const impl_;
  const Limit companion_;
};

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_BATCHED_REDIS_STORE_H_
