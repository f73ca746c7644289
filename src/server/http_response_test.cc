// Copyright tollgate authors.
#include "src/server/http_response.h"

#include <string>

#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http.hpp"
#include "gtest/gtest.h"

namespace tollgate::server {
namespace {

namespace http = boost::beast::http;

// What a client reads from `response`'s wire text: Beast's own response parser.
http::response<http::string_body> ParseWire(const HttpResponse& response) {
  std::string wire;
  response.AppendTo(wire);
  http::response_parser<http::string_body> parser;
  parser.eager(true);
  boost::beast::error_code error;
  const size_t used = parser.put(boost::asio::buffer(wire), error);
  EXPECT_FALSE(error) << error.message() << " in:\n" << wire;
  EXPECT_EQ(used, wire.size()) << "bytes after the response:\n" << wire;
  EXPECT_TRUE(parser.is_done()) << wire;
  return parser.release();
}

TEST(HttpResponseTest, ClientReadsStatusFieldsAndBodyAsAdded) {
  HttpResponse response(http::status::too_many_requests, 11);
  response.add_field("Content-Type", "application/json");
  response.add_field("RateLimit-Policy", R"("api";q=5;w=1)");
  response.add_field("Retry-After", "1");
  response.body() = "{\"allowed\":false}\n";

  const auto read = ParseWire(response);
  EXPECT_EQ(read.result(), http::status::too_many_requests);
  EXPECT_EQ(read.reason(), "Too Many Requests");
  EXPECT_EQ(read.version(), 11u);
  EXPECT_EQ(read[http::field::content_type], "application/json");
  EXPECT_EQ(read["RateLimit-Policy"], R"("api";q=5;w=1)");
  EXPECT_EQ(read[http::field::retry_after], "1");
  EXPECT_EQ(read[http::field::content_length], "18");
  EXPECT_EQ(read.body(), "{\"allowed\":false}\n");
  EXPECT_TRUE(read.keep_alive());
  // The fields go out in the order added, Content-Length after them.
  std::string names;
  for (const auto& field : read) names += std::string(field.name_string()) + ",";
  EXPECT_EQ(names, "Content-Type,RateLimit-Policy,Retry-After,Content-Length,");
}

TEST(HttpResponseTest, ConnectionFieldFollowsVersionAndKeepAlive) {
  struct Case {
    unsigned version;
    bool keep_alive;
    const char* connection;  // the field written, "" for none
  };
  for (const Case& c : {Case{11, true, ""}, Case{11, false, "close"}, Case{10, true, "keep-alive"},
                        Case{10, false, ""}}) {
    HttpResponse response(http::status::ok, c.version);
    response.keep_alive(c.keep_alive);
    const auto read = ParseWire(response);
    SCOPED_TRACE(testing::Message()
                 << "HTTP/1." << c.version % 10 << " keep_alive " << c.keep_alive);
    EXPECT_EQ(read.version(), c.version);
    EXPECT_EQ(read[http::field::connection], c.connection);
    EXPECT_EQ(read.keep_alive(), c.keep_alive);
    EXPECT_EQ(read[http::field::content_length], "0");
  }
}

TEST(HttpResponseTest, FieldLooksUpByNameIgnoringCase) {
  HttpResponse response;
  response.add_field("Server", "tollgate");
  response.add_field("RateLimit", R"("api";r=4;t=1)");
  EXPECT_EQ(response.field("ratelimit"), R"("api";r=4;t=1)");
  EXPECT_EQ(response.field("SERVER"), "tollgate");
  EXPECT_EQ(response.field("RateLimit-Policy"), "") << "a prefix of a name is another name";
  EXPECT_EQ(response.field("Rate"), "");
  EXPECT_EQ(HttpResponse().field("Server"), "");
}

TEST(HttpResponseTest, AppendToKeepsWhatTheBufferHeld) {
  HttpResponse first(http::status::ok, 11);
  first.body() = "a";
  HttpResponse second(http::status::not_found, 11);
  second.body() = "bc";
  std::string wire;
  first.AppendTo(wire);
  const size_t first_size = wire.size();
  second.AppendTo(wire);
  // Two pipelined responses, read back one after the other.
  http::response_parser<http::string_body> parser;
  parser.eager(true);
  boost::beast::error_code error;
  EXPECT_EQ(parser.put(boost::asio::buffer(wire), error), first_size);
  EXPECT_FALSE(error);
  EXPECT_EQ(parser.get().body(), "a");
  http::response_parser<http::string_body> next;
  next.eager(true);
  next.put(boost::asio::buffer(wire) + first_size, error);
  EXPECT_FALSE(error);
  EXPECT_EQ(next.get().result(), http::status::not_found);
  EXPECT_EQ(next.get().body(), "bc");
}

}  // namespace
}  // namespace tollgate::server
