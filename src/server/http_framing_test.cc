// Copyright tollgate authors.
#include "src/server/http_framing.h"

#include <string>
#include <string_view>

#include "boost/asio/buffer.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/string_body.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tollgate::server {
namespace {

namespace http = boost::beast::http;
using ::testing::HasSubstr;
using ::testing::Not;
using HttpRequest = http::request<http::string_body>;

HttpRequest Head(unsigned version, bool host = true) {
  HttpRequest head(http::verb::post, "/v1/check", version);
  if (host) head.insert(http::field::host, "tollgate");
  return head;
}

TEST(CheckRequestFramingTest, AcceptsOrdinaryRequests) {
  EXPECT_EQ(CheckRequestFraming(Head(11)), std::nullopt);
  EXPECT_EQ(CheckRequestFraming(Head(10, /*host=*/false)), std::nullopt);
  HttpRequest chunked = Head(11);
  chunked.insert(http::field::transfer_encoding, "Chunked");
  EXPECT_EQ(CheckRequestFraming(chunked), std::nullopt);
  HttpRequest empty_host = Head(11, /*host=*/false);
  empty_host.insert(http::field::host, "");
  EXPECT_EQ(CheckRequestFraming(empty_host), std::nullopt);
}

TEST(CheckRequestFramingTest, AnUnimplementedCodingIs501AndNamesIt) {
  for (const char* value : {"gzip, chunked", "deflate,chunked", " x-custom ;p=1 , chunked"}) {
    HttpRequest head = Head(11);
    head.insert(http::field::transfer_encoding, value);
    std::optional<FramingRefusal> refusal = CheckRequestFraming(head);
    ASSERT_TRUE(refusal.has_value()) << value;
    EXPECT_EQ(refusal->status, http::status::not_implemented) << value;
    EXPECT_THAT(refusal->message, HasSubstr("transfer coding \"")) << value;
  }
  // A second Transfer-Encoding field counts as well.
  HttpRequest two = Head(11);
  two.insert(http::field::transfer_encoding, "gzip");
  two.insert(http::field::transfer_encoding, "chunked");
  std::optional<FramingRefusal> refusal = CheckRequestFraming(two);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->message,
            "transfer coding \"gzip\" is not implemented (only chunked is); send the body uncoded");
}

TEST(CheckRequestFramingTest, ACodingNameIsNotEchoedRaw) {
  HttpRequest head = Head(11);
  head.insert(http::field::transfer_encoding, "g\xC3\xA9zip\xFF, chunked");
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
  two.insert(http::field::host, "other");
  std::optional<FramingRefusal> twice = CheckRequestFraming(two);
  ASSERT_TRUE(twice.has_value());
  EXPECT_EQ(twice->status, http::status::bad_request);
}

TEST(CheckRequestFramingTest, AHostThatIsNotAHostIs400) {
  for (unsigned version : {10u, 11u}) {
    for (const char* value : {"12}7\\.0.0.1", "I127.0.0.1", "a b"}) {
      HttpRequest head = Head(version, /*host=*/false);
      head.insert(http::field::host, value);
      std::optional<FramingRefusal> refusal = CheckRequestFraming(head);
      ASSERT_TRUE(refusal.has_value()) << value;
      EXPECT_EQ(refusal->status, http::status::bad_request);
      EXPECT_THAT(refusal->message, HasSubstr("not a host"));
      EXPECT_THAT(refusal->message, Not(HasSubstr(value)));  // no raw byte echoed
    }
  }
  HttpRequest head = Head(11, /*host=*/false);
  head.insert(http::field::host, "127.0.0.1:8080");
  EXPECT_EQ(CheckRequestFraming(head), std::nullopt);
}

TEST(CheckRequestFramingTest, AMalformedOrRepeatedChunkedIs400) {
  for (const char* value : {"chunked chunked", "chunked, chunked"}) {
    HttpRequest head = Head(11);
    head.insert(http::field::transfer_encoding, value);
    std::optional<FramingRefusal> refusal = CheckRequestFraming(head);
    ASSERT_TRUE(refusal.has_value()) << value;
    EXPECT_EQ(refusal->status, http::status::bad_request) << value;
  }
}

TEST(CheckRequestFramingTest, TransferEncodingOnHttp10Is400) {
  HttpRequest head = Head(10);
  head.insert(http::field::transfer_encoding, "chunked");
  std::optional<FramingRefusal> refusal = CheckRequestFraming(head);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->status, http::status::bad_request);
}

TEST(CheckRequestFramingTest, AHostInAChunkedBodysTrailerCountsAsASecondHost) {
  constexpr std::string_view kWire =
      "POST /v1/check HTTP/1.1\r\nHost: tollgate\r\nTransfer-Encoding: chunked\r\n\r\n"
      "2\r\n{}\r\n0\r\nHost: trailer\r\n\r\n";
  http::request_parser<http::string_body> parser;
  parser.eager(true);
  boost::beast::error_code error;
  parser.put(boost::asio::buffer(kWire.data(), kWire.size()), error);
  ASSERT_FALSE(error) << error.message();
  ASSERT_TRUE(parser.is_done());
  EXPECT_EQ(parser.get().body(), "{}");
  std::optional<FramingRefusal> refusal = CheckRequestFraming(parser.get());
  ASSERT_TRUE(refusal.has_value());
  EXPECT_THAT(refusal->message, HasSubstr("more than one Host"));
}

}  // namespace
}  // namespace tollgate::server
