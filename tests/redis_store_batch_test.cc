// Copyright tollgate authors. RedisStore's batches against real redis-servers: the requests of
// one flush go to Redis in one script call (per hash slot), each decided in turn and answered
// on its own.
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/redis/redis_store_impl.h"
#include "tests/support/limits.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_stores.h"
#include "tollgate/resilience.h"

namespace tollgate {
namespace {

using redis::RedisStoreImpl;
using redis::ScriptRequest;
using ::testing::HasSubstr;
using testing::TokenBucket;
using testing::Window;

using Answer = absl::StatusOr<std::vector<Decision>>;

// Script calls (EVALSHA and EVAL) the Redis at `port` has run so far, less those that failed
// (a NOSCRIPT, which the store follows with an EVAL).
int64_t ScriptCalls(int port) {
  absl::StatusOr<redis::RedisReply> stats = testing::RedisCommand(port, {"INFO", "commandstats"});
  EXPECT_TRUE(stats.ok()) << stats.status();
  int64_t calls = 0;
  if (!stats.ok()) return calls;
  for (absl::string_view line : absl::StrSplit(stats->str, "\r\n")) {
    if (!absl::ConsumePrefix(&line, "cmdstat_evalsha:") &&
        !absl::ConsumePrefix(&line, "cmdstat_eval:")) {
      continue;
    }
    for (absl::string_view field : absl::StrSplit(line, ',')) {
      std::pair<absl::string_view, absl::string_view> named = absl::StrSplit(field, '=');
      int64_t n = 0;
      if (named.first == "calls" && absl::SimpleAtoi(named.second, &n)) calls += n;
      if (named.first == "failed_calls" && absl::SimpleAtoi(named.second, &n)) calls -= n;
    }
  }
  return calls;
}

// Answers to a known number of requests, from any thread.
class Answers {
 public:
  explicit Answers(size_t n) : promises_(n) {
    for (auto& promise : promises_) futures_.push_back(promise.get_future());
  }
  CheckCallback To(size_t i) {
    return [this, i](Answer answer) { promises_[i].set_value(std::move(answer)); };
  }
  Answer Get(size_t i) { return futures_[i].get(); }

 private:
  std::vector<std::promise<Answer>> promises_;
  std::vector<std::future<Answer>> futures_;
};

std::vector<ScriptRequest> Requests(std::vector<std::vector<CheckItem>> items, Answers& answers) {
  std::vector<ScriptRequest> requests(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    requests[i].items = std::move(items[i]);
    requests[i].done = answers.To(i);
  }
  return requests;
}

// Runs `task` on the store's I/O thread, outside any I/O handler, and waits for it to run:
// the requests it makes join one flush, sent when it returns.
void OnIoThread(RedisStoreImpl& store, absl::AnyInvocable<void() &&> task) {
  std::promise<void> ran;
  store.client().Post([&ran, task = std::move(task)]() mutable {
    std::move(task)();
    ran.set_value();
  });
  ran.get_future().wait();
}

class RedisStoreBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<testing::RedisServer>> server = testing::RedisServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    absl::StatusOr<std::unique_ptr<RedisStore>> store =
        testing::ConnectRedisStore({.url = server_->url()});
    ASSERT_TRUE(store.ok()) << store.status();
    store_.reset(static_cast<RedisStoreImpl*>(store->release()));
  }

  redis::RedisReply Redis(const std::vector<std::string>& args) {
    absl::StatusOr<redis::RedisReply> reply = store_->client().Command(args);
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? *reply : redis::RedisReply{};
  }
  int64_t Calls() { return ScriptCalls(server_->port()); }

  std::unique_ptr<testing::RedisServer> server_;
  std::unique_ptr<RedisStoreImpl> store_;
};

// Requests in one call are decided in order, each all or nothing: a refused one consumes
// nothing from any of its limits, so the requests after it still find what it left.
TEST_F(RedisStoreBatchTest, RefusedRequestsInACallConsumeNothing) {
  const Limit bucket = TokenBucket("api", 3, 0.001);
  const Limit otp = Window("otp", Algorithm::kFixedWindow, 1, 600'000'000);
  ASSERT_TRUE(store_->Apply({{&otp, "u"}}).ok());  // spent: a later check of it is refused
  Answers answers(6);
  const int64_t calls = Calls();
  store_->FlushAsync(Requests({{{&bucket, "u", 2}},                  // 3 -> 1
                               {{&bucket, "u", 2}},                  // refused: 1 left
                               {{&bucket, "u", 1}, {&otp, "u", 1}},  // refused by otp
                               {{&bucket, "u", 1}},                  // 1 -> 0
                               {{&bucket, "u", 1}},                  // refused: empty
                               {{&bucket, "v", 3}}},                 // another key: 3 -> 0
                              answers),
                     std::nullopt);
  std::vector<Answer> got;
  for (size_t i = 0; i < 6; ++i) {
    got.push_back(answers.Get(i));
    ASSERT_TRUE(got.back().ok()) << i << ": " << got.back().status();
  }
  EXPECT_EQ(Calls() - calls, 1);  // one script call for the six requests
  EXPECT_TRUE((*got[0])[0].allowed);
  EXPECT_EQ((*got[0])[0].remaining, 1);
  EXPECT_FALSE((*got[1])[0].allowed);
  EXPECT_EQ((*got[1])[0].reason, DenyReason::kOverLimit);
  EXPECT_TRUE((*got[2])[0].allowed);     // the bucket alone would pass,
  EXPECT_EQ((*got[2])[0].remaining, 1);  // and keeps its token
  EXPECT_FALSE((*got[2])[1].allowed);    // the window refuses the request
  EXPECT_TRUE((*got[3])[0].allowed);
  EXPECT_EQ((*got[3])[0].remaining, 0);
  EXPECT_FALSE((*got[4])[0].allowed);
  EXPECT_TRUE((*got[5])[0].allowed);
  EXPECT_EQ((*got[5])[0].remaining, 0);
  // What Redis holds agrees: no token left for u.
  absl::StatusOr<std::vector<Decision>> peek = store_->Apply({{&bucket, "u", 0}});
  ASSERT_TRUE(peek.ok()) << peek.status();
  EXPECT_EQ((*peek)[0].remaining, 0);
}

// Bad state under one request's keys (a counter holding text, a bucket key of another type)
// fails that request alone; the others in the same call are decided and applied.
TEST_F(RedisStoreBatchTest, ABadRequestFailsAlone) {
  const Limit bucket = TokenBucket("api", 10, 0.001);
  const Limit fixed = Window("per-hour", Algorithm::kFixedWindow, 5, 3'600'000'000);
  const int64_t index = SystemClock().NowMicros() / 3'600'000'000;
  Redis({"SET", absl::StrCat("tollgate:per-hour:{bad}:", index), "abc", "PX", "600000"});
  Redis({"HSET", "tollgate:api:{hash}", "f", "v"});
  CheckItem charge{&bucket, "hash", 2};
  charge.op = ItemOp::kCharge;
  Answers answers(5);
  const int64_t calls = Calls();
  store_->FlushAsync(Requests({{{&bucket, "a"}},
                               {{&fixed, "bad"}},  // a plain check on a counter of text
                               {{&fixed, "good"}},
                               {charge},  // the general path, on a hash
                               {{&bucket, "a", 2}}},
                              answers),
                     std::nullopt);
  const Answer counter = answers.Get(1);
  ASSERT_FALSE(counter.ok());
  EXPECT_EQ(counter.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(counter.status().message()), HasSubstr("holds no count"));
  const Answer wrong_type = answers.Get(3);
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_THAT(std::string(wrong_type.status().message()), HasSubstr("WRONGTYPE"));
  for (size_t i : {0, 2, 4}) {
    const Answer good = answers.Get(i);
    ASSERT_TRUE(good.ok()) << i << ": " << good.status();
    EXPECT_TRUE((*good)[0].allowed) << i;
  }
  EXPECT_EQ(Calls() - calls, 1);
  EXPECT_EQ(Redis({"GET", absl::StrCat("tollgate:per-hour:{good}:", index)}).str, "1");
  absl::StatusOr<std::vector<Decision>> left = store_->Apply({{&bucket, "a", 0}});
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ((*left)[0].remaining, 7);  // both checks of "a" applied: 10 - 1 - 2

  // Bad input fails before Redis, alone too.
  absl::StatusOr<std::vector<Decision>> negative = store_->Apply({{&bucket, "a", -1}});
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(negative.status().message()), HasSubstr("limit 'api'"));
}

// The same where every request is plain checks and no key comes twice (check.lua's batch of
// distinct keys): a request on a counter of text fails alone, and its other items write
// nothing; the others are decided and applied.
TEST_F(RedisStoreBatchTest, ABadRequestFailsAloneWhereNoKeyComesTwice) {
  const Limit bucket = TokenBucket("api", 10, 0.001);
  const Limit fixed = Window("per-hour", Algorithm::kFixedWindow, 5, 3'600'000'000);
  const Limit sliding = Window("sliding", Algorithm::kSlidingWindow, 5, 3'600'000'000);
  const int64_t index = SystemClock().NowMicros() / 3'600'000'000;
  Redis({"SET", absl::StrCat("tollgate:per-hour:{bad}:", index), "abc", "PX", "600000"});
  Redis({"SET", absl::StrCat("tollgate:sliding:{old}:", index - 1), "1.5", "PX", "600000"});
  Answers answers(5);
  const int64_t calls = Calls();
  store_->FlushAsync(Requests({{{&bucket, "a"}},
                               {{&fixed, "bad"}},                   // a run's request
                               {{&bucket, "b"}, {&fixed, "bad2"}},  // fine alone
                               {{&bucket, "c"}, {&sliding, "old"}},
                               {{&sliding, "good"}}},
                              answers),
                     std::nullopt);
  const Answer counter = answers.Get(1);
  ASSERT_FALSE(counter.ok());
  EXPECT_THAT(std::string(counter.status().message()), HasSubstr("per-hour:{bad}"));
  const Answer previous = answers.Get(3);
  ASSERT_FALSE(previous.ok());
  EXPECT_THAT(std::string(previous.status().message()),
              HasSubstr(absl::StrCat("sliding:{old}:", index - 1, " holds no count")));
  for (size_t i : {0, 2, 4}) {
    const Answer good = answers.Get(i);
    ASSERT_TRUE(good.ok()) << i << ": " << good.status();
    EXPECT_TRUE((*good)[0].allowed) << i;
  }
  EXPECT_EQ(Calls() - calls, 1);
  EXPECT_EQ(Redis({"GET", absl::StrCat("tollgate:per-hour:{bad2}:", index)}).str, "1");
  EXPECT_EQ(Redis({"GET", absl::StrCat("tollgate:sliding:{good}:", index)}).str, "1");
  EXPECT_EQ(Redis({"EXISTS", "tollgate:api:{c}"}).integer, 0);  // its request failed
  EXPECT_EQ(Redis({"EXISTS", "tollgate:api:{b}"}).integer, 1);
}

// The production path: requests made while one I/O handler runs (here the callback of a
// reply, as a closed-loop caller makes its next check) wait for its end and go in one call,
// checks, charges, reservations, settles and leases alike; a caller's own thread sends at once.
TEST_F(RedisStoreBatchTest, RequestsMadeInOneHandlerGoInOneCall) {
  const Limit bucket = TokenBucket("api", 100, 0.001);
  Limit tokens = TokenBucket("tokens", 1000, 0.001);
  const Limit slots = Window("slots", Algorithm::kConcurrency, 2, 60'000'000);
  CheckItem reserve{&tokens, "t", 300};
  reserve.op = ItemOp::kReserve;
  reserve.id = "AAAAAAAAAAAAAAAAAAAAAA";
  ASSERT_TRUE(store_->Apply({reserve}).ok());
  CheckItem settle = reserve;
  settle.op = ItemOp::kSettle;
  settle.cost = 100;
  CheckItem charge{&tokens, "c", 50};
  charge.op = ItemOp::kCharge;
  CheckItem lease{&slots, "s", 1};
  lease.id = "lease-1";

  std::vector<std::vector<CheckItem>> next;
  for (int i = 0; i < 8; ++i) next.push_back({{&bucket, absl::StrCat("user:", i)}});
  next.push_back({charge});
  next.push_back({settle});
  next.push_back({lease});
  Answers answers(next.size());
  const int64_t calls = Calls();
  std::promise<void> issued;
  store_->ApplyAsync({{&bucket, "first"}}, [&](const Answer& first) {
    EXPECT_TRUE(first.ok()) << first.status();
    for (size_t i = 0; i < next.size(); ++i) store_->ApplyAsync(next[i], answers.To(i));
    issued.set_value();
  });
  issued.get_future().wait();
  std::vector<Answer> got;
  for (size_t i = 0; i < next.size(); ++i) {
    got.push_back(answers.Get(i));
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status();
    EXPECT_TRUE((*got[i])[0].allowed) << i;
  }
  EXPECT_EQ(Calls() - calls, 2);  // the first check, then the eleven requests of its callback
  EXPECT_EQ((*got[9])[0].remaining, 900);  // settled at 100 of 300
  EXPECT_EQ((*got[10])[0].remaining, 1);   // one of two slots taken

  // From a thread of the caller's, each request goes at once, in a call of its own.
  const int64_t before = Calls();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store_->Apply({{&bucket, "alone"}}).ok());
  EXPECT_EQ(Calls() - before, 3);
}

// A deadline is per request, inside a batch too: with Redis stalled, a request whose limit
// has a short deadline is answered by its failure policy while the one beside it in the same
// call, with a long deadline, waits for Redis and gets its decision.
TEST_F(RedisStoreBatchTest, EachRequestInABatchKeepsItsOwnDeadline) {
  Limit hasty = TokenBucket("hasty", 10, 0.001);
  hasty.timeout_micros = 20'000;
  hasty.on_store_failure = FailureMode::kFailClosed;
  Limit patient = TokenBucket("patient", 10, 0.001);
  patient.timeout_micros = 20'000'000;
  std::shared_ptr<Store> primary(std::move(store_));
  RedisStoreImpl& redis = static_cast<RedisStoreImpl&>(*primary);
  absl::StatusOr<std::unique_ptr<ResilientStore>> resilient = ResilientStore::Create(primary, {});
  ASSERT_TRUE(resilient.ok()) << resilient.status();
  ASSERT_TRUE((*resilient)->Apply({{&patient, "warm"}}).ok());  // connected, script loaded
  const int64_t calls = ScriptCalls(server_->port());

  server_->Pause();
  Answers answers(2);
  OnIoThread(redis, [&] {
    (*resilient)->ApplyAsync({{&hasty, "u"}}, answers.To(0));
    (*resilient)->ApplyAsync({{&patient, "u"}}, answers.To(1));
  });
  const Answer hurried = answers.Get(0);  // the deadline answers while Redis is stalled
  server_->Resume();
  const Answer waited = answers.Get(1);
  ASSERT_TRUE(hurried.ok()) << hurried.status();
  EXPECT_EQ((*hurried)[0].source, DecisionSource::kFallback);
  EXPECT_FALSE((*hurried)[0].allowed);  // fail_closed
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ((*waited)[0].source, DecisionSource::kRedis);
  EXPECT_TRUE((*waited)[0].allowed);
  EXPECT_EQ(ScriptCalls(server_->port()) - calls, 1);  // both went in one call
}

// In a Redis Cluster a flush makes one call per hash slot; a request whose limits span
// slots is split between those calls and, refused on one slot, consumes nothing on the
// others (refund.lua gives it back).
TEST(RedisStoreClusterBatchTest, AFlushMakesOneCallPerSlot) {
  absl::StatusOr<std::unique_ptr<testing::RedisCluster>> cluster =
      testing::RedisCluster::Start(/*primaries=*/3, /*replicas_per_primary=*/0);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::StatusOr<std::unique_ptr<RedisStore>> created =
      testing::ConnectRedisStore({.url = (*cluster)->url()});
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<RedisStoreImpl> store(static_cast<RedisStoreImpl*>(created->release()));
  const Limit bucket = TokenBucket("api", 2, 0.001);
  const Limit otp = Window("otp", Algorithm::kFixedWindow, 1, 600'000'000);
  absl::StatusOr<std::vector<testing::RedisCluster::Node>> nodes = (*cluster)->Nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  auto calls = [&] {
    int64_t sum = 0;
    for (const testing::RedisCluster::Node& node : *nodes) sum += ScriptCalls(node.port);
    return sum;
  };
  ASSERT_TRUE(store->Apply({{&otp, "spent"}}).ok());  // refuses the next check of it
  // Keys on several slots, twice each; and one request over two slots.
  const std::vector<std::string> keys = {"a", "b", "c", "d"};
  std::set<int> slots;
  for (const std::string& key : keys) slots.insert(redis::ItemSlot("tollgate:", {&bucket, key}));
  const int spent_slot = redis::ItemSlot("tollgate:", {&otp, "spent"});
  const int split_slot = redis::ItemSlot("tollgate:", {&bucket, "split"});
  ASSERT_NE(spent_slot, split_slot);
  slots.insert(spent_slot);
  slots.insert(split_slot);

  std::vector<std::vector<CheckItem>> requests;
  for (int round = 0; round < 2; ++round) {
    for (const std::string& key : keys) requests.push_back({{&bucket, key}});
  }
  requests.push_back({{&bucket, "split"}, {&otp, "spent"}});
  Answers answers(requests.size());
  const int64_t before = calls();
  OnIoThread(*store, [&] {
    for (size_t i = 0; i < requests.size(); ++i) store->ApplyAsync(requests[i], answers.To(i));
  });
  for (size_t i = 0; i + 1 < requests.size(); ++i) {
    const Answer answer = answers.Get(i);
    ASSERT_TRUE(answer.ok()) << i << ": " << answer.status();
    EXPECT_TRUE((*answer)[0].allowed) << i;
    EXPECT_EQ((*answer)[0].remaining, i < keys.size() ? 1 : 0) << i;
  }
  const Answer split = answers.Get(requests.size() - 1);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_TRUE((*split)[0].allowed);
  EXPECT_FALSE((*split)[1].allowed);
  // One call per slot, and one refund for the bucket's slot of the refused request.
  EXPECT_EQ(calls() - before, static_cast<int64_t>(slots.size()) + 1);
  absl::StatusOr<std::vector<Decision>> left = store->Apply({{&bucket, "split", 0}});
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ((*left)[0].remaining, 2);  // given back
}

}  // namespace
}  // namespace tollgate
