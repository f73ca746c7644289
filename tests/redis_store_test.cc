// Copyright tollgate authors. RedisStore against a real redis-server.
#include "tollgate/redis_store.h"

#include <signal.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/algorithm/concurrency.h"
#include "src/algorithm/fixed_window.h"
#include "src/algorithm/sliding_window.h"
#include "src/algorithm/token_bucket.h"
#include "src/store/redis/redis_store_impl.h"
#include "src/store/redis/slot.h"
#include "tests/support/decisions.h"
#include "tests/support/limits.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_stores.h"

namespace tollgate {
namespace {

using redis::RedisReply;
using redis::RedisStoreImpl;
using ::testing::HasSubstr;
using testing::RedisServer;

using ::tollgate::testing::TokenBucket;
using ::tollgate::testing::Window;

absl::StatusOr<std::vector<Decision>> CheckAt(RedisStoreImpl& store, std::vector<CheckItem> items,
                                              std::optional<int64_t> now_micros) {
  std::promise<absl::StatusOr<std::vector<Decision>>> promise;
  auto result = promise.get_future();
  store.CheckAtAsync(std::move(items), now_micros,
                     [&promise](absl::StatusOr<std::vector<Decision>> decisions) {
                       promise.set_value(std::move(decisions));
                     });
  return result.get();
}

// The numbers the scripts receive and return travel as Lua's struct '<d': 8 bytes,
// least significant first. Every double comes back exactly (the decision table relies on
// the refill rate reaching the script unchanged).
TEST(ScriptEncodingTest, DoublesAreLittleEndianAndComeBackExactly) {
  char bytes[8];
  EXPECT_EQ(redis::PutLittleEndianDouble(bytes, 1.0), bytes + 8);
  EXPECT_EQ(std::string(bytes, 8), std::string("\0\0\0\0\0\0\xf0\x3f", 8));
  for (double value : {0.001, 1e-300, 123456.789, 5.0, 1.0 / 7.0, 2.5e10, -0.0, 1.7e15 + 0.5}) {
    redis::PutLittleEndianDouble(bytes, value);
    const double back = redis::ReadLittleEndianDouble(bytes);
    EXPECT_EQ(std::bit_cast<uint64_t>(back), std::bit_cast<uint64_t>(value)) << value;
  }
}

// Every one-item decision's EVALSHA is written by SingleCheckCommand, the others by
// CheckCommand: for any one item (each algorithm, shadow, each op with its id, a pinned time,
// an empty key, a key longer than a bulk header's first guess) the two give the same bytes.
TEST(ScriptEncodingTest, OneItemCommandIsTheGeneralCommand) {
  const std::string sha(40, 'a');
  const std::string head = redis::SingleCheckHead(sha);
  Limit bucket = TokenBucket("api", 5, 2.5);
  Limit fixed = Window("fixed", Algorithm::kFixedWindow, 10, 1'000'000);
  Limit sliding = Window("sliding", Algorithm::kSlidingWindow, 1000, 60'000'000);
  Limit concurrent = Window("conc", Algorithm::kConcurrency, 3, 30'000'000);
  Limit reserved = TokenBucket("tokens", 1000, 10);
  reserved.reservation_ttl_micros = 90'000'000;
  const std::string long_key(300, 'k');
  int compared = 0;
  for (const Limit* limit : {&bucket, &fixed, &sliding, &concurrent, &reserved}) {
    for (ItemOp op : {ItemOp::kCheck, ItemOp::kCharge, ItemOp::kReserve, ItemOp::kSettle,
                      ItemOp::kRelease, ItemOp::kRenew}) {
      for (const std::string& key : {std::string("user-1"), std::string(), long_key}) {
        for (bool shadow : {false, true}) {
          for (std::optional<int64_t> now : {std::optional<int64_t>(), std::optional<int64_t>(0),
                                             std::optional<int64_t>(1'700'000'000'123'456)}) {
            CheckItem item{.limit = limit, .key = key, .cost = 7, .shadow = shadow, .op = op};
            if (op != ItemOp::kCheck || limit == &concurrent) item.id = "0123456789abcdefghijkl";
            const std::string general = redis::CheckCommand("EVALSHA", sha, "tg:", {item}, now);
            EXPECT_EQ(redis::SingleCheckCommand(head, "tg:", item, now), general)
                << limit->name << " op " << static_cast<int>(op) << " key " << key.size()
                << " shadow " << shadow << " now " << now.value_or(-1);
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_EQ(compared, 5 * 6 * 3 * 2 * 3);
  // And the general command is RESP: `*6`, then six bulk strings, the item's key among them.
  CheckItem item{.limit = &bucket, .key = "user-1"};
  EXPECT_THAT(redis::SingleCheckCommand(head, "tg:", item, std::nullopt),
              ::testing::StartsWith("*6\r\n$7\r\nEVALSHA\r\n$40\r\n" + sha +
                                    "\r\n$1\r\n1\r\n$15\r\ntg:api:{user-1}\r\n$0\r\n\r\n$25\r\n"));
}

class RedisStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    store_ = NewStore();
    ASSERT_NE(store_, nullptr);
  }

  std::unique_ptr<RedisStoreImpl> NewStore(RedisConnectionsOptions connection = {},
                                           RedisStoreOptions options = {}) {
    connection.url = server_->url();
    absl::StatusOr<std::unique_ptr<RedisStore>> store =
        testing::ConnectRedisStore(std::move(connection), std::move(options));
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return nullptr;
    return std::unique_ptr<RedisStoreImpl>(static_cast<RedisStoreImpl*>(store->release()));
  }

  RedisReply Redis(const std::vector<std::string>& args) {
    absl::StatusOr<RedisReply> reply = store_->client().Command(args);
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? *reply : RedisReply{};
  }

  int64_t RedisTimeMicros() {
    RedisReply time = Redis({"TIME"});
    int64_t seconds = 0;
    int64_t micros = 0;
    EXPECT_EQ(time.elements.size(), 2u);
    if (time.elements.size() != 2 || !absl::SimpleAtoi(time.elements[0].str, &seconds) ||
        !absl::SimpleAtoi(time.elements[1].str, &micros)) {
      return 0;
    }
    return seconds * 1'000'000 + micros;
  }

  // One random case of the charge and settle tables: a limit (of kind i % 3: token bucket,
  // fixed window, sliding window; named `prefix` + t, f or s + i) and, unless one time in
  // `none_one_in`, a state stored in Redis as check.lua keeps it: a bucket `u` fill times from
  // full, u uniform in [bucket_low, bucket_high); window counts below `window_spread` x max.
  struct RateCase {
    int kind = 0;
    int64_t max = 0;
    double rate = 0;
    int64_t window = 0;
    Limit limit;
    int64_t now = 0;
    int64_t index = 0;
    std::string base;
    algorithm::TokenBucketParams bucket;
    algorithm::WindowParams windowed;
    std::optional<algorithm::TokenBucketState> bucket_state;
    std::optional<algorithm::FixedWindowState> fixed_state;
    std::optional<algorithm::SlidingWindowState> sliding_state;
  };
  RateCase MakeRateCase(std::mt19937_64& random, int i, const char* prefix,
                        const std::vector<double>& rates, const std::vector<int64_t>& windows,
                        const std::vector<int64_t>& maxima, uint64_t none_one_in, double bucket_low,
                        double bucket_high, int64_t window_spread) {
    RateCase c;
    c.kind = i % 3;
    c.max = maxima[random() % maxima.size()];
    c.rate = rates[random() % rates.size()];
    c.window = windows[random() % windows.size()];
    c.limit =
        c.kind == 0 ? TokenBucket(absl::StrCat(prefix, "t", i), c.max, c.rate)
        : c.kind == 1
            ? Window(absl::StrCat(prefix, "f", i), Algorithm::kFixedWindow, c.max, c.window)
            : Window(absl::StrCat(prefix, "s", i), Algorithm::kSlidingWindow, c.max, c.window);
    c.now = 1'700'000'000'000'000 + static_cast<int64_t>(random() % 1'000'000'000'000);
    c.index = algorithm::WindowIndex(c.now, c.window);
    c.base = redis::StateKey("tollgate:", c.limit.name, "k");
    c.bucket = {c.max, c.rate};
    c.windowed = {c.max, c.window};
    if (random() % none_one_in == 0) return c;
    const auto count = [&] {
      return static_cast<int64_t>(random() % static_cast<uint64_t>(window_spread * c.max));
    };
    if (c.kind == 0) {
      const double fill = static_cast<double>(c.max) * 1e6 / c.rate;
      const double u = std::uniform_real_distribution<double>(bucket_low, bucket_high)(random);
      c.bucket_state = algorithm::TokenBucketState{static_cast<double>(c.now) - fill * u};
      std::string stored(8, '\0');
      redis::PutLittleEndianDouble(stored.data(), c.bucket_state->empty_at_micros);
      Redis({"SET", c.base, stored, "PX", "600000"});
    } else if (c.kind == 1) {
      c.fixed_state = algorithm::FixedWindowState{c.index, count()};
      Redis({"SET", absl::StrCat(c.base, ":", c.index), absl::StrCat(c.fixed_state->count), "PX",
             "600000"});
    } else {
      const int64_t current = count();
      const int64_t previous = count();
      c.sliding_state = algorithm::SlidingWindowState{c.index, current, previous};
      Redis({"SET", absl::StrCat(c.base, ":", c.index), absl::StrCat(current), "PX", "600000"});
      Redis(
          {"SET", absl::StrCat(c.base, ":", c.index - 1), absl::StrCat(previous), "PX", "600000"});
    }
    return c;
  }

  std::unique_ptr<RedisServer> server_;
  std::unique_ptr<RedisStoreImpl> store_;
};

// ---- The shared decision table: src/algorithm and check.lua agree bit for bit. ----------

void ExpectSameDecision(const Decision& memory, const Decision& redis, const std::string& what) {
  testing::ExpectSameDecision(memory, redis, what);
  EXPECT_EQ(redis.source, DecisionSource::kRedis) << what;
}

TEST_F(RedisStoreTest, TokenBucketTableMatchesTheAlgorithm) {
  std::mt19937_64 random(20240501);
  const std::vector<double> rates = {0.001, 0.5, 1, 1.0 / 3, 3, 7.25, 10, 123.456, 1000, 1e6};
  const std::vector<int64_t> capacities = {1, 2, 3, 5, 10, 50, 1000};
  const Limit other = TokenBucket("other", 10, 1);
  int checked = 0;
  for (int i = 0; i < 400; ++i) {
    const double rate = rates[random() % rates.size()];
    const int64_t capacity = capacities[random() % capacities.size()];
    const Limit limit = TokenBucket(absl::StrCat("tb", i), capacity, rate);
    const int64_t now = 1'700'000'000'000'000 + static_cast<int64_t>(random() % 1'000'000'000'000);
    const int64_t cost =
        random() % 5 == 0 ? capacity + 1 : static_cast<int64_t>(random() % (capacity + 1));
    std::optional<algorithm::TokenBucketState> state;
    if (random() % 5 != 0) {
      const double fill_time = static_cast<double>(capacity) * 1e6 / rate;
      const double u = std::uniform_real_distribution<double>(-0.2, 1.5)(random);
      state = algorithm::TokenBucketState{static_cast<double>(now) - fill_time * u};
    }
    const std::string key = redis::StateKey("tollgate:", limit.name, "k");
    std::string stored_state(8, '\0');  // as the scripts write it: a little-endian double
    if (state.has_value()) {
      redis::PutLittleEndianDouble(stored_state.data(), state->empty_at_micros);
      Redis({"SET", key, stored_state});
    }

    const algorithm::Outcome<algorithm::TokenBucketState> expected =
        algorithm::TokenBucketCheck(state, now, {capacity, rate}, cost);
    // check.lua has a fast path for one token bucket alone; every other case goes with a
    // peek at a second limit, through the general loop, so both paths meet the table.
    const bool alone = i % 2 == 0;
    std::vector<CheckItem> items = {{&limit, "k", cost}};
    if (!alone) items.push_back({&other, "k", 0});
    absl::StatusOr<std::vector<Decision>> actual = CheckAt(*store_, std::move(items), now);
    ASSERT_TRUE(actual.ok()) << actual.status();
    const std::string what =
        absl::StrCat("case ", i, alone ? " (alone)" : " (with another limit)", ": capacity ",
                     capacity, " rate ", rate, " cost ", cost, " state ",
                     state ? absl::StrFormat("%.17g", state->empty_at_micros) : "none");
    ExpectSameDecision(expected.decision, (*actual)[0], what);

    RedisReply stored = Redis({"GET", key});
    if (expected.changed) {
      ASSERT_EQ(stored.str.size(), 8u) << what;
      EXPECT_EQ(redis::ReadLittleEndianDouble(stored.str.data()), expected.state.empty_at_micros)
          << what;  // bit-identical
      EXPECT_GT(Redis({"PTTL", key}).integer, 0) << what;
      ++checked;
    } else if (state.has_value()) {
      EXPECT_EQ(stored.str, stored_state) << what;
    } else {
      EXPECT_EQ(stored.type, RedisReply::Type::kNil) << what;
    }
  }
  EXPECT_GT(checked, 50);  // the table exercises writes, not only refusals
}

// Versions before the binary encoding stored a bucket's empty-at time as decimal text
// (%.17g). A key they wrote is still read as the same state, so an upgrade does not hand
// every drained bucket a refill; the next write stores it in binary.
TEST_F(RedisStoreTest, ABucketStoredAsDecimalTextIsStillRead) {
  const Limit limit = TokenBucket("api", 10, 1);
  const int64_t now = 1'700'000'000'000'000;
  // Drained: empty 2.5 s ago at 1 token/s, so 2 tokens are back.
  const algorithm::TokenBucketState state{static_cast<double>(now) - 2'500'000};
  const std::string key = redis::StateKey("tollgate:", limit.name, "old");
  Redis({"SET", key, absl::StrFormat("%.17g", state.empty_at_micros), "PX", "60000"});

  for (const bool alone : {true, false}) {  // the script's fast path and its general loop
    const Limit other = TokenBucket("other", 10, 1);
    std::vector<CheckItem> items = {{&limit, "old", 0}};
    if (!alone) items.push_back({&other, "old", 0});
    absl::StatusOr<std::vector<Decision>> peek = CheckAt(*store_, std::move(items), now);
    ASSERT_TRUE(peek.ok()) << peek.status();
    EXPECT_EQ((*peek)[0].remaining, 2) << (alone ? "alone" : "with another limit");
  }
  absl::StatusOr<std::vector<Decision>> spend = CheckAt(*store_, {{&limit, "old", 2}}, now);
  ASSERT_TRUE(spend.ok()) << spend.status();
  EXPECT_TRUE((*spend)[0].allowed);
  EXPECT_EQ((*spend)[0].remaining, 0);
  const std::string stored = Redis({"GET", key}).str;
  ASSERT_EQ(stored.size(), 8u);
  EXPECT_EQ(redis::ReadLittleEndianDouble(stored.data()), state.empty_at_micros + 2'000'000);
}

TEST_F(RedisStoreTest, FixedWindowTableMatchesTheAlgorithm) {
  std::mt19937_64 random(7);
  const std::vector<int64_t> windows = {1, 7, 1000, 1'000'000, 600'000'000, 86'400'000'000};
  const std::vector<int64_t> limits = {1, 2, 3, 10, 100};
  const Limit other = TokenBucket("other", 10, 1);
  for (int i = 0; i < 400; ++i) {
    const int64_t window = windows[random() % windows.size()];
    const int64_t max = limits[random() % limits.size()];
    const Limit limit = Window(absl::StrCat("fw", i), Algorithm::kFixedWindow, max, window);
    const int64_t now = 1'700'000'000'000'000 + static_cast<int64_t>(random() % 1'000'000'000'000);
    const int64_t index = algorithm::WindowIndex(now, window);
    const int64_t cost = static_cast<int64_t>(random() % (max + 2));
    std::optional<algorithm::FixedWindowState> state;
    const std::string base = redis::StateKey("tollgate:", limit.name, "k");
    if (random() % 4 != 0) {
      state = algorithm::FixedWindowState{index - static_cast<int64_t>(random() % 2),
                                          static_cast<int64_t>(random() % (max + 1))};
      // With a TTL, as every counter the scripts create has one (they set it at creation).
      Redis({"SET", absl::StrCat(base, ":", state->window_index), absl::StrCat(state->count), "PX",
             "600000"});
    }
    const auto expected = algorithm::FixedWindowCheck(state, now, {max, window}, cost);
    // check.lua has a fast path for one window limit alone; every other case goes with a
    // peek at a second limit, through the general loop, so both paths meet the table.
    const bool alone = i % 2 == 0;
    std::vector<CheckItem> items = {{&limit, "k", cost}};
    if (!alone) items.push_back({&other, "k", 0});
    absl::StatusOr<std::vector<Decision>> actual = CheckAt(*store_, std::move(items), now);
    ASSERT_TRUE(actual.ok()) << actual.status();
    const std::string what =
        absl::StrCat("case ", i, alone ? " (alone)" : " (with another limit)", ": limit ", max,
                     " window ", window, " cost ", cost, " now ", now);
    ExpectSameDecision(expected.decision, (*actual)[0], what);
    // Redis expires keys in real time while the script's time is pinned: a window key lives
    // only until its window ends, so only check what keys with a second or more left hold.
    if (expected.expires_at_micros - now < 1'000'000) continue;
    RedisReply count = Redis({"GET", absl::StrCat(base, ":", index)});
    if (expected.changed) {
      EXPECT_EQ(count.str, absl::StrCat(expected.state.count)) << what;
      EXPECT_GT(Redis({"PTTL", absl::StrCat(base, ":", index)}).integer, 0) << what;
    } else if (state.has_value() && state->window_index == index) {
      EXPECT_EQ(count.str, absl::StrCat(state->count)) << what;
    } else {
      EXPECT_EQ(count.type, RedisReply::Type::kNil) << what;
    }
  }
}

TEST_F(RedisStoreTest, SlidingWindowTableMatchesTheAlgorithm) {
  std::mt19937_64 random(11);
  const std::vector<int64_t> windows = {1, 7, 1000, 1'000'000, 600'000'000, 86'400'000'000};
  const std::vector<int64_t> limits = {1, 2, 3, 10, 100};
  const Limit other = TokenBucket("other", 10, 1);
  for (int i = 0; i < 400; ++i) {
    const int64_t window = windows[random() % windows.size()];
    const int64_t max = limits[random() % limits.size()];
    const Limit limit = Window(absl::StrCat("sw", i), Algorithm::kSlidingWindow, max, window);
    const int64_t now = 1'700'000'000'000'000 + static_cast<int64_t>(random() % 1'000'000'000'000);
    const int64_t index = algorithm::WindowIndex(now, window);
    const int64_t cost = static_cast<int64_t>(random() % (max + 2));
    std::optional<algorithm::SlidingWindowState> state;
    const std::string base = redis::StateKey("tollgate:", limit.name, "k");
    if (random() % 4 != 0) {
      // Redis keeps one counter per window: the state's current count in its window, its
      // previous count in the window before.
      state = algorithm::SlidingWindowState{index - static_cast<int64_t>(random() % 3),
                                            static_cast<int64_t>(random() % (max + 1)),
                                            static_cast<int64_t>(random() % (max + 1))};
      Redis({"SET", absl::StrCat(base, ":", state->window_index), absl::StrCat(state->current),
             "PX", "600000"});
      Redis({"SET", absl::StrCat(base, ":", state->window_index - 1), absl::StrCat(state->previous),
             "PX", "600000"});
    }
    const auto expected = algorithm::SlidingWindowCheck(state, now, {max, window}, cost);
    const bool alone = i % 2 == 0;  // the fast path and the general loop, as above
    std::vector<CheckItem> items = {{&limit, "k", cost}};
    if (!alone) items.push_back({&other, "k", 0});
    absl::StatusOr<std::vector<Decision>> actual = CheckAt(*store_, std::move(items), now);
    ASSERT_TRUE(actual.ok()) << actual.status();
    const std::string what =
        absl::StrCat("case ", i, alone ? " (alone)" : " (with another limit)", ": limit ", max,
                     " window ", window, " cost ", cost, " now ", now);
    ExpectSameDecision(expected.decision, (*actual)[0], what);
    if (expected.changed && expected.expires_at_micros - now >= 1'000'000) {
      EXPECT_EQ(Redis({"GET", absl::StrCat(base, ":", index)}).str,
                absl::StrCat(expected.state.current))
          << what;
      EXPECT_GT(Redis({"PTTL", absl::StrCat(base, ":", index)}).integer, 0) << what;
    }
  }
}

// Charges (ItemOp::kCharge), and the checks that follow them on a limit in debt: the
// algorithms' Charge functions and check.lua's charge branch, then a check of any cost (a
// peek too) a little later, agree bit for bit, for every algorithm.
TEST_F(RedisStoreTest, ChargeTableMatchesTheAlgorithm) {
  std::mt19937_64 random(20260801);
  const std::vector<double> rates = {0.5, 1.0 / 3, 7.25, 100, 1e4};
  const std::vector<int64_t> windows = {1'000'000, 60'000'000, 86'400'000'000};
  const std::vector<int64_t> maxima = {1, 3, 10, 1000};
  const Limit other = TokenBucket("other", 10, 1);
  int in_debt = 0;
  for (int i = 0; i < 300; ++i) {
    // A state, possibly in debt already (a charge before this one).
    RateCase c = MakeRateCase(random, i, "c", rates, windows, maxima, 4, -2, 1.5, 3);
    [[maybe_unused]] auto& [kind, max, rate, window, limit, now, index, base, bucket, windowed,
                            bucket_state, fixed_state, sliding_state] = c;
    const int64_t charge = static_cast<int64_t>(random() % (3 * max + 1));
    Decision expected;
    int64_t expires_at = 0;
    if (kind == 0) {
      auto out = algorithm::TokenBucketCharge(bucket_state, now, bucket,
                                              algorithm::TokenBucketTimesFor(bucket), charge);
      expected = out.decision;
      expires_at = out.expires_at_micros;
      if (out.changed) bucket_state = out.state;
    } else if (kind == 1) {
      auto out = algorithm::FixedWindowCharge(fixed_state, now, windowed, charge);
      expected = out.decision;
      expires_at = out.expires_at_micros;
      if (out.changed) fixed_state = out.state;
    } else {
      auto out = algorithm::SlidingWindowCharge(sliding_state, now, windowed, charge);
      expected = out.decision;
      expires_at = out.expires_at_micros;
      if (out.changed) sliding_state = out.state;
    }
    CheckItem item{&limit, "k", charge};
    item.op = ItemOp::kCharge;
    std::vector<CheckItem> items = {item};
    if (i % 2 == 1) items.push_back({&other, "k", 0});  // beside a check of another limit
    absl::StatusOr<std::vector<Decision>> actual = CheckAt(*store_, std::move(items), now);
    ASSERT_TRUE(actual.ok()) << actual.status();
    const std::string what = absl::StrCat("case ", i, " kind ", kind, ": max ", max, " rate ", rate,
                                          " window ", window, " charge ", charge);
    ExpectSameDecision(expected, (*actual)[0], what);
    EXPECT_TRUE((*actual)[0].allowed) << what;
    in_debt += expected.debt > 0 ? 1 : 0;
    if (kind == 0 && bucket_state.has_value()) {
      const RedisReply stored = Redis({"GET", base});
      ASSERT_EQ(stored.str.size(), 8u) << what;
      EXPECT_EQ(redis::ReadLittleEndianDouble(stored.str.data()), bucket_state->empty_at_micros)
          << what;
    } else if (kind == 1 && fixed_state.has_value()) {
      EXPECT_EQ(Redis({"GET", absl::StrCat(base, ":", index)}).str,
                absl::StrCat(fixed_state->count))
          << what;
    } else if (kind == 2 && sliding_state.has_value()) {
      EXPECT_EQ(Redis({"GET", absl::StrCat(base, ":", index)}).str,
                absl::StrCat(sliding_state->current))
          << what;
    }
    // Then a check, a little later, of any cost (0: a peek, refused while in debt). A
    // window key lives in Redis' real time only until its window ends: only where it stays.
    if (kind != 0 && expires_at - now < 2'000'000) continue;
    const int64_t later = now + static_cast<int64_t>(random() % 1'000'000);
    const int64_t cost = static_cast<int64_t>(random() % (max + 1));
    const Decision then =
        kind == 0   ? algorithm::TokenBucketCheck(bucket_state, later, bucket, cost).decision
        : kind == 1 ? algorithm::FixedWindowCheck(fixed_state, later, windowed, cost).decision
                    : algorithm::SlidingWindowCheck(sliding_state, later, windowed, cost).decision;
    std::vector<CheckItem> checks = {{&limit, "k", cost}};
    if (i % 4 < 2) checks.push_back({&other, "k", 0});  // the general loop, else the fast path
    absl::StatusOr<std::vector<Decision>> checked = CheckAt(*store_, std::move(checks), later);
    ASSERT_TRUE(checked.ok()) << checked.status();
    ExpectSameDecision(then, (*checked)[0], absl::StrCat(what, ", then a check of ", cost));
  }
  EXPECT_GT(in_debt, 30);  // the table puts limits in debt, not only within them
}

// Settles (ItemOp::kSettle) of a reservation recorded as check.lua records it: the
// algorithms' Settle functions (a refund into the reservation's window, or a charge of the
// extra) and check.lua's settle branch agree bit for bit; the record then says settled, so a
// second settle changes nothing (kAlreadySettled), and an id without a record is kNotFound.
TEST_F(RedisStoreTest, SettleTableMatchesTheAlgorithm) {
  std::mt19937_64 random(20260802);
  const std::vector<double> rates = {0.5, 7.25, 100, 1e4};
  const std::vector<int64_t> windows = {1'000'000, 60'000'000, 86'400'000'000};
  const std::vector<int64_t> maxima = {1, 3, 10, 1000};
  int refunded = 0;
  for (int i = 0; i < 300; ++i) {
    RateCase c = MakeRateCase(random, i, "s", rates, windows, maxima, 5, -1, 1.2, 2);
    [[maybe_unused]] auto& [kind, max, rate, window, limit, now, index, base, bucket, windowed,
                            bucket_state, fixed_state, sliding_state] = c;
    // A reservation taken in this window, the one before, or earlier.
    const int64_t reserved = static_cast<int64_t>(random() % (2 * max + 1));
    const int64_t at = now - static_cast<int64_t>(random() % static_cast<uint64_t>(3 * window));
    const std::string id = absl::StrCat("reservation", i);
    std::string record(17, '\0');
    record[0] = 'r';
    redis::PutLittleEndianDouble(record.data() + 1, static_cast<double>(reserved));
    redis::PutLittleEndianDouble(record.data() + 9, static_cast<double>(at));
    Redis({"SET", absl::StrCat(base, ":r:", id), record, "PX", "600000"});

    const int64_t cost = static_cast<int64_t>(random() % (3 * max + 1));
    Decision expected;
    Decision peek_after;  // what a second settle answers (as a peek at the settled state)
    if (kind == 0) {
      const auto times = algorithm::TokenBucketTimesFor(bucket);
      auto out = algorithm::TokenBucketSettle(bucket_state, now, bucket, times, reserved, cost);
      expected = out.decision;
      if (out.changed) bucket_state = out.state;
      peek_after = algorithm::TokenBucketCheck(bucket_state, now, bucket, times, 0).decision;
      refunded += cost < reserved && out.changed ? 1 : 0;
    } else if (kind == 1) {
      auto out = algorithm::FixedWindowSettle(fixed_state, now, windowed, reserved, at, cost);
      expected = out.decision;
      if (out.changed) fixed_state = out.state;
      peek_after = algorithm::FixedWindowCheck(fixed_state, now, windowed, 0).decision;
      refunded += cost < reserved && out.changed ? 1 : 0;
    } else {
      auto out = algorithm::SlidingWindowSettle(sliding_state, now, windowed, reserved, at, cost);
      expected = out.decision;
      if (out.changed) sliding_state = out.state;
      peek_after = algorithm::SlidingWindowCheck(sliding_state, now, windowed, 0).decision;
      refunded += cost < reserved && out.changed ? 1 : 0;
    }
    CheckItem item{&limit, "k", cost};
    item.op = ItemOp::kSettle;
    item.id = id;
    const std::string what =
        absl::StrCat("case ", i, " kind ", kind, ": max ", max, " rate ", rate, " window ", window,
                     " reserved ", reserved, " at -", now - at, " cost ", cost);
    absl::StatusOr<std::vector<Decision>> actual = CheckAt(*store_, {item}, now);
    ASSERT_TRUE(actual.ok()) << actual.status();
    ExpectSameDecision(expected, (*actual)[0], what);
    EXPECT_TRUE((*actual)[0].allowed) << what;
    if (kind == 0 && bucket_state.has_value()) {
      const RedisReply stored = Redis({"GET", base});
      ASSERT_EQ(stored.str.size(), 8u) << what;
      EXPECT_EQ(redis::ReadLittleEndianDouble(stored.str.data()), bucket_state->empty_at_micros)
          << what;
    } else if (kind == 1 && fixed_state.has_value() && fixed_state->window_index == index) {
      EXPECT_EQ(Redis({"GET", absl::StrCat(base, ":", index)}).str,
                absl::StrCat(fixed_state->count))
          << what;
    } else if (kind == 2 && sliding_state.has_value()) {
      EXPECT_EQ(Redis({"GET", absl::StrCat(base, ":", index)}).str,
                absl::StrCat(sliding_state->current))
          << what;
    }
    // Settled once: a second settle changes nothing and says so.
    Decision again = peek_after;
    again.allowed = false;
    again.reason = DenyReason::kAlreadySettled;
    absl::StatusOr<std::vector<Decision>> second = CheckAt(*store_, {item}, now);
    ASSERT_TRUE(second.ok()) << second.status();
    ExpectSameDecision(again, (*second)[0], absl::StrCat(what, ", settled again"));
    // An id the store never recorded is not found.
    item.id = absl::StrCat("forged", i);
    Decision forged = peek_after;
    forged.allowed = false;
    forged.reason = DenyReason::kNotFound;
    absl::StatusOr<std::vector<Decision>> unknown = CheckAt(*store_, {item}, now);
    ASSERT_TRUE(unknown.ok()) << unknown.status();
    ExpectSameDecision(forged, (*unknown)[0], absl::StrCat(what, ", forged"));
  }
  EXPECT_GT(refunded, 25);  // the table refunds into live windows, not only charges
}

// A concurrency limit's leases: acquires, peeks, releases and renewals of leases held,
// expired or unknown, against src/algorithm/concurrency.h; the decisions and the sorted set
// left behind agree, alone and beside another item.
TEST_F(RedisStoreTest, ConcurrencyTableMatchesTheAlgorithm) {
  std::mt19937_64 random(20260803);
  const Limit other = TokenBucket("other", 10, 1);
  int taken = 0;
  int refused = 0;
  for (int i = 0; i < 300; ++i) {
    const int64_t max = 1 + static_cast<int64_t>(random() % 5);
    const int64_t lease = 1'000'000 * (1 + static_cast<int64_t>(random() % 60));
    Limit limit = Window(absl::StrCat("cc", i), Algorithm::kConcurrency, max, lease);
    const int64_t now = 1'700'000'000'000'000 + static_cast<int64_t>(random() % 1'000'000'000'000);
    const std::string set = absl::StrCat(redis::StateKey("tollgate:", limit.name, "k"), ":l");
    std::optional<algorithm::ConcurrencyState> state;
    const int held = static_cast<int>(random() % static_cast<uint64_t>(max + 3));
    if (held > 0) {
      state.emplace();
      for (int j = 0; j < held; ++j) {
        algorithm::HeldLease lease_held{
            now - lease + static_cast<int64_t>(random() % static_cast<uint64_t>(2 * lease)),
            absl::StrCat("lease", random() % 1000)};
        if (std::any_of(state->leases.begin(), state->leases.end(),
                        [&](const auto& l) { return l.id == lease_held.id; })) {
          continue;
        }
        Redis({"ZADD", set, absl::StrCat(lease_held.expires_at_micros), lease_held.id});
        state->leases.push_back(lease_held);
      }
      std::sort(state->leases.begin(), state->leases.end(), algorithm::internal::Earlier);
      Redis({"PEXPIRE", set, "600000"});
    }
    const algorithm::ConcurrencyParams params{max, lease};
    // An id the set holds (live or expired), or one it does not.
    std::string id = absl::StrCat("new", i);
    if (state.has_value() && random() % 3 != 0) {
      id = state->leases[random() % state->leases.size()].id;
    }
    CheckItem item{&limit, "k", 1};
    algorithm::Outcome<algorithm::ConcurrencyState> expected;
    switch (random() % 4) {
      case 0:  // acquire; now and then a look with an id (cost 0) or a cost a lease refuses
        item.id = absl::StrCat("new", i);
        if (random() % 6 == 0) item.cost = random() % 2 == 0 ? 0 : 2;
        expected = algorithm::ConcurrencyAcquire(state, now, params, item.id, item.cost);
        taken += expected.decision.allowed ? 1 : 0;
        refused += expected.decision.allowed ? 0 : 1;
        break;
      case 1:  // peek
        item.cost = 0;
        expected = algorithm::ConcurrencyAcquire(state, now, params, "", 0);
        break;
      case 2:
        item.op = ItemOp::kRelease;
        item.id = id;
        expected = algorithm::ConcurrencyRelease(state, now, params, id);
        break;
      default:
        item.op = ItemOp::kRenew;
        item.id = id;
        expected = algorithm::ConcurrencyRenew(state, now, params, id);
        break;
    }
    std::vector<CheckItem> items = {item};
    if (i % 2 == 1) items.push_back({&other, "k", 0});
    const std::string what =
        absl::StrCat("case ", i, ": limit ", max, " lease ", lease, " held ", held, " op ",
                     static_cast<int>(item.op), " cost ", item.cost, " id ", item.id);
    absl::StatusOr<std::vector<Decision>> actual = CheckAt(*store_, std::move(items), now);
    ASSERT_TRUE(actual.ok()) << actual.status() << " " << what;
    ExpectSameDecision(expected.decision, (*actual)[0], what);
    // The set now: the live leases the algorithm keeps, in the same order.
    const RedisReply members = Redis({"ZRANGE", set, "0", "-1", "WITHSCORES"});
    std::vector<algorithm::HeldLease> stored;
    for (size_t m = 0; m + 1 < members.elements.size(); m += 2) {
      int64_t score = 0;
      ASSERT_TRUE(absl::SimpleAtoi(members.elements[m + 1].str, &score)) << what;
      stored.push_back({score, members.elements[m].str});
    }
    EXPECT_EQ(stored, expected.state.leases) << what;
    if (!stored.empty()) {
      EXPECT_GT(Redis({"PTTL", set}).integer, 0) << what;
    }
  }
  EXPECT_GT(taken, 20);
  EXPECT_GT(refused, 10);
}

// ---- Behaviour. --------------------------------------------------------------------------

TEST_F(RedisStoreTest, KeysFollowTheDocumentedLayoutAndCarryTtls) {
  const Limit bucket = TokenBucket("api", 5, 1);
  const Limit otp = Window("otp", Algorithm::kFixedWindow, 3, 600'000'000);
  const Limit sliding = Window("search", Algorithm::kSlidingWindow, 3, 60'000'000);
  const int64_t now = 1'700'000'123'456'789;
  absl::StatusOr<std::vector<Decision>> decisions =
      CheckAt(*store_, {{&bucket, "user:42"}, {&otp, "user:42"}, {&sliding, "user:42"}}, now);
  ASSERT_TRUE(decisions.ok()) << decisions.status();
  EXPECT_TRUE((*decisions)[0].allowed && (*decisions)[1].allowed && (*decisions)[2].allowed);

  RedisReply keys = Redis({"KEYS", "*"});
  std::vector<std::string> names;
  for (const RedisReply& key : keys.elements) names.push_back(key.str);
  EXPECT_THAT(names, ::testing::UnorderedElementsAre(
                         "tollgate:api:{user:42}",
                         absl::StrCat("tollgate:otp:{user:42}:", now / 600'000'000),
                         absl::StrCat("tollgate:search:{user:42}:", now / 60'000'000)));
  for (const std::string& name : names) EXPECT_GT(Redis({"PTTL", name}).integer, 0) << name;
  // Token bucket: expires once full again (1 token at 1/s = 1 s) plus a second of margin.
  EXPECT_LE(Redis({"PTTL", "tollgate:api:{user:42}"}).integer, 2000);
}

// A reservation is one record beside its limit's state, in the same hash slot, with the
// limit's reservation_ttl from the same step: unsettled, it stays charged and is forgotten
// when the record expires; settled, the record stays (as settled) until then.
TEST_F(RedisStoreTest, AReservationIsARecordForgottenAfterItsTtl) {
  Limit tokens = TokenBucket("tokens", 1000, 1);
  tokens.reservation_ttl_micros = 90'000'000;
  CheckItem reserve{&tokens, "tenant:7", 300};
  reserve.op = ItemOp::kReserve;
  reserve.id = "AAAAAAAAAAAAAAAAAAAAAA";
  absl::StatusOr<std::vector<Decision>> reserved = store_->Apply({reserve});
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  ASSERT_TRUE((*reserved)[0].allowed);
  const std::string record = "tollgate:tokens:{tenant:7}:r:AAAAAAAAAAAAAAAAAAAAAA";
  EXPECT_EQ(redis::KeySlot(record), redis::KeySlot("tollgate:tokens:{tenant:7}"));
  const RedisReply value = Redis({"GET", record});
  ASSERT_EQ(value.str.size(), 17u);
  EXPECT_EQ(value.str[0], 'r');
  EXPECT_EQ(redis::ReadLittleEndianDouble(value.str.data() + 1), 300.0);
  const int64_t ttl = Redis({"PTTL", record}).integer;
  EXPECT_GT(ttl, 80'000);
  EXPECT_LE(ttl, 90'000);
  // Settled, the record says so and keeps its TTL.
  CheckItem settle = reserve;
  settle.op = ItemOp::kSettle;
  settle.cost = 100;
  ASSERT_TRUE(store_->Apply({settle}).ok());
  EXPECT_EQ(Redis({"GET", record}).str[0], 's');
  EXPECT_GT(Redis({"PTTL", record}).integer, 80'000);
  // Forgotten: a settle finds nothing, and what was charged stays.
  Redis({"DEL", record});
  absl::StatusOr<std::vector<Decision>> late = store_->Apply({settle});
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ((*late)[0].reason, DenyReason::kNotFound);
  EXPECT_EQ((*late)[0].remaining, 900);
}

TEST_F(RedisStoreTest, ConfigurablePrefix) {
  RedisStoreOptions options;
  options.key_prefix = "rl/";
  std::unique_ptr<RedisStoreImpl> store = NewStore({}, options);
  ASSERT_NE(store, nullptr);
  const Limit bucket = TokenBucket("api", 5, 1);
  ASSERT_TRUE(store->Apply({{&bucket, "u"}}).ok());
  EXPECT_EQ(Redis({"EXISTS", "rl/api:{u}"}).integer, 1);
}

TEST_F(RedisStoreTest, SeveralLimitsAreAllOrNothing) {
  const Limit bucket = TokenBucket("api", 5, 0.001);
  const Limit otp = Window("otp", Algorithm::kFixedWindow, 1, 600'000'000);
  // Spend the OTP limit alone.
  absl::StatusOr<std::vector<Decision>> first = store_->Apply({{&otp, "p"}});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)[0].allowed);

  // Together: the bucket alone would pass, the window refuses, so nothing is consumed.
  absl::StatusOr<std::vector<Decision>> both = store_->Apply({{&bucket, "p"}, {&otp, "p"}});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_TRUE((*both)[0].allowed);
  EXPECT_EQ((*both)[0].remaining, 5);  // a refusal charges nothing: what it really has
  EXPECT_FALSE((*both)[1].allowed);
  EXPECT_EQ((*both)[1].reason, DenyReason::kOverLimit);
  EXPECT_EQ(Redis({"EXISTS", "tollgate:api:{p}"}).integer, 0);  // bucket untouched: still full

  // Five more batches of the bucket alone all pass: none of its tokens was spent above.
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<std::vector<Decision>> alone = store_->Apply({{&bucket, "p"}});
    ASSERT_TRUE(alone.ok());
    EXPECT_TRUE((*alone)[0].allowed) << i;
  }
}

TEST_F(RedisStoreTest, SameKeyTwiceInOneCallSeesItsOwnFirstUse) {
  const Limit bucket = TokenBucket("api", 1, 0.001);
  absl::StatusOr<std::vector<Decision>> decisions = store_->Apply({{&bucket, "u"}, {&bucket, "u"}});
  ASSERT_TRUE(decisions.ok()) << decisions.status();
  EXPECT_TRUE((*decisions)[0].allowed);
  EXPECT_FALSE((*decisions)[1].allowed);
  // Refused as a whole: the one token is still there.
  absl::StatusOr<std::vector<Decision>> again = store_->Apply({{&bucket, "u"}});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)[0].allowed);
}

TEST_F(RedisStoreTest, TimeComesFromRedisNotTheCaller) {
  const Limit bucket = TokenBucket("api", 5, 1);
  const int64_t before = RedisTimeMicros();
  std::promise<absl::StatusOr<RedisReply>> promise;
  store_->EvalCheckAsync(
      {{&bucket, "u"}}, std::nullopt,
      [&](const absl::StatusOr<RedisReply>& reply) { promise.set_value(reply); });
  absl::StatusOr<RedisReply> reply = promise.get_future().get();
  const int64_t after = RedisTimeMicros();
  ASSERT_TRUE(reply.ok()) << reply.status();
  int64_t script_now = 0;
  ASSERT_TRUE(redis::ParseCheckReply(*reply, {{&bucket, "u"}}, &script_now).ok())
      << redis::DebugString(*reply);
  // The script's time is Redis TIME, between two TIME calls around it. No app-server clock
  // takes part, so servers whose clocks differ by seconds see the same refills.
  EXPECT_GE(script_now, before);
  EXPECT_LE(script_now, after);

  // Two stores (two app servers) spend one shared bucket.
  std::unique_ptr<RedisStoreImpl> other = NewStore();
  ASSERT_NE(other, nullptr);
  int allowed = 0;
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<std::vector<Decision>> d = (i % 2 ? *other : *store_).Apply({{&bucket, "v"}});
    ASSERT_TRUE(d.ok());
    allowed += (*d)[0].allowed;
  }
  EXPECT_GE(allowed, 5);
  EXPECT_LE(allowed, 6);  // at most one refill at 1/s during the loop
}

TEST_F(RedisStoreTest, IdleKeysVanishAfterTheirRefillTime) {
  // Capacity 2 at 10/s: full again 200 ms after the last use; the key goes 1 s after that.
  const Limit bucket = TokenBucket("api", 2, 10);
  ASSERT_TRUE(store_->Apply({{&bucket, "idle"}, {&bucket, "idle"}}).ok());
  ASSERT_EQ(Redis({"EXISTS", "tollgate:api:{idle}"}).integer, 1);
  EXPECT_LE(Redis({"PTTL", "tollgate:api:{idle}"}).integer, 1200);
  // Redis expires keys in real time: the one bounded wait of this file.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (Redis({"EXISTS", "tollgate:api:{idle}"}).integer == 1 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(Redis({"EXISTS", "tollgate:api:{idle}"}).integer, 0);
  // A missing key is a full bucket.
  absl::StatusOr<std::vector<Decision>> d = store_->Apply({{&bucket, "idle", 2}});
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE((*d)[0].allowed);
}

TEST_F(RedisStoreTest, ScriptFlushIsInvisibleToCallers) {
  const Limit bucket = TokenBucket("api", 1000, 1000);
  // Leases go through their own script (lease.lua), which a flush loses too.
  const Limit slots = Window("slots", Algorithm::kConcurrency, 1, 60'000'000);
  for (int i = 0; i < 200; ++i) {
    if (i == 50 || i == 120) {
      EXPECT_EQ(Redis({"SCRIPT", "FLUSH"}).str, "OK");
    }
    absl::StatusOr<std::vector<Decision>> d = store_->Apply({{&bucket, "u"}});
    ASSERT_TRUE(d.ok()) << "check " << i << ": " << d.status();
    EXPECT_TRUE((*d)[0].allowed);
    if (i == 50 || i == 51 || i == 120) {
      CheckItem take{&slots, "u", 1};
      take.id = absl::StrCat("lease", i);
      CheckItem give_back = take;
      give_back.op = ItemOp::kRelease;
      for (const CheckItem& item : {take, give_back}) {
        absl::StatusOr<std::vector<Decision>> lease = store_->Apply({item});
        ASSERT_TRUE(lease.ok()) << "lease " << i << ": " << lease.status();
        EXPECT_TRUE((*lease)[0].allowed) << "lease " << i;
      }
    }
  }
}

TEST_F(RedisStoreTest, SurvivesARedisRestart) {
  std::unique_ptr<RedisStoreImpl> store =
      NewStore({.reconnect_min_ms = 10, .reconnect_max_ms = 100});
  ASSERT_NE(store, nullptr);
  const Limit bucket = TokenBucket("api", 1000, 1000);
  ASSERT_TRUE(store->Apply({{&bucket, "u"}}).ok());

  server_->Kill();
  // While Redis is down, checks fail at once with Unavailable; none hangs.
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<std::vector<Decision>> d = store->Apply({{&bucket, "u"}});
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), absl::StatusCode::kUnavailable) << d.status();
  }
  ASSERT_TRUE(server_->Restart().ok());
  // The restarted Redis has no scripts: the first EVALSHA meets NOSCRIPT and is retried.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  absl::StatusOr<std::vector<Decision>> d = absl::UnavailableError("not yet");
  while (!d.ok() && std::chrono::steady_clock::now() < deadline) {
    d = store->Apply({{&bucket, "u"}});
    if (!d.ok()) {
      EXPECT_EQ(d.status().code(), absl::StatusCode::kUnavailable) << d.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE((*d)[0].allowed);
  // Once reconnected, every connection of the pool serves checks without an error.
  while (store->client().ReadyConnections() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int i = 0; i < 50; ++i) {
    absl::StatusOr<std::vector<Decision>> again = store->Apply({{&bucket, "u"}});
    ASSERT_TRUE(again.ok()) << again.status();
  }
}

TEST_F(RedisStoreTest, AStalledRedisFailsPendingChecksInsteadOfHanging) {
  std::unique_ptr<RedisStoreImpl> store =
      NewStore({.reply_timeout_ms = 200, .reconnect_min_ms = 10, .reconnect_max_ms = 50});
  ASSERT_NE(store, nullptr);
  const Limit bucket = TokenBucket("api", 1000, 1000);
  ASSERT_TRUE(store->Apply({{&bucket, "u"}}).ok());

  server_->Pause();
  std::vector<std::future<absl::StatusOr<std::vector<Decision>>>> pending;
  for (int i = 0; i < 8; ++i) {
    pending.push_back(std::async(std::launch::async, [&] {
      return store->Apply({{&bucket, "u"}});
    }));
  }
  for (auto& future : pending) {
    ASSERT_EQ(future.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    absl::StatusOr<std::vector<Decision>> d = future.get();
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), absl::StatusCode::kUnavailable) << d.status();
  }
  server_->Resume();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  absl::StatusOr<std::vector<Decision>> d = absl::UnavailableError("not yet");
  while (!d.ok() && std::chrono::steady_clock::now() < deadline) {
    d = store->Apply({{&bucket, "u"}});
    if (!d.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(d.ok()) << d.status();
}

TEST_F(RedisStoreTest, WarnsWhenRedisCanEvictLimitKeys) {
  EXPECT_THAT(store_->warnings(), ::testing::IsEmpty());  // redis-server's noeviction default
  Redis({"CONFIG", "SET", "maxmemory", "100mb"});
  Redis({"CONFIG", "SET", "maxmemory-policy", "volatile-lru"});
  std::unique_ptr<RedisStoreImpl> store = NewStore();
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(store->warnings().size(), 1u);
  EXPECT_THAT(store->warnings()[0], HasSubstr("maxmemory-policy is volatile-lru"));
}

TEST_F(RedisStoreTest, SelectsTheDatabaseOfTheUrl) {
  const std::string url = server_->url() + "/5";
  absl::StatusOr<std::unique_ptr<RedisStore>> store = testing::ConnectRedisStore({.url = url});
  ASSERT_TRUE(store.ok()) << store.status();
  const Limit bucket = TokenBucket("api", 5, 1);
  ASSERT_TRUE((*store)->Apply({{&bucket, "u"}}).ok());
  EXPECT_EQ(Redis({"EXISTS", "tollgate:api:{u}"}).integer, 0);  // not in db 0
  redis::ClientOptions db5_options;
  db5_options.connection.url = *redis::ParseRedisUrl(url);
  db5_options.connections = 1;
  absl::StatusOr<std::unique_ptr<redis::RedisClient>> db5 =
      redis::RedisClient::Connect(db5_options);
  ASSERT_TRUE(db5.ok()) << db5.status();
  EXPECT_EQ((*db5)->Command({"EXISTS", "tollgate:api:{u}"})->integer, 1);
}

TEST(RedisStoreCreateTest, ClearErrors) {
  // Nothing listens.
  absl::StatusOr<std::unique_ptr<RedisStore>> store =
      testing::ConnectRedisStore({.url = absl::StrCat("redis://127.0.0.1:", testing::FreePort())});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable) << store.status();

  EXPECT_EQ(testing::ConnectRedisStore({.url = "http://127.0.0.1:6379"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // No URL, or no connections at all.
  EXPECT_EQ(RedisConnections::Connect({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RedisStore::Create({}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RedisStoreAuthTest, PasswordAndAclUser) {
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start(
      {"--requirepass", "s3cret", "--user", "limiter", "on", ">pw", "~tollgate:*", "+@all"});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());
  const Limit bucket = TokenBucket("api", 5, 1);

  absl::StatusOr<std::unique_ptr<RedisStore>> none =
      testing::ConnectRedisStore({.url = "redis://" + address});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kPermissionDenied) << none.status();

  absl::StatusOr<std::unique_ptr<RedisStore>> wrong =
      testing::ConnectRedisStore({.url = "redis://:wrong@" + address});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kPermissionDenied) << wrong.status();
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("AUTH"));
  EXPECT_THAT(std::string(wrong.status().message()), ::testing::Not(HasSubstr("wrong")));

  absl::StatusOr<std::unique_ptr<RedisStore>> password =
      testing::ConnectRedisStore({.url = "redis://:s3cret@" + address});
  ASSERT_TRUE(password.ok()) << password.status();
  EXPECT_TRUE((*password)->Apply({{&bucket, "u"}}).ok());

  absl::StatusOr<std::unique_ptr<RedisStore>> acl =
      testing::ConnectRedisStore({.url = "redis://limiter:pw@" + address});
  ASSERT_TRUE(acl.ok()) << acl.status();
  absl::StatusOr<std::vector<Decision>> d = (*acl)->Apply({{&bucket, "u"}});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE((*d)[0].allowed);
}

}  // namespace
}  // namespace tollgate
