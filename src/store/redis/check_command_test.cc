// Copyright tollgate authors. check.lua's call and its reply, without Redis: the bytes
// CheckCommand writes and what ParseCheckReply makes of a reply. (tests/redis_store_test.cc
// and tests/redis_store_batch_test.cc run both against the script.)
#include "src/store/redis/check_command.h"

#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/redis/check_reply.h"
#include "src/store/redis/script_args.h"
#include "tests/support/limits.h"

namespace tollgate::redis {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::tollgate::testing::TokenBucket;
using ::tollgate::testing::Window;

std::string Double(double value) {
  std::string out(8, '\0');
  PutLittleEndianDouble(out.data(), value);
  return out;
}

std::string Spec(char algorithm, double a, double b, double cost) {
  return std::string(1, algorithm) + Double(a) + Double(b) + Double(cost);
}

std::string Bulk(const std::string& arg) {
  return "$" + std::to_string(arg.size()) + "\r\n" + arg + "\r\n";
}

TEST(CheckCommandTest, KindsAsTheScriptClassifiesThem) {
  const Limit bucket = TokenBucket("api", 5, 1);
  const Limit slots = Window("slots", Algorithm::kConcurrency, 2, 60'000'000);
  CheckItem take{&slots, "k", 1};
  take.id = "lease";
  CheckItem release = take;
  release.op = ItemOp::kRelease;
  CheckItem renew = take;
  renew.op = ItemOp::kRenew;
  CheckItem shadow{&bucket, "k"};
  shadow.shadow = true;
  CheckItem charge{&bucket, "k"};
  charge.op = ItemOp::kCharge;
  EXPECT_EQ(KindOf({{&bucket, "k"}}), RequestKind::kPlain);
  EXPECT_EQ(KindOf({{&bucket, "k"}, {&bucket, "j", 0}}), RequestKind::kPlain);
  EXPECT_EQ(KindOf({take}), RequestKind::kLease);
  EXPECT_EQ(KindOf({release}), RequestKind::kLease);
  EXPECT_EQ(KindOf({renew}), RequestKind::kGeneral);
  EXPECT_EQ(KindOf({{&slots, "k", 0}}), RequestKind::kGeneral);  // a peek: no lease
  EXPECT_EQ(KindOf({take, {&bucket, "k"}}), RequestKind::kGeneral);
  EXPECT_EQ(KindOf({shadow}), RequestKind::kGeneral);
  EXPECT_EQ(KindOf({charge, {&bucket, "k"}}), RequestKind::kGeneral);
}

// One request alone: EVALSHA <sha> <n> <state keys> <time> <one spec per item>.
TEST(CheckCommandTest, ARequestAloneCarriesItsItemsSpecs) {
  const std::string sha(40, 'a');
  const Limit bucket = TokenBucket("api", 5, 2.5);
  const Limit slots = Window("slots", Algorithm::kConcurrency, 3, 30'000'000);
  const std::vector<CheckItem> one = {{&bucket, "user-1"}};
  EXPECT_EQ(CheckCommand("EVALSHA", sha, "tg:", {&one}, std::nullopt),
            "*6\r\n$7\r\nEVALSHA\r\n" + Bulk(sha) + Bulk("1") + Bulk("tg:api:{user-1}") + Bulk("") +
                Bulk(Spec('t', 5, 2.5, 1)));
  // A lease request names its lease set, and its spec ends with the op and the id.
  CheckItem take{&slots, "u", 1};
  take.id = "L1";
  const std::vector<CheckItem> lease = {take};
  EXPECT_EQ(CheckCommand("EVAL", "return 1", "tg:", {&lease}, 1'700'000'000'000'000),
            "*6\r\n$4\r\nEVAL\r\n" + Bulk("return 1") + Bulk("1") + Bulk("tg:slots:{u}:l") +
                Bulk("1700000000000000") + Bulk(Spec('c', 3, 30'000'000, 1) + "KL1"));
}

// A batch: each distinct spec once, and a layout whose runs cover requests of one plain
// check with the same spec in three bytes.
TEST(CheckCommandTest, ABatchNamesEachDistinctSpecOnce) {
  const std::string sha(40, 'b');
  const Limit bucket = TokenBucket("api", 5, 1);
  const Limit otp = Window("otp", Algorithm::kFixedWindow, 3, 600'000'000);
  CheckItem shadow{&otp, "w"};
  shadow.shadow = true;
  const std::vector<std::vector<CheckItem>> requests = {
      {{&bucket, "a"}},
      {{&bucket, "b"}},
      {{&bucket, "c"}},               // one run
      {{&bucket, "d"}, {&otp, "d"}},  // several plain checks
      {{&bucket, "e"}},               // a run again
      {shadow}};                      // a general request
  std::vector<const std::vector<CheckItem>*> pointers;
  for (const auto& request : requests) pointers.push_back(&request);
  ASSERT_TRUE(FitsOneCall(pointers));
  const std::string layout = std::string("P\x03\x01", 3) + std::string("p\x02\x01\x02", 4) +
                             std::string("P\x01\x01", 3) + std::string("g\x01\x03", 3);
  EXPECT_EQ(CheckCommand("EVALSHA", sha, "tg:", pointers, std::nullopt),
            "*15\r\n$7\r\nEVALSHA\r\n" + Bulk(sha) + Bulk("7") + Bulk("tg:api:{a}") +
                Bulk("tg:api:{b}") + Bulk("tg:api:{c}") + Bulk("tg:api:{d}") + Bulk("tg:otp:{d}") +
                Bulk("tg:api:{e}") + Bulk("tg:otp:{w}") + Bulk("") + Bulk(layout) +
                Bulk(Spec('t', 5, 1, 1)) + Bulk(Spec('f', 3, 600'000'000, 1)) +
                Bulk(Spec('F', 3, 600'000'000, 1)));
}

// A batch of plain checks whose state keys each come once says so with a 'D' before its
// layout; a key twice (the same limit and key) and it does not.
TEST(CheckCommandTest, ABatchOfPlainChecksOnDistinctKeysSaysSo) {
  const Limit bucket = TokenBucket("api", 5, 1);
  const Limit otp = Window("otp", Algorithm::kFixedWindow, 3, 600'000'000);
  const std::vector<CheckItem> a = {{&bucket, "a"}};
  const std::vector<CheckItem> both = {{&bucket, "b"}, {&otp, "a"}};
  const std::vector<CheckItem> a_again = {{&bucket, "a"}};
  const std::string tail = Bulk(Spec('t', 5, 1, 1)) + Bulk(Spec('f', 3, 600'000'000, 1));
  EXPECT_EQ(CheckCommand("EVALSHA", "s", "", {&a, &both}, std::nullopt),
            "*10\r\n$7\r\nEVALSHA\r\n" + Bulk("s") + Bulk("3") + Bulk("api:{a}") + Bulk("api:{b}") +
                Bulk("otp:{a}") + Bulk("") + Bulk(std::string("DP\x01\x01p\x02\x01\x02", 8)) +
                tail);
  EXPECT_EQ(CheckCommand("EVALSHA", "s", "", {&a, &both, &a_again}, std::nullopt),
            "*11\r\n$7\r\nEVALSHA\r\n" + Bulk("s") + Bulk("4") + Bulk("api:{a}") + Bulk("api:{b}") +
                Bulk("otp:{a}") + Bulk("api:{a}") + Bulk("") +
                Bulk(std::string("P\x01\x01p\x02\x01\x02P\x01\x01", 10)) + tail);
}

TEST(CheckCommandTest, WhatFitsOneCall) {
  const Limit bucket = TokenBucket("api", 5, 1);
  const std::vector<CheckItem> big(300, CheckItem{&bucket, "k"});
  const std::vector<CheckItem> one = {{&bucket, "k"}};
  EXPECT_TRUE(FitsOneCall({&big}));  // alone, a request has no limit
  EXPECT_FALSE(FitsOneCall({&big, &one}));
  std::vector<const std::vector<CheckItem>*> many(kMaxRequestsPerCall, &one);
  EXPECT_TRUE(FitsOneCall(many));
  many.push_back(&one);
  EXPECT_FALSE(FitsOneCall(many));
}

TEST(CheckCommandTest, BadRequestsSayWhatIsWrong) {
  const Limit bucket = TokenBucket("api", 5, 1);
  const Limit slots = Window("slots", Algorithm::kConcurrency, 3, 30'000'000);
  Limit broken = TokenBucket("broken", 5, 0);
  CheckItem release{&bucket, "k"};
  release.op = ItemOp::kRelease;
  release.id = "x";
  CheckItem settle{&bucket, "k"};
  settle.op = ItemOp::kSettle;
  CheckItem add{&bucket, "k"};
  add.op = ItemOp::kAdd;
  EXPECT_TRUE(ValidateRequest({{&bucket, "k"}, {&slots, "k", 0}}).ok());
  const std::vector<std::pair<std::vector<CheckItem>, std::string>> cases = {
      {{}, "at least one item"},
      {{{&bucket, ""}}, "limit 'api': an empty key"},
      {{{&bucket, "k", -2}}, "limit 'api': a negative cost (-2)"},
      {{{&broken, "k"}}, "refill_per_second"},
      {{release}, "not a concurrency limit"},
      {{settle}, "a reservation needs an id"},
      {{{&slots, "k", 1}}, "a lease needs an id"},
      {{add}, "kAdd items go in a batch of their own"},
  };
  for (const auto& [items, expected] : cases) {
    const absl::Status status = ValidateRequest(items);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << expected;
    EXPECT_THAT(std::string(status.message()), HasSubstr(expected));
  }
}

RedisReply Reply(const std::string& bytes) {
  RedisReply reply;
  reply.type = RedisReply::Type::kString;
  reply.str = bytes;
  return reply;
}

// A rate limit's record is the script's verdict and the state it decided on; the numbers
// come from src/algorithm, and a request whose verdict disagrees with them fails.
TEST(CheckReplyTest, DecisionsComeFromTheStateTheScriptFound) {
  const Limit bucket = TokenBucket("api", 10, 1);
  const Limit window = Window("otp", Algorithm::kFixedWindow, 3, 1'000'000);
  const Limit sliding = Window("search", Algorithm::kSlidingWindow, 10, 1'000'000);
  const int64_t now = 1'700'000'000'500'000;  // half way through a second's window
  const std::vector<CheckItem> checks = {{&bucket, "k"}, {&window, "k"}, {&sliding, "k"}};
  const std::vector<CheckItem> disagreeing = {{&bucket, "j"}};
  const std::vector<CheckItem> failed = {{&bucket, "x"}};
  const std::string full = Double(-std::numeric_limits<double>::infinity());
  const std::string bytes = Double(static_cast<double>(now)) +
                            // a full bucket, a window holding 3 of 3, sliding 4 now and 8 before
                            "\x01" + full + std::string(1, '\0') + "3" + "\x01" + "4,8" +
                            // a verdict of refused on a full bucket
                            std::string(1, '\0') + full +
                            // a request that failed alone
                            "\xff" + std::string("\x05\x00", 2) + "oops!";
  absl::StatusOr<CheckReply> reply =
      ParseCheckReply(Reply(bytes), {&checks, &disagreeing, &failed});
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->now_micros, now);
  ASSERT_EQ(reply->requests.size(), 3u);
  ASSERT_TRUE(reply->requests[0].ok()) << reply->requests[0].status();
  const std::vector<Decision>& decisions = *reply->requests[0];
  EXPECT_TRUE(decisions[0].allowed);
  EXPECT_EQ(decisions[0].remaining, 10);  // refused as a whole: its token given back
  EXPECT_FALSE(decisions[1].allowed);
  EXPECT_EQ(decisions[1].reason, DenyReason::kOverLimit);
  EXPECT_EQ(decisions[1].retry_after_micros, 500'000);  // when the window ends
  EXPECT_TRUE(decisions[2].allowed);                    // 8 × 0.5 + 4 + 1 <= 10
  EXPECT_EQ(decisions[2].source, DecisionSource::kRedis);
  ASSERT_FALSE(reply->requests[1].ok());
  EXPECT_THAT(std::string(reply->requests[1].status().message()), HasSubstr("disagree"));
  ASSERT_FALSE(reply->requests[2].ok());
  EXPECT_THAT(std::string(reply->requests[2].status().message()), HasSubstr("oops!"));

  // A reply cut short, or with bytes left over, is no answer at all.
  EXPECT_FALSE(
      ParseCheckReply(Reply(bytes.substr(0, bytes.size() - 1)), {&checks, &disagreeing, &failed})
          .ok());
  EXPECT_FALSE(ParseCheckReply(Reply(bytes + "x"), {&checks, &disagreeing, &failed}).ok());
  RedisReply error;
  error.type = RedisReply::Type::kError;
  error.str = "ERR boom";
  absl::StatusOr<CheckReply> refused = ParseCheckReply(error, {&checks});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), StartsWith("Redis refused"));
}

}  // namespace
}  // namespace tollgate::redis
