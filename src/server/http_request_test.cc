// Copyright tollgate authors.
#include "src/server/http_request.h"

#include <string>
#include <string_view>

#include "boost/asio/buffer.hpp"
#include "boost/beast/http/error.hpp"
#include "gtest/gtest.h"

namespace tollgate::server {
namespace {

namespace http = boost::beast::http;

// Feeds `wire` to `parser` a byte at a time, as a slow client sends it; the error that
// stopped it, or none.
boost::beast::error_code Feed(HttpRequestParser& parser, std::string_view wire) {
  std::string buffered;
  boost::beast::error_code error;
  for (char c : wire) {
    buffered.push_back(c);
    const size_t used = parser.put(boost::asio::buffer(buffered), error);
    buffered.erase(0, used);
    if (error == http::error::need_more) {
      error = {};
      continue;
    }
    if (error) return error;
  }
  return error;
}

TEST(HttpRequestParserTest, KeepsTheRequestLineBodyAndTheFieldsTheApiReads) {
  HttpRequestParser parser;
  parser.eager(true);
  ASSERT_FALSE(Feed(parser,
                    "POST /v1/check?x=1 HTTP/1.1\r\n"
                    "host: tollgate\r\n"
                    "Content-Type: application/json\r\n"
                    "Expect: 100-continue\r\n"
                    "Content-Length: 14\r\n"
                    "\r\n"
                    "{\"limit\":\"a\"}\n"));
  ASSERT_TRUE(parser.is_done());
  const HttpRequest& request = parser.get();
  EXPECT_EQ(request.method(), http::verb::post);
  EXPECT_EQ(request.method_string(), "POST");
  EXPECT_EQ(request.target(), "/v1/check?x=1");
  EXPECT_EQ(request.version(), 11u);
  EXPECT_TRUE(request.keep_alive());
  EXPECT_EQ(request.host_fields(), 1);
  EXPECT_TRUE(request.expects_continue());
  EXPECT_FALSE(request.has_transfer_encoding());
  EXPECT_EQ(request.body(), "{\"limit\":\"a\"}\n");
}

TEST(HttpRequestParserTest, KeepAliveFollowsVersionAndConnection) {
  struct Case {
    const char* head;
    bool keep_alive;
  };
  for (const Case& c : {
           Case{"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n", true},
           Case{"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", false},
           Case{"GET /healthz HTTP/1.0\r\n\r\n", false},
           Case{"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true},
       }) {
    HttpRequestParser parser;
    ASSERT_FALSE(Feed(parser, c.head)) << c.head;
    ASSERT_TRUE(parser.is_done()) << c.head;
    EXPECT_EQ(parser.get().keep_alive(), c.keep_alive) << c.head;
  }
}

TEST(HttpRequestParserTest, AChunkedBodyIsJoinedAndItsTrailerFramesNothing) {
  HttpRequestParser parser;
  parser.eager(true);
  ASSERT_FALSE(Feed(parser,
                    "POST /v1/check HTTP/1.1\r\n"
                    "Host: tollgate\r\n"
                    "Transfer-Encoding: chunked\r\n"
                    "\r\n"
                    "3\r\n{\"l\r\n"
                    "2\r\nim\r\n"
                    "0\r\n"
                    "Host: trailer\r\n"
                    "\r\n"));
  ASSERT_TRUE(parser.is_done());
  EXPECT_EQ(parser.get().body(), "{\"lim");
  EXPECT_EQ(parser.get().host_fields(), 1) << "a trailer field is not the head's";
  EXPECT_EQ(parser.get().transfer_encoding(), "chunked");
}

TEST(HttpRequestParserTest, RepeatedFramingFieldsAreAllKept) {
  HttpRequestParser parser;
  ASSERT_FALSE(Feed(parser,
                    "POST /v1/check HTTP/1.1\r\n"
                    "Host: a\r\n"
                    "HOST: b\r\n"
                    "Transfer-Encoding: gzip\r\n"
                    "transfer-encoding: chunked\r\n"
                    "\r\n"));
  ASSERT_TRUE(parser.is_header_done());
  EXPECT_EQ(parser.get().host_fields(), 2);
  EXPECT_TRUE(parser.get().has_transfer_encoding());
  EXPECT_EQ(parser.get().transfer_encoding(), "gzip, chunked");
}

TEST(HttpRequestParserTest, LimitsAreBeastsParsers) {
  HttpRequestParser large_body;
  large_body.body_limit(4);
  EXPECT_EQ(Feed(large_body, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n12345"),
            http::error::body_limit);

  HttpRequestParser large_head;
  large_head.header_limit(32);
  EXPECT_EQ(Feed(large_head, "GET / HTTP/1.1\r\nHost: a\r\nX-Padding: 0123456789abcdef\r\n\r\n"),
            http::error::header_limit);

  HttpRequestParser malformed;
  EXPECT_EQ(Feed(malformed,
                 "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n"
                 "Content-Length: 2\r\n\r\n"),
            http::error::bad_content_length);
}

TEST(HttpRequestTest, BuiltRequestHasTheVersionsDefaultKeepAlive) {
  HttpRequest http11(http::verb::post, "/v1/check", 11);
  EXPECT_TRUE(http11.keep_alive());
  EXPECT_EQ(http11.method_string(), "POST");
  EXPECT_EQ(http11.host_fields(), 0);
  EXPECT_FALSE(HttpRequest(http::verb::get, "/", 10).keep_alive());
  HttpRequest expect(http::verb::post, "/", 11);
  expect.add_field("Expect", "something-else");
  EXPECT_FALSE(expect.expects_continue());
}

}  // namespace
}  // namespace tollgate::server
