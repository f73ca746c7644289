// Copyright tollgate authors.
#include "src/server/http_framing.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tollgate::server {
namespace {

namespace http = boost::beast::http;
using ::testing::HasSubstr;
using ::testing::Not;

HttpRequest Head(unsigned version, bool host = true) {
  HttpRequest head(http::verb::post, "/v1/check", version);
  if (host) head.add_field("Host", "tollgate");
  return head;
}

TEST(CheckRequestFramingTest, AcceptsOrdinaryRequests) {
  EXPECT_EQ(CheckRequestFraming(Head(11)), std::nullopt);
  EXPECT_EQ(CheckRequestFraming(Head(10, /*host=*/false)), std::nullopt);
  HttpRequest chunked = Head(11);
  chunked.add_field("Transfer-Encoding", "Chunked");
  EXPECT_EQ(CheckRequestFraming(chunked), std::nullopt);
  HttpRequest empty_host = Head(11, /*host=*/false);
  empty_host.add_field("Host", "");
  EXPECT_EQ(CheckRequestFraming(empty_host), std::nullopt);
}

TEST(CheckRequestFramingTest, AnUnimplementedCodingIs501AndNamesIt) {
  for (const char* value : {"gzip, chunked", "deflate,chunked", " x-custom ;p=1 , chunked"}) {
    HttpRequest head = Head(11);
    head.add_field("Transfer-Encoding", value);
    std::optional<FramingRefusal> refusal = CheckRequestFraming(head);
    ASSERT_TRUE(refusal.has_value()) << value;
    EXPECT_EQ(refusal->status, http::status::not_implemented) << value;
    EXPECT_THAT(refusal->message, HasSubstr("transfer coding \"")) << value;
  }
  // A second Transfer-Encoding field counts as well.
  HttpRequest two = Head(11);
  two.add_field("Transfer-Encoding", "gzip");
  two.add_field("Transfer-Encoding", "chunked");
  std::optional<FramingRefusal> refusal = CheckRequestFraming(two);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->message,
            "transfer coding \"gzip\" is not implemented (only chunked is); send the body uncoded");
}

TEST(CheckRequestFramingTest, ACodingNameIsNotEchoedRaw) {
  HttpRequest head = Head(11);
  head.add_field("Transfer-Encoding", "g\xC3\xA9zip\xFF, chunked");
  std::optional<FramingRefusal> refusal = CheckRequestFraming(head);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_THAT(refusal->message, Not(HasSubstr("\xFF")));
  EXPECT_THAT(refusal->message, HasSubstr("\"g\\u00e9zip\\ufffd\""));
}

TEST(CheckRequestFramingTest, Http11NeedsExactlyOneHost) {
  std::optional<FramingRefusal> none = CheckRequestFraming(Head(11, /*host=*/false));
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->status, http::status::bad_request);
  EXPECT_THAT(none->message, HasSubstr("Host"));
  HttpRequest two = Head(11);
  two.add_field("Host", "other");
  std::optional<FramingRefusal> twice = CheckRequestFraming(two);
  ASSERT_TRUE(twice.has_value());
  EXPECT_EQ(twice->status, http::status::bad_request);
}

TEST(CheckRequestFramingTest, AHostThatIsNotAHostIs400) {
  for (unsigned version : {10u, 11u}) {
    for (const char* value : {"12}7\\.0.0.1", "I127.0.0.1", "a b"}) {
      HttpRequest head = Head(version, /*host=*/false);
      head.add_field("Host", value);
      std::optional<FramingRefusal> refusal = CheckRequestFraming(head);
      ASSERT_TRUE(refusal.has_value()) << value;
      EXPECT_EQ(refusal->status, http::status::bad_request);
      EXPECT_THAT(refusal->message, HasSubstr("not a host"));
      EXPECT_THAT(refusal->message, Not(HasSubstr(value)));  // no raw byte echoed
    }
  }
  HttpRequest head = Head(11, /*host=*/false);
  head.add_field("Host", "127.0.0.1:8080");
  EXPECT_EQ(CheckRequestFraming(head), std::nullopt);
}

TEST(CheckRequestFramingTest, AMalformedOrRepeatedChunkedIs400) {
  for (const char* value : {"chunked chunked", "chunked, chunked"}) {
    HttpRequest head = Head(11);
    head.add_field("Transfer-Encoding", value);
    std::optional<FramingRefusal> refusal = CheckRequestFraming(head);
    ASSERT_TRUE(refusal.has_value()) << value;
    EXPECT_EQ(refusal->status, http::status::bad_request) << value;
  }
}

TEST(CheckRequestFramingTest, TransferEncodingOnHttp10Is400) {
  HttpRequest head = Head(10);
  head.add_field("Transfer-Encoding", "chunked");
  std::optional<FramingRefusal> refusal = CheckRequestFraming(head);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->status, http::status::bad_request);
}

}  // namespace
}  // namespace tollgate::server
