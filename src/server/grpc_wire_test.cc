// Copyright tollgate authors.
#include "src/server/grpc_wire.h"

#include <chrono>
#include <string>

#include "gtest/gtest.h"

namespace tollgate::server {
namespace {

using std::chrono::nanoseconds;
using Result = GrpcUnaryBody::Result;

std::string Framed(std::string_view message, char flag = 0) {
  std::string body = GrpcMessagePrefix(static_cast<uint32_t>(message.size()));
  body[0] = flag;
  body.append(message);
  return body;
}

TEST(GrpcWireTest, PrefixIsFlagAndBigEndianLength) {
  EXPECT_EQ(GrpcMessagePrefix(0x01020304), std::string("\0\x01\x02\x03\x04", 5));
  EXPECT_EQ(GrpcMessagePrefix(0), std::string(5, '\0'));
}

TEST(GrpcWireTest, OneMessageIsReadWhole) {
  const std::string body = Framed("hello");
  GrpcUnaryBody parsed = ParseGrpcUnaryBody(body, 100);
  EXPECT_EQ(parsed.result, Result::kMessage);
  EXPECT_EQ(parsed.message, "hello");
  EXPECT_EQ(ParseGrpcUnaryBody(Framed(""), 100).result, Result::kMessage);
}

TEST(GrpcWireTest, ShortBodiesAreIncomplete) {
  const std::string body = Framed("hello");
  for (size_t size = 0; size < body.size(); ++size) {
    EXPECT_EQ(ParseGrpcUnaryBody(std::string_view(body).substr(0, size), 100).result,
              Result::kIncomplete)
        << size;
  }
}

TEST(GrpcWireTest, TheLimitIsKnownFromThePrefixAlone) {
  std::string prefix = GrpcMessagePrefix(101);
  EXPECT_EQ(ParseGrpcUnaryBody(prefix, 100).result, Result::kTooLarge);
  EXPECT_EQ(ParseGrpcUnaryBody(prefix, 100).announced_length, 101u);
  EXPECT_EQ(ParseGrpcUnaryBody(Framed(std::string(100, 'x')), 100).result, Result::kMessage);
  EXPECT_EQ(ParseGrpcUnaryBody(GrpcMessagePrefix(0xffffffff), 100).result, Result::kTooLarge);
}

TEST(GrpcWireTest, FlagsAndTrailingBytes) {
  EXPECT_EQ(ParseGrpcUnaryBody(Framed("x", 1), 100).result, Result::kCompressed);
  EXPECT_EQ(ParseGrpcUnaryBody(Framed("x", 2), 100).result, Result::kBadFlag);
  EXPECT_EQ(ParseGrpcUnaryBody(Framed("x") + Framed("y"), 100).result, Result::kTrailingBytes);
  EXPECT_EQ(ParseGrpcUnaryBody(Framed("x") + "z", 100).result, Result::kTrailingBytes);
}

TEST(GrpcWireTest, TimeoutUnits) {
  EXPECT_EQ(ParseGrpcTimeout("1H"), nanoseconds(3'600'000'000'000));
  EXPECT_EQ(ParseGrpcTimeout("2M"), nanoseconds(120'000'000'000));
  EXPECT_EQ(ParseGrpcTimeout("3S"), nanoseconds(3'000'000'000));
  EXPECT_EQ(ParseGrpcTimeout("250m"), nanoseconds(250'000'000));
  EXPECT_EQ(ParseGrpcTimeout("7u"), nanoseconds(7'000));
  EXPECT_EQ(ParseGrpcTimeout("99999999n"), nanoseconds(99'999'999));
  EXPECT_EQ(ParseGrpcTimeout("0m"), nanoseconds(0));
  // 99,999,999 hours do not fit in int64 nanoseconds: saturated.
  EXPECT_EQ(ParseGrpcTimeout("99999999H"), nanoseconds::max());
  EXPECT_EQ(ParseGrpcTimeout("2562047H"), nanoseconds(int64_t{2'562'047} * 3'600'000'000'000));
}

TEST(GrpcWireTest, MalformedTimeoutsAreRefused) {
  for (std::string_view bad : {"", "S", "1", "123456789S", "-1S", "+1S", "1 S", " 1S", "1s", "1h",
                               "1.5S", "1SS", "abcS"}) {
    EXPECT_FALSE(ParseGrpcTimeout(bad).has_value()) << bad;
  }
}

TEST(GrpcWireTest, StatusNames) {
  EXPECT_EQ(GrpcStatusName(GrpcStatusCode::kOk), "OK");
  EXPECT_EQ(GrpcStatusName(GrpcStatusCode::kResourceExhausted), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(GrpcStatusName(GrpcStatusCode::kUnauthenticated), "UNAUTHENTICATED");
  EXPECT_EQ(GrpcStatusName(static_cast<GrpcStatusCode>(99)), "UNKNOWN");
  EXPECT_EQ(GrpcStatusValue(GrpcStatusCode::kUnimplemented), "12");
}

TEST(GrpcWireTest, MessagePercentEncoding) {
  EXPECT_EQ(PercentEncodeGrpcMessage("plain text"), "plain text");
  EXPECT_EQ(PercentEncodeGrpcMessage("50% off\n"), "50%25 off%0A");
  EXPECT_EQ(PercentEncodeGrpcMessage("caf\xc3\xa9"), "caf%C3%A9");
  const std::string all = [] {
    std::string bytes;
    for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
    return bytes;
  }();
  const std::string encoded = PercentEncodeGrpcMessage(all);
  for (char c : encoded) EXPECT_TRUE(c >= 0x20 && c <= 0x7e);
  EXPECT_EQ(PercentDecodeGrpcMessage(encoded), all);
  EXPECT_EQ(PercentDecodeGrpcMessage("100%"), "100%");
  EXPECT_EQ(PercentDecodeGrpcMessage("%zz%4"), "%zz%4");
}

GrpcRequestHeaders Headers(std::string_view content_type = "application/grpc") {
  GrpcRequestHeaders headers;
  headers.Add(":method", "POST");
  headers.Add(":path", "/a.B/C");
  headers.Add("content-type", content_type);
  headers.Add("te", "trailers");
  return headers;
}

TEST(GrpcWireTest, AGrpcRequestPasses) {
  GrpcRequestCheck check = CheckGrpcRequestHeaders(Headers());
  EXPECT_EQ(check.result, GrpcRequestCheck::Result::kOk);
  EXPECT_FALSE(check.timeout.has_value());
  for (std::string_view type :
       {"application/grpc+proto", "application/grpc; charset=utf-8", "Application/GRPC"}) {
    EXPECT_EQ(CheckGrpcRequestHeaders(Headers(type)).result, GrpcRequestCheck::Result::kOk) << type;
  }
  GrpcRequestHeaders without_te;
  without_te.Add(":method", "POST");
  without_te.Add("content-type", "application/grpc");
  EXPECT_EQ(CheckGrpcRequestHeaders(without_te).result, GrpcRequestCheck::Result::kOk);
}

TEST(GrpcWireTest, TimeoutAndEncoding) {
  GrpcRequestHeaders headers = Headers();
  headers.Add("grpc-timeout", "100m");
  headers.Add("grpc-encoding", "identity");
  GrpcRequestCheck check = CheckGrpcRequestHeaders(headers);
  EXPECT_EQ(check.result, GrpcRequestCheck::Result::kOk);
  EXPECT_EQ(check.timeout, nanoseconds(100'000'000));

  GrpcRequestHeaders gzip = Headers();
  gzip.Add("grpc-encoding", "gzip");
  EXPECT_EQ(CheckGrpcRequestHeaders(gzip).result, GrpcRequestCheck::Result::kUnsupportedEncoding);

  GrpcRequestHeaders bad_timeout = Headers();
  bad_timeout.Add("grpc-timeout", "soon");
  EXPECT_EQ(CheckGrpcRequestHeaders(bad_timeout).result, GrpcRequestCheck::Result::kBadHeaders);
}

TEST(GrpcWireTest, NonGrpcRequestsAreRefusedAsHttp) {
  GrpcRequestHeaders get = Headers();
  get.method = "GET";
  EXPECT_EQ(CheckGrpcRequestHeaders(get).result, GrpcRequestCheck::Result::kMethodNotAllowed);
  for (std::string_view type :
       {"", "application/json", "application/grpc+json", "application/grpcx", "text/plain"}) {
    EXPECT_EQ(CheckGrpcRequestHeaders(Headers(type)).result,
              GrpcRequestCheck::Result::kUnsupportedMediaType)
        << type;
  }
}

TEST(GrpcWireTest, DuplicateAndBadTeAreRefused) {
  GrpcRequestHeaders twice = Headers();
  twice.Add("grpc-timeout", "1S");
  twice.Add("grpc-timeout", "2S");
  EXPECT_EQ(CheckGrpcRequestHeaders(twice).result, GrpcRequestCheck::Result::kBadHeaders);
  GrpcRequestHeaders te = Headers();
  te.te = "gzip";
  EXPECT_EQ(CheckGrpcRequestHeaders(te).result, GrpcRequestCheck::Result::kBadHeaders);
}

TEST(GrpcWireTest, TraceparentIsKeptOnceAndNeverRefusesTheCall) {
  constexpr char kTraceparent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  GrpcRequestHeaders headers = Headers();
  headers.Add("traceparent", kTraceparent);
  EXPECT_EQ(headers.traceparent, kTraceparent);
  EXPECT_EQ(CheckGrpcRequestHeaders(headers).result, GrpcRequestCheck::Result::kOk);
  // Given twice (or more): ignored, as W3C Trace Context says, and the call still passes.
  headers.Add("traceparent", kTraceparent);
  headers.Add("traceparent", kTraceparent);
  EXPECT_EQ(headers.traceparent, "");
  EXPECT_EQ(CheckGrpcRequestHeaders(headers).result, GrpcRequestCheck::Result::kOk);
  headers.Clear();
  headers.Add("traceparent", kTraceparent);
  EXPECT_EQ(headers.traceparent, kTraceparent);
}

}  // namespace
}  // namespace tollgate::server
