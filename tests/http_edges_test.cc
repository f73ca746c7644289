// Copyright tollgate authors. The edges of `tollgate serve`'s HTTP port, end to end: error
// bodies that are JSON and quote no raw input, and HTTP/1.1 framing as a proxy expects it.
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "boost/asio/write.hpp"
#include "boost/beast/http.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/process.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

namespace http = boost::beast::http;
using ::testing::HasSubstr;
using ::tollgate::testing::HttpTestClient;
using ::tollgate::testing::HttpTestResponse;
using ::tollgate::testing::ServeProcess;

constexpr char kLimits[] = R"(limits:
  api:
    algorithm: token_bucket
    capacity: 1000000
    refill_per_second: 100
)";

constexpr char kEnvoy[] = R"(domain: shop
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000}
)";

// Both formats in one server: /v1/check on `limits:`, POST /json on Envoy's rules.
std::unique_ptr<ServeProcess> StartServer(const std::vector<std::string>& extra_args = {}) {
  const std::string dir = ::tollgate::testing::MakeTempDir("tollgate-edges");
  const std::string envoy_path = dir + "/envoy.yaml";
  ::tollgate::testing::WriteFile(envoy_path, kEnvoy);
  std::vector<std::string> args = {"--config", envoy_path};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  return ServeProcess::Start(kLimits, args);
}

// Bytes a client may put where a string is expected; none may come back in a reply.
const std::vector<std::string>& RawPayloads() {
  static const auto* payloads = new std::vector<std::string>{
      "\xC0\xAF",          // overlong '/'
      "\xFF\xFE",          // never valid
      "\xED\xA0\x80",      // an encoded surrogate
      "\xE2\x82",          // cut short
      "\xF4\x90\x80\x80",  // above U+10FFFF
      std::string("\x00", 1),
      "\x01\x02\x1B[31m",  // control bytes and an ANSI escape
      "\n\r\t",
      "\x7F",
  };
  return *payloads;
}

// Escapes that decode to what must not be echoed raw.
// Escapes, each with the raw bytes it stands for, which must not come back either.
const std::vector<std::pair<std::string, std::string>>& EscapedPayloads() {
  static const auto* payloads = new std::vector<std::pair<std::string, std::string>>{
      {"\\u0001\\u001b", "\x01\x1B"},
      {"\\ud800", "\xED\xA0\x80"},  // a lone surrogate
      {"\\u0000", std::string("\x00", 1)},
      {"\\u007f", "\x7F"},
  };
  return *payloads;
}

// Request bodies with `@` where a payload goes: every string position, field names included.
const std::vector<std::string>& CheckTemplates() {
  static const auto* templates = new std::vector<std::string>{
      R"({"limit":"@","key":"k"})",
      R"({"limit":"a@","key":"k"})",
      R"({"limit":"api","key":"@"})",
      R"({"limit":"api","key":"k","cost":"@"})",
      R"({"@":"api","key":"k"})",
      R"({"limit":"api","key":"k","@":1})",
      R"({"checks":[{"limit":"api","key":"k"},{"limit":"@","key":"k"}]})",
      R"({"checks":[{"limit":"api","key":"@"}]})",
      R"({"checks":[{"@":"api","key":"k"}]})",
      R"({"checks":"@"})",
      R"("@")",
      R"(["@"])",
      R"({"limit":@,"key":"k"})",
      R"(@)",
  };
  return *templates;
}

const std::vector<std::string>& EnvoyTemplates() {
  // Some entries are two literals joined (long lines), not a missing comma.
  static const auto* templates = new std::vector<std::string>{
      R"({"domain":"@","descriptors":[{"entries":[{"key":"user","value":"u"}]}]})",
      R"({"domain":"shop","descriptors":[{"entries":[{"key":"@","value":"u"}]}]})",
      R"({"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"@"}]}]})",
      R"({"domain":"shop","descriptors":[{"entries":[{"key":"user","@":"u"}]}]})",
      R"({"@":"shop","descriptors":[{"entries":[{"key":"user","value":"u"}]}]})",
      R"({"domain":"shop","descriptors":[{"@":[{"key":"user","value":"u"}]}]})",
      R"({"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"u"}],)"  // NOLINT(bugprone-suspicious-missing-comma)
      R"("limit":{"requests_per_unit":1,"unit":"@"}}]})",
      R"({"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"u"}],)"  // NOLINT(bugprone-suspicious-missing-comma)
      R"("hits_addend":"@"}]})",
      R"({"domain":"shop","hitsAddend":"@","descriptors":[]})",
      R"({"domain":"shop","descriptors":"@"})",
      R"({"domain":@})",
      R"(@)",
  };
  return *templates;
}

// Sends `body` to `target` and checks that the reply is JSON without `payload`'s raw bytes.
void ExpectCleanReply(int port, const std::string& target, const std::string& body,
                      const std::string& payload) {
  HttpTestClient client(port);
  std::optional<HttpTestResponse> reply = client.Send(http::verb::post, target, body);
  const std::string shown_body =
      nlohmann::json(body).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  ASSERT_TRUE(reply.has_value()) << target << " " << shown_body;
  const nlohmann::json parsed = nlohmann::json::parse(reply->body(), nullptr, false);
  EXPECT_FALSE(parsed.is_discarded())
      << target << " " << shown_body << " -> not JSON: "
      << nlohmann::json(reply->body())
             .dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  EXPECT_EQ(reply->body().find(payload), std::string::npos)
      << target << " " << shown_body << " -> echoes the payload";
  if (reply->result_int() >= 400) {
    EXPECT_TRUE(parsed.is_object() && parsed.contains("error") && parsed["error"].is_string())
        << target << " " << shown_body << " -> " << reply->result_int();
  }
}

TEST(HttpErrorBodyTest, EveryStringPositionGivesJsonThatDoesNotEchoRawBytes) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  int sent = 0;
  for (const auto& [target, templates] :
       {std::pair{"/v1/check", &CheckTemplates()}, std::pair{"/json", &EnvoyTemplates()}}) {
    for (const std::string& with_marker : *templates) {
      for (const std::string& payload : RawPayloads()) {
        ExpectCleanReply(server->port(), target,
                         absl::StrReplaceAll(with_marker, {{"@", absl::StrCat("x", payload, "y")}}),
                         payload);
        ++sent;
      }
      for (const auto& [escaped, raw] : EscapedPayloads()) {
        ExpectCleanReply(server->port(), target, absl::StrReplaceAll(with_marker, {{"@", escaped}}),
                         raw);
        ++sent;
      }
    }
  }
  EXPECT_GT(sent, 200);
  // A path with invalid bytes gets a JSON 404.
  HttpTestClient client(server->port());
  std::optional<HttpTestResponse> not_found =
      client.SendRaw("GET /a\xC0\xAF\xFF HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(not_found.has_value());
  EXPECT_EQ(not_found->result(), http::status::not_found);
  EXPECT_FALSE(nlohmann::json::parse(not_found->body(), nullptr, false).is_discarded());
  EXPECT_EQ(not_found->body().find("\xC0\xAF"), std::string::npos);
  EXPECT_EQ(server->Stop(), 0) << server->log();
}

TEST(HttpErrorBodyTest, NamesTheFieldThatIsNotUtf8) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  HttpTestClient client(server->port());
  std::optional<HttpTestResponse> envoy =
      client.Send(http::verb::post, "/json",
                  "{\"domain\":\"shop\",\"descriptors\":[{\"entries\":[{\"key\":\"\xC0\xAF\","
                  "\"value\":\"v\"}]}]}");
  ASSERT_TRUE(envoy.has_value());
  EXPECT_EQ(envoy->result(), http::status::bad_request);
  EXPECT_EQ(nlohmann::json::parse(envoy->body())["error"],
            "descriptors[0].entries[0].key: not valid UTF-8");
  std::optional<HttpTestResponse> check =
      client.Check("{\"checks\":[{\"limit\":\"api\",\"key\":\"\xFF\"}]}");
  ASSERT_TRUE(check.has_value());
  EXPECT_EQ(check->result(), http::status::bad_request);
  EXPECT_EQ(nlohmann::json::parse(check->body())["error"], "checks[0].key: not valid UTF-8");
  std::optional<HttpTestResponse> unknown = client.Check(R"({"limit":"no\u0001pe","key":"k"})");
  ASSERT_TRUE(unknown.has_value());
  EXPECT_EQ(unknown->result(), http::status::bad_request);
  EXPECT_EQ(nlohmann::json::parse(unknown->body())["error"],
            "limit: unknown limit \"no\\u0001pe\"");
  EXPECT_EQ(server->Stop(), 0) << server->log();
}

// ---- HTTP/1.1 framing ----------------------------------------------------------------------

class HttpFramingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(), 0) << server_->log();
    }
  }

  // Sends `bytes` on a fresh connection; the reply, or nullopt if the server only closed.
  std::optional<HttpTestResponse> Raw(const std::string& bytes) {
    HttpTestClient client(server_->port());
    return client.SendRaw(bytes);
  }

  // The server still answers a good request.
  void ExpectStillServing() {
    HttpTestClient client(server_->port());
    std::optional<HttpTestResponse> health = client.Send(http::verb::get, "/healthz");
    ASSERT_TRUE(health.has_value());
    EXPECT_EQ(health->result(), http::status::ok);
  }

  std::unique_ptr<ServeProcess> server_;
};

constexpr char kCheckBody[] = R"({"limit":"api","key":"k"})";

std::string Chunked(const std::string& body) {
  return absl::StrCat(absl::Hex(body.size()), "\r\n", body, "\r\n0\r\n\r\n");
}

TEST_F(HttpFramingTest, AnUnimplementedTransferCodingIs501AndTheConnectionCloses) {
  for (const char* coding : {"gzip, chunked", "deflate,chunked", "x-custom, chunked"}) {
    HttpTestClient client(server_->port());
    std::optional<HttpTestResponse> reply = client.SendRaw(
        absl::StrCat("POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ", coding,
                     "\r\n\r\n", Chunked(kCheckBody)));
    ASSERT_TRUE(reply.has_value()) << coding;
    EXPECT_EQ(reply->result(), http::status::not_implemented) << coding;
    nlohmann::json body = nlohmann::json::parse(reply->body(), nullptr, false);
    EXPECT_THAT(body["error"].get<std::string>(), HasSubstr("transfer coding")) << coding;
    EXPECT_FALSE(reply->keep_alive());
    EXPECT_TRUE(client.ClosedByServer()) << coding;
  }
  ExpectStillServing();
}

TEST_F(HttpFramingTest, ChunkedAloneIsServed) {
  std::optional<HttpTestResponse> reply =
      Raw(absl::StrCat("POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
                       Chunked(kCheckBody)));
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->result(), http::status::ok) << reply->body();
}

TEST_F(HttpFramingTest, Http11WithoutHostIs400) {
  HttpTestClient client(server_->port());
  std::optional<HttpTestResponse> reply = client.SendRaw("GET /healthz HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->result(), http::status::bad_request);
  EXPECT_THAT(nlohmann::json::parse(reply->body())["error"].get<std::string>(), HasSubstr("Host"));
  EXPECT_TRUE(client.ClosedByServer());
  // Two Host fields are as bad as none.
  std::optional<HttpTestResponse> twice =
      Raw("GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
  ASSERT_TRUE(twice.has_value());
  EXPECT_EQ(twice->result(), http::status::bad_request);
  // HTTP/1.0 needs no Host.
  std::optional<HttpTestResponse> old = Raw("GET /healthz HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->result(), http::status::ok);
  // An empty Host is allowed (RFC 9112 3.2: the authority may be empty).
  std::optional<HttpTestResponse> empty = Raw("GET /healthz HTTP/1.1\r\nHost:\r\n\r\n");
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(empty->result(), http::status::ok);
  ExpectStillServing();
}

TEST_F(HttpFramingTest, AHostThatIsNotAHostIs400) {
  for (const char* host : {"12}7\\.0.0.1", "I127.0.0.1", "host name"}) {
    HttpTestClient client(server_->port());
    std::optional<HttpTestResponse> reply =
        client.SendRaw(absl::StrCat("GET /healthz HTTP/1.1\r\nHost: ", host, "\r\n\r\n"));
    ASSERT_TRUE(reply.has_value()) << host;
    EXPECT_EQ(reply->result(), http::status::bad_request) << host;
    EXPECT_THAT(nlohmann::json::parse(reply->body())["error"].get<std::string>(),
                HasSubstr("not a host"));
    EXPECT_TRUE(client.ClosedByServer()) << host;
  }
  std::optional<HttpTestResponse> port =
      Raw("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n");
  ASSERT_TRUE(port.has_value());
  EXPECT_EQ(port->result(), http::status::ok);
  ExpectStillServing();
}

// A client that sends its request and closes its side gets its answer, and then the
// connection closes at the end of its input, not at the idle timeout (a minute here; the
// test client waits 10 s at most for the close). The request goes in two writes, so that
// its last bytes and the end of the stream arrive together.
TEST(HttpHalfCloseTest, AClientThatClosedItsSideIsClosedAfterItsAnswer) {
  std::unique_ptr<ServeProcess> server = StartServer({"--http-timeout-ms", "60000"});
  ASSERT_NE(server, nullptr);
  for (const std::string& request :
       {std::string("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"),
        absl::StrCat("POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: ",
                     std::strlen(kCheckBody), "\r\n\r\n", kCheckBody)}) {
    HttpTestClient client(server->port());
    boost::beast::error_code error;
    boost::asio::write(client.stream(), boost::asio::buffer(request.data(), 10), error);
    ASSERT_FALSE(error);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    boost::asio::write(client.stream(),
                       boost::asio::buffer(request.data() + 10, request.size() - 10), error);
    ASSERT_FALSE(error);
    client.stream().socket().shutdown(boost::asio::ip::tcp::socket::shutdown_send, error);
    HttpTestResponse reply;
    boost::beast::http::read(client.stream(), client.buffer(), reply, error);
    ASSERT_FALSE(error) << error.message();
    EXPECT_EQ(reply.result(), http::status::ok) << reply.body();
    EXPECT_TRUE(client.ClosedByServer());
  }
  EXPECT_EQ(server->Stop(), 0);
}

// Refused by Beast's parser before CheckRequestFraming was added; kept so that a rewritten
// session keeps refusing them.
TEST_F(HttpFramingTest, ConflictingLengthsObsFoldAndBareLfAreRefused) {
  const std::vector<std::string> requests = {
      absl::StrCat("POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n",
                   Chunked(kCheckBody)),
      absl::StrCat("POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 25\r\n"
                   "Content-Length: 26\r\n\r\n",
                   kCheckBody),
      // obs-fold in a framing field (Beast joins a fold with SP, as RFC 9112 5.2 allows).
      absl::StrCat("POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n 5\r\n\r\n",
                   kCheckBody),
      absl::StrCat("POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                   " chunked\r\n\r\n",
                   Chunked(kCheckBody)),
      "GET /healthz HTTP/1.1\nHost: x\n\n",
      "GET /healthz HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n",
  };
  for (const std::string& request : requests) {
    HttpTestClient client(server_->port());
    std::optional<HttpTestResponse> reply = client.SendRaw(request);
    const std::string shown = absl::CHexEscape(request);
    if (reply.has_value()) {
      EXPECT_EQ(reply->result(), http::status::bad_request) << shown;
      EXPECT_FALSE(nlohmann::json::parse(reply->body(), nullptr, false).is_discarded()) << shown;
    }
    EXPECT_TRUE(client.ClosedByServer()) << shown;
  }
  ExpectStillServing();
}

}  // namespace
}  // namespace tollgate
