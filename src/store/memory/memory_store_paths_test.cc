// Copyright tollgate authors. MemoryStore: its paths (one item in place, an all-or-nothing
// batch, a PreparedLimit, CheckEach) decide alike, on the same entries.
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "src/algorithm/token_bucket.h"
#include "src/store/memory/memory_store_test_util.h"
#include "tollgate/clock.h"
#include "tollgate/limit.h"
#include "tollgate/memory_store.h"

namespace tollgate::memory_test {
namespace {

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

}  // namespace
}  // namespace tollgate::memory_test
