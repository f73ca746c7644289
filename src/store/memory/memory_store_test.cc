// Copyright tollgate authors.
#include "tollgate/memory_store.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "src/algorithm/token_bucket.h"
#include "src/store/memory/memory_store_impl.h"
#include "tests/support/limits.h"
#include "tollgate/clock.h"
#include "tollgate/limit.h"

namespace tollgate {
namespace {

constexpr int64_t kSecond = 1'000'000;

using ::tollgate::memory::MemoryStoreImpl;
using ::tollgate::memory::PreparedLimit;
using ::tollgate::testing::TokenBucket;
using ::tollgate::testing::Window;

std::unique_ptr<MemoryStoreImpl> NewStore(Clock* clock, int shards = 64,
                                          int64_t max_keys = 1'000'000) {
  auto store = MemoryStoreImpl::Create({.clock = clock, .shards = shards, .max_keys = max_keys});
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(store).value();
}

Decision CheckOne(Store& store, const Limit& limit, std::string key, int64_t cost = 1) {
  auto decisions = store.Apply({CheckItem{&limit, std::move(key), cost}});
  EXPECT_TRUE(decisions.ok()) << decisions.status();
  EXPECT_EQ(decisions->size(), 1u);
  return decisions->at(0);
}

TEST(MemoryStoreTest, CreateValidatesOptions) {
  EXPECT_EQ(MemoryStore::Create({.shards = 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MemoryStore::Create({.shards = -3}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MemoryStore::Create({.max_keys = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto store = MemoryStore::Create({.shards = 3, .max_keys = 1});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Name(), "memory");
  EXPECT_EQ((*store)->Size(), 0);
}

TEST(MemoryStoreTest, DecidesWithTheLimitsAlgorithm) {
  SimulatedClock clock(1'700'000'000'000'000);  // a whole second: windows start here
  auto store = NewStore(&clock);
  const Limit bucket = TokenBucket("bucket", 2, 1);
  const Limit fixed = Window("fixed", Algorithm::kFixedWindow, 2, kSecond);
  const Limit sliding = Window("sliding", Algorithm::kSlidingWindow, 2, kSecond);
  for (const Limit* limit : {&bucket, &fixed, &sliding}) {
    Decision first = CheckOne(*store, *limit, "k");
    EXPECT_TRUE(first.allowed) << limit->name;
    EXPECT_EQ(first.source, DecisionSource::kMemory);
    EXPECT_EQ(first.limit, 2);
    EXPECT_EQ(first.remaining, 1);
    EXPECT_TRUE(CheckOne(*store, *limit, "k").allowed);
    Decision third = CheckOne(*store, *limit, "k");
    EXPECT_FALSE(third.allowed) << limit->name;
    EXPECT_EQ(third.reason, DenyReason::kOverLimit);
    EXPECT_GT(third.retry_after_micros, 0);
    // Another key of the same limit, and the same key of another limit, are separate.
    EXPECT_TRUE(CheckOne(*store, *limit, "other").allowed);
  }
  EXPECT_EQ(store->Size(), 6);
  clock.AdvanceMicros(kSecond);
  EXPECT_TRUE(CheckOne(*store, bucket, "k").allowed);
  EXPECT_TRUE(CheckOne(*store, fixed, "k").allowed);
}

TEST(MemoryStoreTest, RejectsInvalidItems) {
  SimulatedClock clock;
  auto store = NewStore(&clock);
  const Limit good = TokenBucket("good", 1, 1);
  const Limit bad = TokenBucket("bad", 0, 1);
  const Limit no_rate = TokenBucket("no_rate", 1, 0);
  const Limit no_window = Window("no_window", Algorithm::kFixedWindow, 1, 0);
  EXPECT_EQ(store->Apply({CheckItem{&good, "k", -1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Apply({CheckItem{&good, "", 1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Apply({CheckItem{nullptr, "k", 1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (const Limit* limit : {&bad, &no_rate, &no_window}) {
    EXPECT_EQ(store->Apply({CheckItem{&good, "k", 1}, CheckItem{limit, "k", 1}}).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  // An invalid batch consumed nothing.
  EXPECT_EQ(store->Size(), 0);
}

// Exactness under contention: with time frozen nothing refills, so exactly `capacity`
// checks pass however the 16 threads interleave.
class MemoryStoreConcurrencyTest : public ::testing::TestWithParam<Algorithm> {};

TEST_P(MemoryStoreConcurrencyTest, SixteenThreadsOnOneKeyAdmitExactlyCapacity) {
  constexpr int kThreads = 16;
  constexpr int kChecksPerThread = 250;
  constexpr int64_t kCapacity = 1000;
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock);
  const Limit limit = GetParam() == Algorithm::kTokenBucket
                          ? TokenBucket("hot", kCapacity, 1)
                          : Window("hot", GetParam(), kCapacity, 60 * kSecond);
  for (int round = 0; round < 3; ++round) {
    std::atomic<int64_t> allowed{0};
    std::atomic<int64_t> errors{0};
    std::vector<std::thread> threads;
    threads.reserve(kThreads);
    const std::string key = absl::StrCat("user:", round);
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kChecksPerThread; ++i) {
          // Mix single checks with two-item batches on the same key.
          std::vector<CheckItem> items{CheckItem{&limit, key, 1}};
          if (i % 5 == 0) items.push_back(CheckItem{&limit, key, 1});
          auto decisions = store->Apply(std::move(items));
          if (!decisions.ok()) {
            errors.fetch_add(1);
            continue;
          }
          bool all = true;
          for (const Decision& d : *decisions) all = all && d.allowed;
          if (all) allowed.fetch_add(static_cast<int64_t>(decisions->size()));
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(errors.load(), 0);
    EXPECT_EQ(allowed.load(), kCapacity) << "round " << round;
    EXPECT_EQ(CheckOne(*store, limit, key, 0).remaining, 0);
  }
}

// The same through the single-item paths (CheckOne by Limit and by PreparedLimit, every
// thread taking each in turn), which take no batch route: both paths share the key's entry.
TEST_P(MemoryStoreConcurrencyTest, SixteenThreadsThroughCheckOneAdmitExactlyCapacity) {
  constexpr int kThreads = 16;
  constexpr int kChecksPerThread = 250;
  constexpr int64_t kCapacity = 1000;
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock);
  const Limit limit = GetParam() == Algorithm::kTokenBucket
                          ? TokenBucket("hot", kCapacity, 1)
                          : Window("hot", GetParam(), kCapacity, 60 * kSecond);
  const absl::StatusOr<PreparedLimit> prepared = store->Prepare(limit);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  for (int round = 0; round < 3; ++round) {
    std::atomic<int64_t> allowed{0};
    std::atomic<int64_t> errors{0};
    std::vector<std::thread> threads;
    threads.reserve(kThreads);
    const std::string key = absl::StrCat("user:", round);
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kChecksPerThread; ++i) {
          absl::StatusOr<Decision> decision =
              i % 2 == 0 ? store->CheckOne(limit, key, 1) : store->CheckOne(*prepared, key, 1);
          if (!decision.ok()) {
            errors.fetch_add(1);
          } else if (decision->allowed) {
            allowed.fetch_add(1);
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(errors.load(), 0);
    EXPECT_EQ(allowed.load(), kCapacity) << "round " << round;
    EXPECT_EQ(CheckOne(*store, limit, key, 0).remaining, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, MemoryStoreConcurrencyTest,
                         ::testing::Values(Algorithm::kTokenBucket, Algorithm::kFixedWindow,
                                           Algorithm::kSlidingWindow));

void ExpectSameDecision(const Decision& a, const Decision& b, const std::string& context) {
  EXPECT_EQ(a.allowed, b.allowed) << context;
  EXPECT_EQ(a.limit, b.limit) << context;
  EXPECT_EQ(a.remaining, b.remaining) << context;
  EXPECT_EQ(a.reset_after_micros, b.reset_after_micros) << context;
  EXPECT_EQ(a.retry_after_micros, b.retry_after_micros) << context;
  EXPECT_EQ(a.source, b.source) << context;
  EXPECT_EQ(a.reason, b.reason) << context;
}

// The single-item path (CheckOne: state read and written in place) and the all-or-nothing
// batch path (tentative states, then a commit) are separate code. Two stores on one clock
// get the same random sequence, one through each path; every decision, and what the
// stores keep, must agree. The batch carries a second item (a peek at a key of another
// limit, always allowed) so it takes the several-item route.
TEST(MemoryStoreTest, CheckOneAgreesWithTheBatchPathOnRandomSequences) {
  SimulatedClock clock(1'700'000'000'123'456);
  auto single = NewStore(&clock);
  auto batch = NewStore(&clock);
  const std::vector<Limit> limits = {TokenBucket("bucket", 5, 2.5),
                                     Window("fixed", Algorithm::kFixedWindow, 5, kSecond),
                                     Window("sliding", Algorithm::kSlidingWindow, 5, kSecond)};
  const Limit witness = TokenBucket("witness", 1, 1);
  std::mt19937 random(20261201);
  std::uniform_int_distribution<int> pick_limit(0, 2);
  std::uniform_int_distribution<int> pick_key(0, 3);
  std::uniform_int_distribution<int64_t> pick_cost(0, 6);
  std::uniform_int_distribution<int64_t> pick_advance(0, 400'000);
  int64_t allowed = 0;
  int64_t refused = 0;
  for (int step = 0; step < 5000; ++step) {
    if (step % 3 == 0) clock.AdvanceMicros(pick_advance(random));
    const Limit& limit = limits[pick_limit(random)];
    const std::string key = absl::StrCat("k", pick_key(random));
    const int64_t cost = pick_cost(random);
    const std::string context =
        absl::StrCat("step ", step, " ", limit.name, " ", key, " cost ", cost);

    absl::StatusOr<Decision> one = single->CheckOne(limit, key, cost);
    ASSERT_TRUE(one.ok()) << one.status();
    auto many = batch->Apply({CheckItem{&limit, key, cost}, CheckItem{&witness, key, 0}});
    ASSERT_TRUE(many.ok()) << many.status();
    ASSERT_EQ(many->size(), 2u);
    ExpectSameDecision(*one, (*many)[0], context);
    (one->allowed ? allowed : refused) += 1;
    if (::testing::Test::HasFailure()) return;
  }
  // Both outcomes were exercised, and both stores keep the same live entries. (How many
  // expired ones each had left to sweep depends on its hash seed: checks sweep their own
  // shard only.)
  EXPECT_GT(allowed, 500);
  EXPECT_GT(refused, 500);
  single->Sweep();
  batch->Sweep();
  EXPECT_GT(single->Size(), 0);
  EXPECT_EQ(single->Size(), batch->Size());
}

// A PreparedLimit decides as its Limit does, on the same entries: one store checks each step
// through the prepared limit or the Limit at random, a second store always through the
// Limit. Were the prepared path to hash the key differently, the two paths would keep the
// key's state in two entries and the first store would admit more.
TEST(MemoryStoreTest, APreparedLimitDecidesAsItsLimitOnTheSameEntries) {
  SimulatedClock clock(1'700'000'000'123'456);
  auto mixed = NewStore(&clock);
  auto reference = NewStore(&clock);
  const std::vector<Limit> limits = {
      TokenBucket("bucket", 5, 2.5), Window("fixed", Algorithm::kFixedWindow, 5, kSecond),
      Window("sliding", Algorithm::kSlidingWindow, 5, kSecond), TokenBucket("slow", 3, 0.5)};
  std::vector<PreparedLimit> prepared;
  for (const Limit& limit : limits) {
    absl::StatusOr<PreparedLimit> p = mixed->Prepare(limit);
    ASSERT_TRUE(p.ok()) << p.status();
    prepared.push_back(*std::move(p));
  }
  std::mt19937 random(20261203);
  std::uniform_int_distribution<size_t> pick_limit(0, limits.size() - 1);
  std::uniform_int_distribution<int> pick_key(0, 3);
  std::uniform_int_distribution<int64_t> pick_cost(0, 6);
  std::uniform_int_distribution<int64_t> pick_advance(0, 400'000);
  std::bernoulli_distribution pick_prepared(0.5);
  int64_t allowed = 0;
  int64_t refused = 0;
  for (int step = 0; step < 5000; ++step) {
    if (step % 3 == 0) clock.AdvanceMicros(pick_advance(random));
    const size_t index = pick_limit(random);
    const std::string key = absl::StrCat("k", pick_key(random));
    const int64_t cost = pick_cost(random);
    const bool use_prepared = pick_prepared(random);
    const std::string context = absl::StrCat("step ", step, " ", limits[index].name, " ", key,
                                             " cost ", cost, use_prepared ? " prepared" : "");
    absl::StatusOr<Decision> got = use_prepared ? mixed->CheckOne(prepared[index], key, cost)
                                                : mixed->CheckOne(limits[index], key, cost);
    ASSERT_TRUE(got.ok()) << got.status() << " " << context;
    absl::StatusOr<Decision> expected = reference->CheckOne(limits[index], key, cost);
    ASSERT_TRUE(expected.ok()) << expected.status();
    ExpectSameDecision(*expected, *got, context);
    (expected->allowed ? allowed : refused) += 1;
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(allowed, 500);
  EXPECT_GT(refused, 500);
  mixed->Sweep();
  reference->Sweep();
  EXPECT_EQ(mixed->Size(), reference->Size());
}

// A PreparedLimit is a copy: changing the Limit afterwards changes nothing it decides.
TEST(MemoryStoreTest, APreparedLimitIsASnapshot) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock);
  Limit limit = TokenBucket("api", 2, 1);
  const absl::StatusOr<PreparedLimit> prepared = store->Prepare(limit);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  limit.numbers.capacity = 100;
  EXPECT_EQ(prepared->limit().numbers.capacity, 2);
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<Decision> decision = store->CheckOne(*prepared, "user", 1);
    ASSERT_TRUE(decision.ok()) << decision.status();
    EXPECT_TRUE(decision->allowed) << i;
    EXPECT_EQ(decision->limit, 2);
  }
  absl::StatusOr<Decision> third = store->CheckOne(*prepared, "user", 1);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_FALSE(third->allowed);
  // The changed Limit, checked by itself, decides with its new numbers on the same entry:
  // the bucket the prepared limit emptied (a larger capacity adds no tokens at once).
  absl::StatusOr<Decision> by_limit = store->CheckOne(limit, "user", 1);
  ASSERT_TRUE(by_limit.ok()) << by_limit.status();
  EXPECT_FALSE(by_limit->allowed);
  EXPECT_EQ(by_limit->limit, 100);
  EXPECT_EQ(by_limit->remaining, 0);
}

TEST(MemoryStoreTest, PreparedLimitsRejectWhatTheirChecksCannotDecide) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock);
  auto other = NewStore(&clock);

  Limit broken = TokenBucket("broken", 5, 1);
  broken.numbers.refill_per_second = 0;
  const absl::StatusOr<PreparedLimit> invalid = store->Prepare(broken);
  EXPECT_EQ(invalid.status().code(), absl::StatusCode::kInvalidArgument) << invalid.status();
  EXPECT_NE(invalid.status().message().find("'broken'"), std::string::npos) << invalid.status();
  Limit empty_window = Window("empty", Algorithm::kSlidingWindow, 5, kSecond);
  empty_window.numbers.window_micros = 0;
  EXPECT_EQ(store->Prepare(empty_window).status().code(), absl::StatusCode::kInvalidArgument);

  const Limit limit = Window("fixed", Algorithm::kFixedWindow, 5, kSecond);
  const absl::StatusOr<PreparedLimit> prepared = store->Prepare(limit);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(store->CheckOne(*prepared, "", 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->CheckOne(*prepared, "user", -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Another store's prepared limit, and one never prepared: refused, nothing stored.
  const absl::StatusOr<Decision> elsewhere = other->CheckOne(*prepared, "user", 1);
  EXPECT_EQ(elsewhere.status().code(), absl::StatusCode::kInvalidArgument) << elsewhere.status();
  EXPECT_NE(elsewhere.status().message().find("another store"), std::string::npos)
      << elsewhere.status();
  EXPECT_EQ(store->CheckOne(PreparedLimit(), "user", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(other->Size(), 0);
  EXPECT_EQ(store->Size(), 0);
  // And the store keeps deciding.
  absl::StatusOr<Decision> decision = store->CheckOne(*prepared, "user", 1);
  ASSERT_TRUE(decision.ok()) << decision.status();
  EXPECT_TRUE(decision->allowed);
  EXPECT_EQ(decision->remaining, 4);
}

// CheckEach decides a batch item by item, as CheckOne would one call at a time: batches of
// 1 to 40 random items (more than one prefetch group, keys repeated within a batch, now and
// then an invalid item) against the same sequence through CheckOne on a second store.
TEST(MemoryStoreTest, CheckEachDecidesLikeCheckOneInTurn) {
  SimulatedClock clock(1'700'000'000'123'456);
  auto each = NewStore(&clock);
  auto one_by_one = NewStore(&clock);
  const std::vector<Limit> limits = {TokenBucket("bucket", 5, 2.5),
                                     Window("fixed", Algorithm::kFixedWindow, 5, kSecond),
                                     Window("sliding", Algorithm::kSlidingWindow, 5, kSecond)};
  std::mt19937 random(20261202);
  std::uniform_int_distribution<int> pick_size(1, 40);
  std::uniform_int_distribution<int> pick_limit(0, 2);
  std::uniform_int_distribution<int> pick_key(0, 9);
  std::uniform_int_distribution<int64_t> pick_cost(-1, 4);  // -1: an invalid item
  std::uniform_int_distribution<int64_t> pick_advance(0, 600'000);
  int64_t allowed = 0;
  int64_t refused = 0;
  int64_t invalid = 0;
  for (int batch = 0; batch < 400; ++batch) {
    clock.AdvanceMicros(pick_advance(random));
    std::vector<CheckItem> items;
    for (int i = pick_size(random); i > 0; --i) {
      items.push_back(CheckItem{&limits[pick_limit(random)], absl::StrCat("k", pick_key(random)),
                                pick_cost(random)});
    }
    std::vector<absl::StatusOr<Decision>> decisions(items.size());
    each->CheckEach(items, absl::MakeSpan(decisions));
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string context =
          absl::StrCat("batch ", batch, " item ", i, " ", items[i].limit->name, " ", items[i].key);
      absl::StatusOr<Decision> expected =
          one_by_one->CheckOne(*items[i].limit, items[i].key, items[i].cost);
      ASSERT_EQ(decisions[i].status(), expected.status()) << context;
      if (!expected.ok()) {
        ++invalid;
        continue;
      }
      ExpectSameDecision(*expected, *decisions[i], context);
      (expected->allowed ? allowed : refused) += 1;
      if (::testing::Test::HasFailure()) return;
    }
  }
  EXPECT_GT(allowed, 500);
  EXPECT_GT(refused, 500);
  EXPECT_GT(invalid, 100);
  each->Sweep();
  one_by_one->Sweep();
  EXPECT_EQ(each->Size(), one_by_one->Size());

  // Room for fewer decisions than items: nothing is checked, every decision says why.
  const int64_t size_before = each->Size();
  const std::vector<CheckItem> two = {CheckItem{&limits[0], "new1", 1},
                                      CheckItem{&limits[0], "new2", 1}};
  std::vector<absl::StatusOr<Decision>> one(1);
  each->CheckEach(two, absl::MakeSpan(one));
  EXPECT_EQ(one[0].status().code(), absl::StatusCode::kInvalidArgument) << one[0].status();
  EXPECT_EQ(each->Size(), size_before);
}

// A shard keeps the durations (fill time, time per token) of the last token bucket numbers
// it checked, to skip two divisions per check. Limits with different numbers sharing one
// shard, and a limit redefined under the same name, must each still be decided with their
// own numbers, exactly as the pure algorithm decides them.
TEST(MemoryStoreTest, TokenBucketsWithDifferentNumbersInOneShardKeepTheirOwnRates) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock, /*shards=*/1);
  const std::vector<Limit> limits = {TokenBucket("slow", 4, 0.5), TokenBucket("fast", 4, 3),
                                     TokenBucket("big", 9, 3), TokenBucket("slow", 4, 7)};
  std::vector<std::optional<algorithm::TokenBucketState>> states(limits.size());
  std::mt19937 random(20261202);
  std::uniform_int_distribution<size_t> pick_limit(0, limits.size() - 1);
  std::uniform_int_distribution<int64_t> pick_cost(0, 3);
  std::uniform_int_distribution<int64_t> pick_advance(0, 300'000);
  int64_t allowed = 0;
  int64_t refused = 0;
  for (int step = 0; step < 3000; ++step) {
    clock.AdvanceMicros(pick_advance(random));
    const size_t index = pick_limit(random);
    const Limit& limit = limits[index];
    const int64_t cost = pick_cost(random);
    // Limits 0 and 3 share a name; the key keeps their states apart, as the witness does.
    const std::string key = absl::StrCat("user-", index);
    const algorithm::Outcome<algorithm::TokenBucketState> expected = algorithm::TokenBucketCheck(
        states[index], clock.NowMicros(),
        algorithm::TokenBucketParams{limit.numbers.capacity, limit.numbers.refill_per_second},
        cost);
    if (expected.decision.allowed && expected.changed) states[index] = expected.state;

    absl::StatusOr<Decision> decision = store->CheckOne(limit, key, cost);
    ASSERT_TRUE(decision.ok()) << decision.status();
    Decision want = expected.decision;
    want.source = DecisionSource::kMemory;
    ExpectSameDecision(*decision, want,
                       absl::StrCat("step ", step, " limit ", index, " cost ", cost));
    (decision->allowed ? allowed : refused) += 1;
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(allowed, 300);
  EXPECT_GT(refused, 300);
}

// Hundreds of keys of many lengths (short ones stored inline, long ones not; some holding
// NUL bytes) in one shard, growing its table and expiring in random order, must each keep
// their own state (decided exactly as the pure algorithm decides them), and a sweep must
// leave exactly the live ones.
TEST(MemoryStoreTest, ManyKeysInOneShardKeepTheirStateThroughGrowthAndErasure) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock, /*shards=*/1);
  const Limit limit = TokenBucket("lim", 5, 10);  // full again 0.5 s after its last use
  const algorithm::TokenBucketParams params{5, 10};
  constexpr int kKeys = 300;
  auto key = [](int i) {
    std::string k = absl::StrCat(i, std::string(i % 47, static_cast<char>('a' + i % 26)));
    if (i % 5 == 0) k[k.size() / 2] = '\0';  // keys may hold any byte
    return k;
  };
  std::vector<std::optional<algorithm::TokenBucketState>> states(kKeys);
  std::vector<int64_t> expiries(kKeys, 0);
  std::mt19937 random(20261203);
  std::uniform_int_distribution<int> pick_key(0, kKeys - 1);
  std::uniform_int_distribution<int64_t> pick_cost(0, 3);
  std::uniform_int_distribution<int64_t> pick_advance(0, 3'000);
  int64_t refused = 0;
  for (int step = 0; step < 20'000; ++step) {
    clock.AdvanceMicros(pick_advance(random));
    const int index = pick_key(random);
    const int64_t cost = pick_cost(random);
    const algorithm::Outcome<algorithm::TokenBucketState> expected =
        algorithm::TokenBucketCheck(states[index], clock.NowMicros(), params, cost);
    if (expected.decision.allowed && expected.changed) {
      states[index] = expected.state;
      expiries[index] = expected.expires_at_micros;
    }
    absl::StatusOr<Decision> decision = store->CheckOne(limit, key(index), cost);
    ASSERT_TRUE(decision.ok()) << decision.status();
    Decision want = expected.decision;
    want.source = DecisionSource::kMemory;
    ExpectSameDecision(*decision, want, absl::StrCat("step ", step, " key ", index));
    refused += decision->allowed ? 0 : 1;
    if (::testing::Test::HasFailure()) return;
    if (step % 1000 == 999) {
      store->Sweep();
      int64_t live = 0;
      for (int64_t expiry : expiries) live += expiry > clock.NowMicros() ? 1 : 0;
      ASSERT_EQ(store->Size(), live) << "step " << step;
      ASSERT_GT(live, 20) << "step " << step;  // the table held many keys at once
    }
  }
  EXPECT_GT(refused, 300);
  clock.AdvanceMicros(kSecond);
  store->Sweep();
  EXPECT_EQ(store->Size(), 0);
}

// The stored key is the limit name and the key with the split between them: limit "ab" with
// key "c" and limit "a" with key "bc" are different entries, inline or not.
TEST(MemoryStoreTest, WhereTheNameEndsIsPartOfTheKey) {
  SimulatedClock clock;
  auto store = NewStore(&clock, /*shards=*/1);
  for (const std::string& tail : {std::string(), std::string(40, 'z')}) {
    const Limit ab = TokenBucket("ab", 2, 1);
    const Limit a = TokenBucket("a", 2, 1);
    EXPECT_TRUE(CheckOne(*store, ab, "c" + tail, 2).allowed);
    EXPECT_TRUE(CheckOne(*store, a, "bc" + tail, 1).allowed) << tail.size();
    EXPECT_EQ(CheckOne(*store, a, "bc" + tail, 0).remaining, 1) << tail.size();
    EXPECT_EQ(CheckOne(*store, ab, "c" + tail, 0).remaining, 0) << tail.size();
  }
  EXPECT_EQ(store->Size(), 4);
}

TEST(MemoryStoreTest, CheckOneRejectsInvalidItems) {
  SimulatedClock clock;
  auto store = NewStore(&clock);
  const Limit good = TokenBucket("good", 1, 1);
  const Limit bad = TokenBucket("bad", 0, 1);
  EXPECT_EQ(store->CheckOne(good, "k", -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->CheckOne(good, "", 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->CheckOne(bad, "k", 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Size(), 0);
}

TEST(MemoryStoreTest, SeveralLimitsAreAllOrNothing) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock);
  const Limit per_user = TokenBucket("per_user", 5, 1);
  const Limit per_ip = Window("per_ip", Algorithm::kFixedWindow, 1, 60 * kSecond);
  const Limit global = Window("global", Algorithm::kSlidingWindow, 100, 60 * kSecond);
  auto batch = [&](int64_t cost) {
    return std::vector<CheckItem>{CheckItem{&per_user, "u1", cost},
                                  CheckItem{&per_ip, "10.0.0.1", cost},
                                  CheckItem{&global, "all", cost}};
  };

  auto first = store->Apply(batch(1));
  ASSERT_TRUE(first.ok());
  for (const Decision& d : *first) EXPECT_TRUE(d.allowed);
  EXPECT_EQ((*first)[0].remaining, 4);
  EXPECT_EQ((*first)[1].remaining, 0);
  EXPECT_EQ((*first)[2].remaining, 99);

  // per_ip is spent: the batch is refused, and the others say they alone would pass.
  for (int i = 0; i < 3; ++i) {
    auto refused = store->Apply(batch(1));
    ASSERT_TRUE(refused.ok());
    EXPECT_TRUE((*refused)[0].allowed);
    EXPECT_FALSE((*refused)[1].allowed);
    EXPECT_EQ((*refused)[1].reason, DenyReason::kOverLimit);
    EXPECT_TRUE((*refused)[2].allowed);
  }
  // Nothing was consumed by the refusals: peeks show the state after the first batch.
  auto peek = store->Apply(batch(0));
  ASSERT_TRUE(peek.ok());
  EXPECT_EQ((*peek)[0].remaining, 4);
  EXPECT_EQ((*peek)[1].remaining, 0);
  EXPECT_EQ((*peek)[2].remaining, 99);
  EXPECT_EQ(CheckOne(*store, per_user, "u1", 4).remaining, 0);
}

TEST(MemoryStoreTest, SameKeyTwiceInOneBatchSeesItsOwnTentativeState) {
  SimulatedClock clock;
  auto store = NewStore(&clock);
  const Limit limit = TokenBucket("l", 3, 1);
  // 2 + 2 > 3: the second item sees 1 token left, so the whole batch is refused.
  auto refused = store->Apply({CheckItem{&limit, "k", 2}, CheckItem{&limit, "k", 2}});
  ASSERT_TRUE(refused.ok());
  EXPECT_TRUE((*refused)[0].allowed);
  EXPECT_FALSE((*refused)[1].allowed);
  EXPECT_EQ(CheckOne(*store, limit, "k", 0).remaining, 3);
  EXPECT_EQ(store->Size(), 0);

  auto allowed = store->Apply({CheckItem{&limit, "k", 1}, CheckItem{&limit, "k", 2}});
  ASSERT_TRUE(allowed.ok());
  EXPECT_TRUE((*allowed)[0].allowed);
  EXPECT_EQ((*allowed)[0].remaining, 2);
  EXPECT_TRUE((*allowed)[1].allowed);
  EXPECT_EQ((*allowed)[1].remaining, 0);
  EXPECT_EQ(CheckOne(*store, limit, "k", 0).remaining, 0);
  EXPECT_EQ(store->Size(), 1);
}

TEST(MemoryStoreTest, KeysOfAnyLengthKeepTheirOwnState) {
  SimulatedClock clock;
  auto store = NewStore(&clock, /*shards=*/4);
  const Limit limit = TokenBucket("l", 10, 1);
  // Short keys are stored inline, long ones on the heap; both must survive rehashing and
  // heap reordering.
  auto key = [](int i) {
    return std::string(1 + (i * 37) % 1024, static_cast<char>('a' + i % 26)) + absl::StrCat(i);
  };
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(CheckOne(*store, limit, key(i), 1 + i % 3).allowed);
  EXPECT_EQ(store->Size(), 2000);
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(CheckOne(*store, limit, key(i), 0).remaining, 10 - (1 + i % 3)) << i;
  }
  clock.AdvanceMicros(3 * kSecond);
  EXPECT_EQ(store->Sweep(), 2000);
  EXPECT_EQ(store->Size(), 0);

  // The same at the bound, where long keys are evicted too.
  auto bounded = NewStore(&clock, /*shards=*/4, /*max_keys=*/100);
  for (int i = 0; i < 2000; ++i) {
    ASSERT_TRUE(CheckOne(*bounded, limit, key(i)).allowed);
    ASSERT_FALSE(CheckOne(*bounded, limit, key(i), 10).allowed);  // its state was kept
  }
  EXPECT_EQ(bounded->Size(), 100);
  EXPECT_EQ(bounded->Evictions(), 1900);
}

TEST(MemoryStoreTest, PeeksAndFullBucketsStoreNothing) {
  SimulatedClock clock;
  auto store = NewStore(&clock);
  const Limit limit = TokenBucket("l", 3, 1);
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(CheckOne(*store, limit, absl::StrCat("k", i), 0).allowed);
    EXPECT_EQ(CheckOne(*store, limit, absl::StrCat("k", i), 4).reason,
              DenyReason::kCostExceedsLimit);
  }
  EXPECT_EQ(store->Size(), 0);
}

Decision ApplyOne(Store& store, const Limit& limit, std::string key, int64_t cost, ItemOp op,
                  std::string id) {
  CheckItem item{&limit, std::move(key), cost};
  item.op = op;
  item.id = std::move(id);
  auto decisions = store.Apply({std::move(item)});
  EXPECT_TRUE(decisions.ok()) << decisions.status();
  return decisions.ok() ? decisions->at(0) : Decision{};
}

// Lease sets and reservation records live beside the entries, each table bounded by
// max_keys: at the bound a new key evicts the one whose expiry is soonest, so the oldest lease
// set frees its slots and the oldest reservation can no longer be settled (it stays charged).
TEST(MemoryStoreTest, LeaseSetsAndReservationsAreBoundedByMaxKeys) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock, /*shards=*/1, /*max_keys=*/4);
  const Limit slots = Window("slots", Algorithm::kConcurrency, 1, 60 * kSecond);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(
        ApplyOne(*store, slots, absl::StrCat("k", i), 1, ItemOp::kCheck, absl::StrCat("lease", i))
            .allowed)
        << i;
    clock.AdvanceMicros(1000);  // each later than the one before
  }
  EXPECT_EQ(store->Evictions(), 6);
  EXPECT_TRUE(CheckOne(*store, slots, "k0", 0).remaining == 1);  // evicted: free again
  EXPECT_TRUE(CheckOne(*store, slots, "k9", 0).remaining == 0);  // kept
  EXPECT_EQ(store->Size(), 0);                                   // no rate entry was made for them

  const Limit tokens = TokenBucket("tokens", 100, 1e-5);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(ApplyOne(*store, tokens, "t", 10, ItemOp::kReserve, absl::StrCat("r", i)).allowed);
    clock.AdvanceMicros(1000);
  }
  EXPECT_EQ(store->Evictions(), 7);
  EXPECT_EQ(ApplyOne(*store, tokens, "t", 0, ItemOp::kSettle, "r0").reason, DenyReason::kNotFound);
  EXPECT_EQ(CheckOne(*store, tokens, "t", 0).remaining, 50);  // r0 stays charged
  EXPECT_TRUE(ApplyOne(*store, tokens, "t", 0, ItemOp::kSettle, "r4").allowed);
  EXPECT_EQ(CheckOne(*store, tokens, "t", 0).remaining, 60);
}

// Expired lease sets and reservation records go with Sweep, as idle entries do.
TEST(MemoryStoreTest, SweepRemovesExpiredLeaseSetsAndReservations) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock);
  const Limit slots = Window("slots", Algorithm::kConcurrency, 2, kSecond);
  Limit fixed = Window("fixed", Algorithm::kFixedWindow, 10, kSecond);
  fixed.reservation_ttl_micros = kSecond;
  ASSERT_TRUE(ApplyOne(*store, slots, "k", 1, ItemOp::kCheck, "lease").allowed);
  ASSERT_TRUE(ApplyOne(*store, fixed, "k", 3, ItemOp::kReserve, "reservation").allowed);
  EXPECT_EQ(store->Sweep(), 0);
  clock.AdvanceMicros(kSecond);
  EXPECT_EQ(store->Sweep(), 3);  // the window's entry, the lease set, the reservation
  EXPECT_EQ(ApplyOne(*store, slots, "k", 1, ItemOp::kRenew, "lease").reason, DenyReason::kNotFound);
}

// A concurrency limit has no rate rule: it is not prepared (callers go the general way), and a
// peek through CheckOne or CheckEach reads its lease set.
TEST(MemoryStoreTest, AConcurrencyLimitIsPeekedThroughEveryPath) {
  SimulatedClock clock;
  auto store = NewStore(&clock);
  const Limit slots = Window("slots", Algorithm::kConcurrency, 3, kSecond);
  EXPECT_EQ(store->PrepareCheck(slots), nullptr);
  ASSERT_TRUE(ApplyOne(*store, slots, "k", 1, ItemOp::kCheck, "lease").allowed);
  absl::StatusOr<Decision> one = store->CheckOne(slots, "k", 0);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->remaining, 2);
  EXPECT_EQ(one->source, DecisionSource::kMemory);
  const std::vector<CheckItem> items = {CheckItem{&slots, "k", 0}, CheckItem{&slots, "j", 0}};
  std::vector<absl::StatusOr<Decision>> each(items.size());
  store->CheckEach(items, absl::MakeSpan(each));
  ASSERT_TRUE(each[0].ok()) << each[0].status();
  EXPECT_EQ(each[0]->remaining, 2);
  EXPECT_EQ(each[1]->remaining, 3);
  // A lease without an id, a charge of a concurrency limit, a release of a rate limit: errors.
  EXPECT_EQ(store->CheckOne(slots, "k", 1).status().code(), absl::StatusCode::kInvalidArgument);
  CheckItem charge{&slots, "k", 1};
  charge.op = ItemOp::kCharge;
  EXPECT_EQ(store->Apply({charge}).status().code(), absl::StatusCode::kInvalidArgument);
  const Limit bucket = TokenBucket("bucket", 3, 1);
  CheckItem release{&bucket, "k", 1};
  release.op = ItemOp::kRelease;
  release.id = "lease";
  EXPECT_EQ(store->Apply({release}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MemoryStoreTest, SweepRemovesIdleEntries) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock);
  const Limit bucket = TokenBucket("bucket", 10, 10);  // full again 1 s after one use
  const Limit fixed = Window("fixed", Algorithm::kFixedWindow, 10, kSecond);
  const Limit sliding = Window("sliding", Algorithm::kSlidingWindow, 10, kSecond);
  for (int i = 0; i < 1000; ++i) {
    for (const Limit* limit : {&bucket, &fixed, &sliding}) {
      ASSERT_TRUE(CheckOne(*store, *limit, absl::StrCat("user:", i)).allowed);
    }
  }
  EXPECT_EQ(store->Size(), 3000);
  EXPECT_EQ(store->Sweep(), 0);  // nothing idle yet

  clock.AdvanceMicros(kSecond);  // the buckets and fixed windows are done
  EXPECT_EQ(store->Sweep(), 2000);
  EXPECT_EQ(store->Size(), 1000);
  clock.AdvanceMicros(kSecond);  // the sliding windows' counts no longer weigh
  EXPECT_EQ(store->Sweep(), 1000);
  EXPECT_EQ(store->Size(), 0);
}

TEST(MemoryStoreTest, ChecksSweepIdleEntriesAFewAtATime) {
  SimulatedClock clock;
  auto store = NewStore(&clock, /*shards=*/1);
  const Limit limit = TokenBucket("l", 10, 10);
  for (int i = 0; i < 1000; ++i) CheckOne(*store, limit, absl::StrCat("idle:", i));
  EXPECT_EQ(store->Size(), 1000);
  clock.AdvanceMicros(2 * kSecond);

  // Each check on other keys removes up to 4 expired entries of its shard.
  for (int i = 0; i < 100; ++i) CheckOne(*store, limit, absl::StrCat("busy:", i % 10), 0);
  EXPECT_EQ(store->Size(), 600);
  for (int i = 0; i < 150; ++i) CheckOne(*store, limit, absl::StrCat("busy:", i % 10), 0);
  EXPECT_EQ(store->Size(), 0);
}

TEST(MemoryStoreTest, ChecksSweepAcrossShards) {
  SimulatedClock clock;
  auto store = NewStore(&clock, /*shards=*/16);
  const Limit limit = TokenBucket("l", 10, 10);
  for (int i = 0; i < 1000; ++i) CheckOne(*store, limit, absl::StrCat("idle:", i));
  clock.AdvanceMicros(2 * kSecond);
  int checks = 0;
  while (store->Size() > 0 && checks < 100'000) {
    CheckOne(*store, limit, absl::StrCat("busy:", checks++), 0);
  }
  EXPECT_EQ(store->Size(), 0);
}

TEST(MemoryStoreTest, RecentlyUsedEntriesOutliveTheirFirstExpiry) {
  SimulatedClock clock;
  auto store = NewStore(&clock, /*shards=*/1);
  const Limit limit = TokenBucket("l", 10, 1);
  CheckOne(*store, limit, "k");  // full again in 1 s
  clock.AdvanceMicros(kSecond / 2);
  CheckOne(*store, limit, "k", 5);  // now full again in 5.5 s
  clock.AdvanceMicros(kSecond);     // past the first expiry
  EXPECT_EQ(store->Sweep(), 0);
  EXPECT_EQ(store->Size(), 1);
  EXPECT_EQ(CheckOne(*store, limit, "k", 0).remaining, 5);
  clock.AdvanceMicros(5 * kSecond);
  EXPECT_EQ(store->Sweep(), 1);
}

// At the bound every shard holds its share of max_keys; a new key evicts the entry of its
// shard that would expire soonest, and that key starts over with a full bucket.
TEST(MemoryStoreTest, FloodOfKeysStaysWithinMaxKeys) {
  SimulatedClock clock;
  constexpr int64_t kMaxKeys = 1000;
  auto store = NewStore(&clock, /*shards=*/16, kMaxKeys);
  const Limit limit = TokenBucket("l", 10, 0.001);  // nothing expires during the flood
  std::mt19937_64 rng(42);
  for (int i = 0; i < 10 * kMaxKeys; ++i) {
    ASSERT_TRUE(CheckOne(*store, limit, absl::StrCat("random:", rng())).allowed);
    if (i % 97 == 0) {
      ASSERT_LE(store->Size(), kMaxKeys);
    }
    clock.AdvanceMicros(1);
  }
  EXPECT_EQ(store->Size(), kMaxKeys);
  EXPECT_EQ(store->Evictions(), 10 * kMaxKeys - kMaxKeys);
}

TEST(MemoryStoreTest, MoreShardsThanKeysStillBoundsAndLimits) {
  SimulatedClock clock;
  auto store = NewStore(&clock, /*shards=*/64, /*max_keys=*/3);
  const Limit limit = TokenBucket("l", 1, 0.001);
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(CheckOne(*store, limit, absl::StrCat("k", i)).allowed);
    EXPECT_LE(store->Size(), 3);
  }
  // The most recent key is always kept, so it is limited.
  EXPECT_FALSE(CheckOne(*store, limit, "k99").allowed);
}

TEST(MemoryStoreTest, AtTheBoundTheHotKeyIsNotEvictedFirst) {
  SimulatedClock clock;
  auto store = NewStore(&clock, /*shards=*/1, /*max_keys=*/10);
  const Limit limit = TokenBucket("l", 100, 1);
  CheckOne(*store, limit, "hot");  // expires in 1 s: the soonest of all, for now
  clock.AdvanceMicros(100'000);
  for (int i = 1; i <= 9; ++i) CheckOne(*store, limit, absl::StrCat("cold:", i));  // 1.1 s
  clock.AdvanceMicros(100'000);
  for (int i = 0; i < 5; ++i) CheckOne(*store, limit, "hot");  // now full again in ~6 s
  EXPECT_EQ(store->Size(), 10);
  EXPECT_EQ(store->Evictions(), 0);

  clock.AdvanceMicros(100'000);
  CheckOne(*store, limit, "new");
  EXPECT_EQ(store->Size(), 10);
  EXPECT_EQ(store->Evictions(), 1);
  // The hot key kept its state (6 used, 0.3 s of refill)...
  EXPECT_EQ(CheckOne(*store, limit, "hot", 0).remaining, 94);
  // ...and exactly one cold key was evicted: it starts over with a full bucket.
  int full = 0;
  for (int i = 1; i <= 9; ++i) {
    if (CheckOne(*store, limit, absl::StrCat("cold:", i), 0).remaining == 100) ++full;
  }
  EXPECT_EQ(full, 1);
}

TEST(MemoryStoreTest, AtTheBoundExpiredEntriesGoBeforeLiveOnes) {
  SimulatedClock clock;
  auto store = NewStore(&clock, /*shards=*/1, /*max_keys=*/4);
  const Limit slow = TokenBucket("slow", 10, 0.001);
  const Limit fast = TokenBucket("fast", 10, 1000);
  CheckOne(*store, slow, "a");
  CheckOne(*store, slow, "b");
  CheckOne(*store, fast, "c");  // full again after 1 ms
  CheckOne(*store, fast, "d");
  clock.AdvanceMicros(2000);
  CheckOne(*store, slow, "e");
  CheckOne(*store, slow, "f");
  EXPECT_EQ(store->Evictions(), 0);  // c and d were swept, not evicted
  EXPECT_EQ(store->Size(), 4);
  EXPECT_EQ(CheckOne(*store, slow, "a", 0).remaining, 9);
  EXPECT_EQ(CheckOne(*store, slow, "b", 0).remaining, 9);
}

TEST(MemoryStoreTest, TimeGoingBackwardsAddsNothing) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock);
  const Limit bucket = TokenBucket("bucket", 2, 1);
  const Limit fixed = Window("fixed", Algorithm::kFixedWindow, 2, kSecond);
  for (const Limit* limit : {&bucket, &fixed}) {
    CheckOne(*store, *limit, "k", 2);
    clock.AdvanceMicros(-5 * kSecond);
    EXPECT_FALSE(CheckOne(*store, *limit, "k").allowed) << limit->name;
    clock.AdvanceMicros(5 * kSecond);
  }
}

// A clock stepped back (an NTP correction) between checks of two keys in one shard: the
// second key is decided at the shard's latest decision time, not at its own earlier reading,
// through each path a check can take (CheckOne, a one-item batch, an all-or-nothing batch).
// It is then counted in the first key's window, and checked again once the clock is back, it
// is refused. Decided at its earlier reading, it would have been counted in a window six
// seconds back and allowed a second time within one window.
TEST(MemoryStoreTest, DecisionTimesInAShardNeverGoBack) {
  constexpr int64_t kStart = 1'700'000'000'000'000 + 300'000;  // 0.3 s into a window
  const Limit fixed = Window("fixed", Algorithm::kFixedWindow, 1, kSecond);
  for (int path = 0; path < 3; ++path) {
    SimulatedClock clock(kStart);
    auto store = NewStore(&clock, /*shards=*/1);
    EXPECT_TRUE(CheckOne(*store, fixed, "a").allowed);
    clock.AdvanceMicros(-5'500'000);
    Decision second;
    if (path == 0) {
      absl::StatusOr<Decision> one = store->CheckOne(fixed, "b", 1);
      ASSERT_TRUE(one.ok()) << one.status();
      second = *one;
    } else if (path == 1) {
      second = CheckOne(*store, fixed, "b");
    } else {
      auto both = store->Apply({CheckItem{&fixed, "b", 1}, CheckItem{&fixed, "c", 1}});
      ASSERT_TRUE(both.ok()) << both.status();
      second = both->at(0);
    }
    EXPECT_TRUE(second.allowed) << path;
    // Decided 0.3 s into the first key's window, it resets 0.7 s later (0.2 s at its reading).
    EXPECT_EQ(second.reset_after_micros, 700'000) << path;
    clock.AdvanceMicros(5'500'000);
    EXPECT_FALSE(CheckOne(*store, fixed, "b").allowed) << path;
  }
}

// An entry keeps its name and key beside the state when they fit, and fewer bytes fit beside
// a larger state: a limit redefined with another algorithm (the same name, another state
// size) must find the same entry, start it afresh, and keep the new algorithm's state, for
// keys on either side of each size boundary.
TEST(MemoryStoreTest, ALimitRedefinedWithAnotherAlgorithmStartsAfresh) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock, /*shards=*/2);
  const Limit bucket = TokenBucket("redefined", 5, 1);
  const Limit fixed = Window("redefined", Algorithm::kFixedWindow, 5, kSecond);
  const Limit sliding = Window("redefined", Algorithm::kSlidingWindow, 5, kSecond);
  std::vector<std::string> keys;
  for (size_t size = 18; size <= 42; ++size) keys.push_back(std::string(size, 'a' + size % 26));
  for (const Limit* limit : {&bucket, &fixed, &sliding, &bucket, &sliding, &fixed, &bucket}) {
    for (const std::string& key : keys) {
      EXPECT_EQ(CheckOne(*store, *limit, key, 2).remaining, 3) << limit->name << key.size();
      EXPECT_EQ(CheckOne(*store, *limit, key, 0).remaining, 3) << limit->name << key.size();
      absl::StatusOr<Decision> one = store->CheckOne(*limit, key, 1);
      ASSERT_TRUE(one.ok()) << one.status();
      EXPECT_EQ(one->remaining, 2) << key.size();
    }
    EXPECT_EQ(store->Size(), static_cast<int64_t>(keys.size()));
  }
}

// Expiries far beyond any clock are kept as the latest one the store holds, never as an
// earlier time: an entry whose window ends in 73,000 years keeps its state when its first,
// short expiry comes up in the sweep.
TEST(MemoryStoreTest, AnEntryThatExpiresInTheFarFutureKeepsItsState) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock);
  const Limit quick = TokenBucket("far", 10, 10);  // full again 0.1 s after a check
  const Limit far = Window("far", Algorithm::kFixedWindow, 5, int64_t{1} << 61);
  ASSERT_TRUE(CheckOne(*store, quick, "k").allowed);
  ASSERT_TRUE(CheckOne(*store, far, "k").allowed);
  clock.AdvanceMicros(int64_t{1000} * 365 * 24 * 3600 * kSecond);  // a thousand years
  EXPECT_EQ(store->Sweep(), 0);
  EXPECT_EQ(CheckOne(*store, far, "k", 0).remaining, 4);
}

}  // namespace
}  // namespace tollgate
