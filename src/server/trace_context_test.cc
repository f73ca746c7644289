// Copyright tollgate authors.
#include "src/server/trace_context.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace tollgate::server {
namespace {

constexpr char kTraceId[] = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr char kSpanId[] = "00f067aa0ba902b7";

std::string Header(std::string_view version, std::string_view trace_id, std::string_view span_id,
                   std::string_view flags) {
  return std::string(version) + "-" + std::string(trace_id) + "-" + std::string(span_id) + "-" +
         std::string(flags);
}

TEST(TraceContextTest, AValidTraceparentIsRead) {
  std::optional<TraceParent> parent = ParseTraceParent(Header("00", kTraceId, kSpanId, "01"));
  ASSERT_TRUE(parent.has_value());
  EXPECT_EQ(HexId(parent->trace_id), kTraceId);
  EXPECT_EQ(HexId(parent->span_id), kSpanId);
  EXPECT_TRUE(parent->sampled());
  EXPECT_EQ(FormatTraceParent(*parent), Header("00", kTraceId, kSpanId, "01"));

  std::optional<TraceParent> unsampled = ParseTraceParent(Header("00", kTraceId, kSpanId, "00"));
  ASSERT_TRUE(unsampled.has_value());
  EXPECT_FALSE(unsampled->sampled());
  // Other flag bits do not unset the sampled one.
  EXPECT_TRUE(ParseTraceParent(Header("00", kTraceId, kSpanId, "03"))->sampled());
}

TEST(TraceContextTest, ALaterVersionIsReadAsVersion00WithWhatFollowsIgnored) {
  EXPECT_TRUE(ParseTraceParent(Header("01", kTraceId, kSpanId, "01")).has_value());
  EXPECT_TRUE(
      ParseTraceParent(Header("cc", kTraceId, kSpanId, "01") + "-what-comes-next").has_value());
  // A later version must still separate what follows with '-'.
  EXPECT_FALSE(ParseTraceParent(Header("cc", kTraceId, kSpanId, "01") + "x").has_value());
}

TEST(TraceContextTest, InvalidTraceparentsAreIgnored) {
  const std::string valid = Header("00", kTraceId, kSpanId, "01");
  const std::string invalid[] = {
      "",
      valid.substr(0, 54),                    // short
      valid + "-",                            // version 00 is exactly 55 long
      valid + "0",                            //
      Header("ff", kTraceId, kSpanId, "01"),  // version ff is invalid
      Header("0g", kTraceId, kSpanId, "01"),  // not hex
      Header("0A", kTraceId, kSpanId, "01"),  // upper case
      Header("00", "4BF92F3577B34DA6A3CE929D0E0E4736", kSpanId, "01"),
      Header("00", kTraceId, "00F067AA0BA902B7", "01"),
      Header("00", kTraceId, kSpanId, "0x"),
      Header("00", std::string(32, '0'), kSpanId, "01"),   // all-zero trace id
      Header("00", kTraceId, std::string(16, '0'), "01"),  // all-zero parent id
      Header("00", std::string(kTraceId) + "0", std::string(kSpanId).substr(1), "01"),
      "00_" + valid.substr(3),  // separators
      valid.substr(0, 35) + "_" + valid.substr(36),
      valid.substr(0, 52) + "_" + valid.substr(53),
  };
  for (const std::string& header : invalid) {
    EXPECT_FALSE(ParseTraceParent(header).has_value()) << header;
  }
}

TEST(TraceContextTest, NewIdsAreNonZeroAndDistinct) {
  std::set<std::string> traces;
  std::set<std::string> spans;
  for (int i = 0; i < 1000; ++i) {
    traces.insert(HexId(NewTraceId()));
    spans.insert(HexId(NewSpanId()));
  }
  EXPECT_EQ(traces.size(), 1000u);
  EXPECT_EQ(spans.size(), 1000u);
  EXPECT_EQ(traces.count(std::string(32, '0')), 0u);
  EXPECT_EQ(spans.count(std::string(16, '0')), 0u);
}

// An id whose last 8 bytes, read big-endian, are `low`.
TraceId IdWithLow(uint64_t low) {
  TraceId id{};
  id[0] = 1;
  for (int i = 15; i >= 8; --i, low >>= 8) id[i] = static_cast<uint8_t>(low);
  return id;
}

TEST(TraceContextTest, TheRatioComparesTheIdsLowHalfWithTheRate) {
  // (low >> 1) < rate × 2^63.
  EXPECT_TRUE(TraceIdRatioSampled(IdWithLow(0), 0.001));
  EXPECT_FALSE(TraceIdRatioSampled(IdWithLow(0), 0));
  EXPECT_TRUE(TraceIdRatioSampled(IdWithLow(~uint64_t{0}), 1));
  EXPECT_FALSE(TraceIdRatioSampled(IdWithLow(~uint64_t{0}), 0.999));
  EXPECT_TRUE(TraceIdRatioSampled(IdWithLow(uint64_t{1} << 62), 0.5));   // 2^61 < 2^62
  EXPECT_FALSE(TraceIdRatioSampled(IdWithLow(uint64_t{1} << 63), 0.5));  // 2^62 is the bound
  EXPECT_TRUE(TraceIdRatioSampled(IdWithLow((uint64_t{1} << 63) - 2), 0.5));
}

TEST(TraceContextTest, RandomIdsAreSampledAtAboutTheRate) {
  int sampled = 0;
  constexpr int kIds = 20000;
  for (int i = 0; i < kIds; ++i) sampled += TraceIdRatioSampled(NewTraceId(), 0.25) ? 1 : 0;
  // 5000 expected; the bounds are over 10 standard deviations (61) away.
  EXPECT_GT(sampled, 4300);
  EXPECT_LT(sampled, 5700);
}

}  // namespace
}  // namespace tollgate::server
