// Copyright tollgate authors. `tollgate serve` end to end: a real process on a loopback port,
// spoken to over HTTP/1.1.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/read_until.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/process.h"
#include "tests/support/redis_server.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using ::testing::HasSubstr;
using ::tollgate::testing::FreePort;
using ::tollgate::testing::MakeTempDir;
using ::tollgate::testing::Subprocess;
using ::tollgate::testing::WaitForPort;
using ::tollgate::testing::WriteFile;
using Response = ::tollgate::testing::HttpTestResponse;

constexpr auto kIoTimeout = ::tollgate::testing::kHttpIoTimeout;

// Buckets that refill so slowly (one token per 1000 s) that no test can see a refill.
constexpr char kConfig[] = R"(limits:
  burst:
    algorithm: token_bucket
    capacity: 5
    refill_per_second: 0.001
  wide:
    algorithm: token_bucket
    capacity: 10
    refill_per_second: 0.001
  narrow:
    algorithm: token_bucket
    capacity: 2
    refill_per_second: 0.001
)";

using Client = ::tollgate::testing::HttpTestClient;
using Server = ::tollgate::testing::ServeProcess;

std::string ReadAll(const std::string& path) { return ::tollgate::testing::ReadFileText(path); }

std::string Header(const Response& response, std::string_view name) {
  return ::tollgate::testing::HeaderValue(response, name);
}

nlohmann::json Json(const Response& response) {
  return nlohmann::json::parse(response.body(), nullptr, false);
}

class HttpApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = Server::Start(kConfig);
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(), 0) << "log:\n" << server_->log();
    }
  }

  std::unique_ptr<Server> server_;
};

TEST_F(HttpApiTest, AllowsTheBurstThenRefusesWithRetryAfter) {
  Client client(server_->port());
  for (int i = 0; i < 5; ++i) {
    std::optional<Response> response = client.Check(R"({"limit":"burst","key":"user:1"})");
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->result(), http::status::ok) << response->body();
    nlohmann::json json = Json(*response);
    EXPECT_EQ(json["allowed"], true);
    EXPECT_EQ(json["remaining"], 4 - i);
    EXPECT_EQ(json["limit"], 5);
    EXPECT_EQ(json["source"], "memory");
    // draft-11 by default: the limit's name is the policy's.
    EXPECT_EQ(Header(*response, "RateLimit-Policy"), R"("burst";q=5;w=5000)");
    EXPECT_EQ(Header(*response, "RateLimit").rfind(absl::StrCat(R"("burst";r=)", 4 - i, ";t="), 0),
              0u)
        << Header(*response, "RateLimit");
  }
  std::optional<Response> refused = client.Check(R"({"limit":"burst","key":"user:1"})");
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->result(), http::status::too_many_requests);
  nlohmann::json json = Json(*refused);
  EXPECT_EQ(json["allowed"], false);
  EXPECT_EQ(json["reason"], "over_limit");
  EXPECT_EQ(json["remaining"], 0);
  EXPECT_GT(json["retry_after_ms"].get<int64_t>(), 900'000);  // one token takes 1000 s
  int retry_after = std::stoi(Header(*refused, "Retry-After"));
  EXPECT_GE(retry_after, 900);
  EXPECT_LE(retry_after, 1000);

  // Another key has its own bucket.
  std::optional<Response> other = client.Check(R"({"limit":"burst","key":"user:2"})");
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->result(), http::status::ok);
}

TEST_F(HttpApiTest, BatchIsAllOrNothing) {
  Client client(server_->port());
  auto peek = [&](const std::string& limit) {
    std::optional<Response> response =
        client.Check(absl::StrCat(R"({"limit":")", limit, R"(","key":"u","cost":0})"));
    EXPECT_TRUE(response.has_value());
    return response.has_value() ? Json(*response)["remaining"].get<int64_t>() : -1;
  };

  std::optional<Response> allowed = client.Check(
      R"({"checks":[{"limit":"wide","key":"u","cost":3},{"limit":"narrow","key":"u"}]})");
  ASSERT_TRUE(allowed.has_value());
  EXPECT_EQ(allowed->result(), http::status::ok) << allowed->body();
  nlohmann::json json = Json(*allowed);
  EXPECT_EQ(json["allowed"], true);
  EXPECT_EQ(json["name"], "narrow");  // the least remaining speaks for the batch
  EXPECT_EQ(json["remaining"], 1);
  ASSERT_EQ(json["results"].size(), 2u);
  EXPECT_EQ(json["results"][0]["name"], "wide");
  EXPECT_EQ(json["results"][0]["remaining"], 7);
  EXPECT_EQ(peek("wide"), 7);
  EXPECT_EQ(peek("narrow"), 1);

  // "narrow" has 1 left and refuses 2: "wide" must not spend its 3.
  std::optional<Response> refused = client.Check(
      R"({"checks":[{"limit":"wide","key":"u","cost":3},{"limit":"narrow","key":"u","cost":2}]})");
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->result(), http::status::too_many_requests) << refused->body();
  json = Json(*refused);
  EXPECT_EQ(json["allowed"], false);
  EXPECT_EQ(json["name"], "narrow");
  EXPECT_EQ(json["reason"], "over_limit");
  EXPECT_EQ(json["results"][0]["allowed"], true);
  EXPECT_EQ(json["results"][0]["remaining"], 7);  // the state as it is: nothing was spent
  EXPECT_EQ(json["results"][1]["allowed"], false);
  EXPECT_FALSE(Header(*refused, "Retry-After").empty());
  EXPECT_EQ(peek("wide"), 7);
  EXPECT_EQ(peek("narrow"), 1);
}

TEST_F(HttpApiTest, BadInputIs400WithAnErrorAndTheConnectionKeepsServing) {
  std::string long_key(1025, 'k');
  std::string many_checks = R"({"checks":[)";
  for (int i = 0; i < 65; ++i) {
    many_checks += absl::StrCat(i == 0 ? "" : ",", R"({"limit":"wide","key":"u"})");
  }
  many_checks += "]}";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "invalid JSON"},
      {"", "empty body"},
      {R"({"limit":"wide","key":"u","cost":"3"})", "cost: expected an integer >= 0"},
      {R"({"limit":"wide","key":42})", "key: expected a string"},
      {R"({"key":"u"})", "limit: missing"},
      {R"({"limit":"wide"})", "key: missing"},
      {R"({"limit":"wide","key":"u","cost":-1})", "cost: expected an integer >= 0, got -1"},
      {R"({"limit":"nope","key":"u"})", "limit: unknown limit \"nope\""},
      {R"({"limit":"wide","key":""})", "key: must not be empty"},
      {absl::StrCat(R"({"limit":"wide","key":")", long_key, "\"}"), "key: longer than 1024"},
      {R"({"checks":[]})", "checks: must not be empty"},
      {many_checks, "checks: at most 64 items"},
      {R"({"checks":[{"limit":"wide","key":"u"},{"limit":"narrow","key":"u","cost":1.5}]})",
       "checks[1].cost"},
  };
  Client client(server_->port());
  for (const auto& [body, message] : cases) {
    std::optional<Response> response = client.Check(body);
    ASSERT_TRUE(response.has_value()) << body;
    EXPECT_EQ(response->result(), http::status::bad_request) << body;
    nlohmann::json json = Json(*response);
    ASSERT_TRUE(json.is_object() && json.contains("error")) << response->body();
    EXPECT_THAT(json["error"].get<std::string>(), HasSubstr(message)) << body;
    EXPECT_TRUE(response->keep_alive()) << body;
  }

  std::optional<Response> wrong_method = client.Send(http::verb::get, "/v1/check");
  ASSERT_TRUE(wrong_method.has_value());
  EXPECT_EQ(wrong_method->result(), http::status::method_not_allowed);
  EXPECT_EQ(Header(*wrong_method, "Allow"), "POST");
  EXPECT_TRUE(Json(*wrong_method).contains("error"));

  std::optional<Response> unknown_path = client.Send(http::verb::get, "/v2/nothing");
  ASSERT_TRUE(unknown_path.has_value());
  EXPECT_EQ(unknown_path->result(), http::status::not_found);
  EXPECT_TRUE(Json(*unknown_path).contains("error"));

  // None of the bad requests consumed anything, and the same connection still works.
  std::optional<Response> peek = client.Check(R"({"limit":"wide","key":"u","cost":0})");
  ASSERT_TRUE(peek.has_value());
  EXPECT_EQ(peek->result(), http::status::ok);
  EXPECT_EQ(Json(*peek)["remaining"], 10);
}

TEST_F(HttpApiTest, OversizedBodyIs400AndTheServerKeepsServing) {
  {
    Client client(server_->port());
    std::string body = absl::StrCat(R"({"limit":"wide","key":")", std::string(70'000, 'k'), "\"}");
    std::optional<Response> response = client.Check(body);
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->result(), http::status::bad_request);
    EXPECT_THAT(Json(*response)["error"].get<std::string>(), HasSubstr("larger than 65536"));
    EXPECT_FALSE(response->keep_alive());
  }
  Client client(server_->port());
  std::optional<Response> health = client.Send(http::verb::get, "/healthz");
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->result(), http::status::ok);
  EXPECT_EQ(Json(*health)["status"], "ok");
}

TEST_F(HttpApiTest, OversizedHeadAndMalformedHttpAreRefused) {
  {
    Client client(server_->port());
    std::string head = absl::StrCat(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ", std::string(10'000, 'a'), "\r\n\r\n");
    std::optional<Response> response = client.SendRaw(head);
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->result(), http::status::request_header_fields_too_large);
    EXPECT_TRUE(Json(*response).contains("error"));
  }
  {
    Client client(server_->port());
    std::optional<Response> response = client.SendRaw("GET /healthz HTTP/9.9 nonsense\r\n\r\n");
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->result(), http::status::bad_request);
    EXPECT_THAT(Json(*response)["error"].get<std::string>(), HasSubstr("malformed HTTP"));
  }
  Client client(server_->port());
  std::optional<Response> health = client.Send(http::verb::get, "/healthz");
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->result(), http::status::ok);
}

TEST_F(HttpApiTest, KeepAliveServesManyRequestsOnOneConnection) {
  Client client(server_->port());
  for (int i = 0; i < 20; ++i) {
    std::optional<Response> response =
        client.Check(absl::StrCat(R"({"limit":"wide","key":"keepalive-)", i, R"("})"));
    ASSERT_TRUE(response.has_value()) << "request " << i;
    EXPECT_EQ(response->result(), http::status::ok);
    EXPECT_TRUE(response->keep_alive());
  }
}

TEST_F(HttpApiTest, AnswersExpectContinue) {
  Client client(server_->port());
  std::string body = R"({"limit":"wide","key":"continue"})";
  std::string head = absl::StrCat(
      "POST /v1/check HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: ", body.size(),
      "\r\n\r\n");
  net::write(client.stream(), net::buffer(head));
  std::string interim;
  client.stream().expires_after(kIoTimeout);
  size_t head_size =
      net::read_until(client.stream().socket(), net::dynamic_buffer(interim), "\r\n\r\n");
  EXPECT_EQ(interim, "HTTP/1.1 100 Continue\r\n\r\n");
  EXPECT_EQ(head_size, interim.size());
  std::optional<Response> response = client.SendRaw(body);
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->result(), http::status::ok) << response->body();
}

TEST_F(HttpApiTest, StopsOnSigtermWithIdleConnectionsOpen) {
  Client idle(server_->port());
  ASSERT_TRUE(idle.Send(http::verb::get, "/healthz").has_value());
  EXPECT_EQ(server_->Stop(), 0) << server_->log();
  EXPECT_TRUE(idle.ClosedByServer());
  EXPECT_THAT(server_->log(), HasSubstr("stopped"));
  server_.reset();
}

// ---- Processes that must not serve. -------------------------------------------------------

struct RunResult {
  int exit_code = -1;
  std::string output;
};

// Runs `argv` to its end; the output is stdout and stderr.
RunResult RunToTheEnd(const std::vector<std::string>& argv) {
  const std::string log = MakeTempDir("tollgate-cli") + "/out.log";
  absl::StatusOr<Subprocess> process = Subprocess::Start(argv, log);
  EXPECT_TRUE(process.ok()) << process.status();
  if (!process.ok()) return {};
  RunResult run;
  run.exit_code = process->Wait();
  run.output = ReadAll(log);
  return run;
}

RunResult RunTollgate(std::vector<std::string> args) {
  args.insert(args.begin(), TOLLGATE_BINARY);
  return RunToTheEnd(args);
}

// `tollgate --version` names the project's version (CMakeLists.txt) and a commit of this
// repository, without a subcommand.
TEST(TollgateCliTest, VersionNamesTheProjectVersionAndACommitOfThisRepository) {
  RunResult run = RunTollgate({"--version"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::smatch match;
  ASSERT_TRUE(std::regex_match(
      run.output, match,
      std::regex(R"(tollgate ([0-9]+\.[0-9]+\.[0-9]+) \(commit ([0-9a-f]{12}|unknown)\)\n)")))
      << run.output;
  const std::string cmake = ReadAll(std::string(TOLLGATE_SOURCE_DIR) + "/CMakeLists.txt");
  EXPECT_THAT(cmake, HasSubstr("project(tollgate VERSION " + std::string(match[1]) + " "));
  const std::string commit = match[2];
  if (commit == "unknown") GTEST_SKIP() << "built outside a git checkout";
  absl::StatusOr<Subprocess> git =
      Subprocess::Start({"git", "-C", TOLLGATE_SOURCE_DIR, "cat-file", "-e", commit + "^{commit}"});
  ASSERT_TRUE(git.ok()) << git.status();
  EXPECT_EQ(git->Wait(), 0) << commit << " is not a commit of " << TOLLGATE_SOURCE_DIR;
}

TEST(TollgateCliTest, ValidateAcceptsAGoodFile) {
  std::string path = MakeTempDir("tollgate-validate") + "/good.yaml";
  WriteFile(path, kConfig);
  RunResult run = RunTollgate({"validate", "--config", path});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr(absl::StrCat(path, ": ok, 3 limits")));
}

TEST(TollgateCliTest, ValidateNamesFileAndLineOfAnError) {
  std::string path = MakeTempDir("tollgate-validate") + "/bad.yaml";
  WriteFile(path,
            "limits:\n"
            "  api:\n"
            "    algorithm: token_bucket\n"
            "    capacity: lots\n"
            "    refill_per_second: 1\n");
  RunResult run = RunTollgate({"validate", "--config", path});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr(absl::StrCat(path, ":4")));
  EXPECT_THAT(run.output, HasSubstr("capacity"));
}

// Runs `tollgate ARGS` in `dir` (so that paths print as given); output is stdout and stderr.
RunResult RunTollgateIn(const std::string& dir, const std::string& args) {
  return RunToTheEnd(
      {"sh", "-c", absl::StrCat("cd '", dir, "' && exec '", TOLLGATE_BINARY, "' ", args)});
}

// The text of the fenced block (```console) of docs/config.md that starts with `command`, and
// the ```yaml block before it (empty when there is none).
struct DocumentedRun {
  std::string yaml;
  std::string output;
};
DocumentedRun FindDocumentedRun(const std::string& command) {
  const std::string doc = ReadAll(std::string(TOLLGATE_SOURCE_DIR) + "/docs/config.md");
  const std::string start = "```console\n$ " + command + "\n";
  const size_t at = doc.find(start);
  EXPECT_NE(at, std::string::npos) << "docs/config.md has no run of: " << command;
  if (at == std::string::npos) return {};
  DocumentedRun run;
  const size_t output = at + start.size();
  run.output = doc.substr(output, doc.find("```", output) - output);
  const size_t yaml = doc.rfind("```yaml\n", at);
  if (yaml != std::string::npos) {
    const size_t body = yaml + std::string("```yaml\n").size();
    run.yaml = doc.substr(body, doc.find("```", body) - body);
  }
  return run;
}

// A file with several errors: `tollgate validate` prints every one, each as
// file:line:column: field: message, exactly as docs/config.md shows.
TEST(TollgateCliTest, ValidatePrintsEveryErrorOfAFileAsDocumented) {
  const DocumentedRun documented = FindDocumentedRun("tollgate validate --config limits.yaml");
  ASSERT_FALSE(documented.yaml.empty());
  const std::string dir = MakeTempDir("tollgate-validate");
  WriteFile(dir + "/limits.yaml", documented.yaml);
  RunResult run = RunTollgateIn(dir, "validate --config limits.yaml");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(run.output, documented.output);
  EXPECT_GE(std::count(run.output.begin(), run.output.end(), '\n'), 5) << run.output;
}

// Every file is read: errors of several files, and a missing one, come out together.
TEST(TollgateCliTest, ValidateReportsTheErrorsOfEveryFile) {
  const std::string dir = MakeTempDir("tollgate-validate");
  WriteFile(dir + "/typo.yaml", "limit:\n  api: {algorithm: fixed_window, limit: 5, window: 1s}\n");
  WriteFile(dir + "/envoy.yaml",
            "domian: tiffin\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
            "requests_per_unit: 1, unlimted: true}\n");
  RunResult run =
      RunTollgateIn(dir, "validate --config typo.yaml --config envoy.yaml --config missing.yaml");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(run.output,
            "typo.yaml:1:1: limit: unknown key; expected one of limits, memory_store (did you "
            "mean 'limits'?)\n"
            "envoy.yaml:1:1: (top level): unknown key 'domian', expected one of domain, "
            "descriptors, name (did you mean 'domain'?)\n"
            "envoy.yaml:4:54: descriptors[0].rate_limit: unknown key 'unlimted', expected one of "
            "unit, requests_per_unit, unit_multiplier, unlimited, name, replaces, algorithm, "
            "on_store_failure, timeout, durable, rlqs_on_store_failure (did you mean "
            "'unlimited'?)\n"
            "missing.yaml: no such file\n");
}

// `--config DIR` says it is a directory and what to pass instead, as docs/config.md shows;
// serve refuses it the same way, before listening.
TEST(TollgateCliTest, AConfigDirectorySaysWhatToPassInstead) {
  const DocumentedRun documented = FindDocumentedRun("tollgate validate --config conf");
  const std::string dir = MakeTempDir("tollgate-validate");
  ASSERT_EQ(::mkdir((dir + "/conf").c_str(), 0700), 0);
  WriteFile(dir + "/conf/limits.yaml", kConfig);
  WriteFile(dir + "/conf/envoy.yaml", "domain: tiffin\n");
  RunResult run = RunTollgateIn(dir, "validate --config conf");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(run.output, documented.output);

  // What it says to pass works.
  run = RunTollgateIn(dir, "validate --config conf/*.yaml");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "conf/envoy.yaml, conf/limits.yaml: ok, 3 limits, 1 domain\n");

  run = RunTollgateIn(dir, "serve --config conf --http 127.0.0.1:0 --grpc 127.0.0.1:0");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("conf: is a directory, expected a config file"));
  EXPECT_THAT(run.output, ::testing::Not(HasSubstr("listening")));
}

TEST(TollgateCliTest, ServeWithAnInvalidConfigExits1WithoutListening) {
  std::string path = MakeTempDir("tollgate-serve") + "/bad.yaml";
  WriteFile(path, "limits:\n  api:\n    algorithm: leaky_bucket\n");
  int port = FreePort();
  RunResult run =
      RunTollgate({"serve", "--config", path, "--http", absl::StrCat("127.0.0.1:", port)});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr(absl::StrCat(path, ":3")));
  EXPECT_THAT(run.output, ::testing::Not(HasSubstr("listening")));
  EXPECT_FALSE(WaitForPort(port, std::chrono::milliseconds(100)).ok());
}

// serve logs each error of an invalid config as a record of its own, and does not start.
TEST(TollgateCliTest, ServeLogsEveryConfigErrorOnItsOwnLine) {
  const std::string path = MakeTempDir("tollgate-serve") + "/bad.yaml";
  WriteFile(path,
            "limits:\n  api: {algorithm: fixed_window, limit: 0, window: 1s}\n"
            "  otp: {algorithm: fixed_window, limit: 1, window: 1s, timout: 5ms}\n");
  RunResult run = RunTollgate({"serve", "--config", path, "--http", "127.0.0.1:0"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("invalid config: " + path + ":2:41: limits.api.limit: "));
  EXPECT_THAT(run.output, HasSubstr("invalid config: " + path +
                                    ":3:56: limits.otp.timout: unknown key; expected one of"));
  EXPECT_THAT(run.output, ::testing::Not(HasSubstr("listening")));
}

TEST(TollgateCliTest, ServeWithAMissingConfigExits1) {
  std::string path = MakeTempDir("tollgate-serve") + "/missing.yaml";
  RunResult run = RunTollgate({"serve", "--config", path, "--http", "127.0.0.1:0"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr(path));
  EXPECT_THAT(run.output, ::testing::Not(HasSubstr("listening")));
}

TEST(TollgateCliTest, ServeWithAnUnreachableRedisExits1) {
  std::string path = MakeTempDir("tollgate-serve") + "/good.yaml";
  WriteFile(path, kConfig);
  RunResult run = RunTollgate({"serve", "--config", path, "--redis", "redis://127.0.0.1:1",
                               "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("127.0.0.1:1"));
  EXPECT_THAT(run.output, ::testing::Not(HasSubstr("listening")));
}

TEST(TollgateCliTest, ServeOnAPortInUseExits1) {
  std::string path = MakeTempDir("tollgate-serve") + "/good.yaml";
  WriteFile(path, kConfig);
  auto server = Server::Start(kConfig);
  ASSERT_NE(server, nullptr);
  RunResult run =
      RunTollgate({"serve", "--config", path, "--http", absl::StrCat("127.0.0.1:", server->port()),
                   "--grpc", "127.0.0.1:0"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("cannot listen on 127.0.0.1:"));
  EXPECT_EQ(server->Stop(), 0);
}

// A second server on a gRPC port already served refuses it (no port sharing, which would
// split Envoy's calls between two servers with different counters) and says nothing of
// listening: both ports are bound before either is announced.
TEST(TollgateCliTest, ServeOnAGrpcPortInUseExits1NamingIt) {
  std::string path = MakeTempDir("tollgate-serve") + "/good.yaml";
  WriteFile(path, kConfig);
  auto server = Server::Start(kConfig);
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->grpc_port(), 0) << server->log();
  const std::string grpc_address = absl::StrCat("127.0.0.1:", server->grpc_port());
  RunResult run =
      RunTollgate({"serve", "--config", path, "--http", "127.0.0.1:0", "--grpc", grpc_address});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr(absl::StrCat("cannot listen on ", grpc_address)));
  EXPECT_THAT(run.output, ::testing::Not(HasSubstr("listening")));
  EXPECT_EQ(server->Stop(), 0);
}

TEST(TollgateCliTest, CheckSubcommandTalksToAServer) {
  auto server = Server::Start(kConfig);
  ASSERT_NE(server, nullptr);
  std::string url = absl::StrCat("http://127.0.0.1:", server->port());
  RunResult allowed =
      RunTollgate({"check", "--url", url, "--limit", "narrow", "--key", "cli", "--cost", "2"});
  EXPECT_EQ(allowed.exit_code, 0) << allowed.output;
  EXPECT_THAT(allowed.output, HasSubstr("200 OK"));
  RunResult refused = RunTollgate({"check", "--url", url, "--limit", "narrow", "--key", "cli"});
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("429"));
  EXPECT_THAT(refused.output, HasSubstr("Retry-After:"));
  EXPECT_EQ(server->Stop(), 0);
}

// The JSON reply `tollgate check` printed: its last line.
nlohmann::json CheckReply(const RunResult& run) {
  std::string text = run.output;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return nlohmann::json::parse(text.substr(text.rfind('\n') + 1), nullptr, false);
}

// `--limit` repeated: one POST /v1/check batch, all or nothing, with a key and a cost for
// every limit or one each.
TEST(TollgateCliTest, CheckSeveralLimitsAtOnceIsAllOrNothing) {
  auto server = Server::Start(kConfig);
  ASSERT_NE(server, nullptr);
  const std::string url = absl::StrCat("http://127.0.0.1:", server->port());
  RunResult run = RunTollgate({"check", "--url", url, "--limit", "wide", "--limit", "narrow",
                               "--key", "u", "--cost", "1", "--cost", "2"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("200 OK\n"));
  nlohmann::json reply = CheckReply(run);
  ASSERT_EQ(reply["results"].size(), 2u) << run.output;
  EXPECT_EQ(reply["results"][0]["name"], "wide");
  EXPECT_EQ(reply["results"][0]["remaining"], 9);
  EXPECT_EQ(reply["results"][1]["name"], "narrow");
  EXPECT_EQ(reply["results"][1]["remaining"], 0);

  // narrow is spent: the batch is refused and wide is not charged.
  run = RunTollgate({"check", "--url", url, "--limit", "wide", "--limit", "narrow", "--key", "u"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("429 Too Many Requests\n"));
  EXPECT_THAT(run.output, HasSubstr("Retry-After: "));
  EXPECT_EQ(CheckReply(run)["allowed"], false);

  // One key per limit; a peek (cost 0) of each shows what the refused batch left.
  run = RunTollgate({"check", "--url", url, "--limit", "wide", "--limit", "narrow", "--key", "u",
                     "--key", "other", "--cost", "0"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  reply = CheckReply(run);
  EXPECT_EQ(reply["results"][0]["remaining"], 9) << run.output;
  EXPECT_EQ(reply["results"][1]["remaining"], 2) << run.output;
  EXPECT_EQ(server->Stop(), 0);
}

// `--domain` with `--descriptor`: Envoy's shape on POST /json, answered by the Envoy rules;
// `--cost 0` checks without counting.
TEST(TollgateCliTest, CheckSendsEnvoyDescriptorsWithDomain) {
  auto server = Server::Start(R"(domain: tiffin
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 1}
)");
  ASSERT_NE(server, nullptr);
  const std::string url = absl::StrCat("http://127.0.0.1:", server->port());
  const std::vector<std::string> check = {
      "check", "--url", url, "--domain", "tiffin", "--descriptor", "tenant=a,user=b"};
  std::vector<std::string> peek = check;
  peek.insert(peek.end(), {"--cost", "0"});
  for (int i = 0; i < 3; ++i) {
    RunResult run = RunTollgate(peek);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_EQ(CheckReply(run)["overallCode"], "OK") << run.output;
  }
  RunResult run = RunTollgate(check);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("200 OK\nX-RateLimit-Limit: 1"));
  run = RunTollgate(check);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("429 Too Many Requests\n"));
  EXPECT_EQ(CheckReply(run)["overallCode"], "OVER_LIMIT") << run.output;

  // Two descriptors, hits_addend 2: remote_address's 2 are spent at once.
  run = RunTollgate({"check", "--url", url, "--domain", "tiffin", "--descriptor",
                     "remote_address=10.0.0.1", "--descriptor", "tenant=c,user=d", "--cost", "2"});
  EXPECT_EQ(run.exit_code, 1) << run.output;  // user d allows 1, not 2
  nlohmann::json reply = CheckReply(run);
  ASSERT_EQ(reply["statuses"].size(), 2u) << run.output;
  EXPECT_EQ(reply["statuses"][0]["code"], "OK");
  EXPECT_EQ(reply["statuses"][1]["code"], "OVER_LIMIT");
  EXPECT_EQ(server->Stop(), 0);
}

// `serve --help` names every Redis URL form, not only redis://.
TEST(TollgateCliTest, ServeHelpListsEveryRedisUrlForm) {
  RunResult run = RunTollgate({"serve", "--help"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* form :
       {"redis://HOST:PORT", "rediss://", "redis-cluster://HOST:PORT,...",
        "redis-sentinel://HOST:PORT,.../MASTER", "rediss-cluster://", "rediss-sentinel://"}) {
    EXPECT_THAT(run.output, HasSubstr(form));
  }
}

// A combination of options that describes no request is a usage error (exit 2), named,
// before anything is sent.
TEST(TollgateCliTest, CheckRefusesOptionsThatDescribeNoRequest) {
  const std::string url = absl::StrCat("http://127.0.0.1:", FreePort());
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{}, "give --limit NAME --key KEY"},
      {{"--limit", "a"}, "--key: give one (for every limit) or one per --limit (1), got 0"},
      {{"--limit", "a", "--limit", "b", "--key", "1", "--key", "2", "--key", "3"},
       "--key: give one (for every limit) or one per --limit (2), got 3"},
      {{"--limit", "a", "--limit", "b", "--limit", "c", "--key", "k", "--cost", "1", "--cost", "2"},
       "--cost: give none (1 each), one (for every limit) or one per --limit (3), got 2"},
      {{"--domain", "d", "--descriptor", "a=b", "--limit", "x"}, "are two forms: give one"},
      {{"--domain", "d"}, "--domain needs at least one --descriptor key=value"},
      {{"--descriptor", "a=b"}, "--descriptor needs --domain"},
      {{"--domain", "d", "--descriptor", "=b"}, "--descriptor \"=b\": expected key=value"},
      {{"--domain", "d", "--descriptor", "a=b", "--cost", "1", "--cost", "2"},
       "with --domain, --cost is the request's hits_addend: give it once"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> argv = {"check", "--url", url};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult run = RunTollgate(argv);
    EXPECT_EQ(run.exit_code, 2) << message << "\n" << run.output;
    EXPECT_THAT(run.output, HasSubstr(message));
  }
}

// The seed's fleet: eight `tollgate serve --redis` sharing one Redis, one user's requests
// spread over all of them. The fleet admits what one limit allows, not eight times it.
TEST(ServeWithRedisTest, EightServersSharingOneRedisAdmitOneLimit) {
  auto redis = tollgate::testing::RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  constexpr char kFleetConfig[] = R"(limits:
  api_per_user:
    algorithm: token_bucket
    capacity: 20
    refill_per_second: 0.001
    timeout: 2s
  orders_per_user:
    algorithm: sliding_window
    limit: 7
    window: 1h
    timeout: 2s
)";
  std::vector<std::unique_ptr<Server>> fleet;
  for (int i = 0; i < 8; ++i) {
    fleet.push_back(Server::Start(kFleetConfig, {"--redis", (*redis)->url()}));
    ASSERT_NE(fleet.back(), nullptr);
  }
  // 4 client threads, each sending to every server in turn: 160 requests per limit.
  std::atomic<int> api_allowed{0}, orders_allowed{0}, answered{0};
  std::vector<std::thread> clients;
  clients.reserve(4);
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (size_t s = 0; s < fleet.size(); ++s) {
          Client client(fleet[(s + t) % fleet.size()]->port());
          auto api = client.Check(R"({"limit":"api_per_user","key":"user:42"})");
          auto orders = client.Check(R"({"limit":"orders_per_user","key":"user:42"})");
          if (!api || !orders) continue;
          answered += 2;
          if (api->result_int() == 200) {
            ++api_allowed;
            EXPECT_EQ(Json(*api)["source"], "redis");
          }
          if (orders->result_int() == 200) ++orders_allowed;
        }
      }
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(answered.load(), 2 * 4 * 5 * 8);
  EXPECT_EQ(api_allowed.load(), 20);
  EXPECT_EQ(orders_allowed.load(), 7);
  for (auto& server : fleet) EXPECT_EQ(server->Stop(), 0) << server->log();
}

// Envoy's JSON shape on the HTTP port: the same rules and counters as the gRPC API.
TEST(ServeEnvoyJsonTest, PostJsonAnswersEnvoysShape) {
  constexpr char kEnvoyConfig[] = R"(domain: shop
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
)";
  auto server = Server::Start(kEnvoyConfig);
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  const std::string body =
      R"({"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]})";
  for (int i = 0; i < 2; ++i) {
    auto ok = client.Send(http::verb::post, "/json", body);
    ASSERT_TRUE(ok.has_value());
    EXPECT_EQ(ok->result_int(), 200) << ok->body();
    EXPECT_EQ(Json(*ok)["overallCode"], "OK") << ok->body();
  }
  auto over = client.Send(http::verb::post, "/json", body);
  ASSERT_TRUE(over.has_value());
  EXPECT_EQ(over->result_int(), 429) << over->body();
  EXPECT_EQ(Json(*over)["overallCode"], "OVER_LIMIT") << over->body();
  auto bad = client.Send(http::verb::post, "/json", "{not json");
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->result_int(), 400);
  EXPECT_EQ(server->Stop(), 0);
}

// ---- Peeking: cost 0. ------------------------------------------------------------------

// What a cost-0 check tells, as docs/http.md ("Peeking") says, in memory and in Redis: it
// consumes nothing and is answered 200 with `allowed: true` even on a spent key; whether a
// cost-1 check would pass now is `remaining >= 1`; when it will is its `retry_after_ms` (0:
// now), for every algorithm.
class PeekTest : public ::testing::TestWithParam<bool> {};

TEST_P(PeekTest, SaysWhetherAndWhenACostOfOneWouldPass) {
  // One token per 1000 s, one window a day: nothing refills during the test. A 2 s store
  // timeout keeps a loaded machine from answering from the fallback.
  constexpr char kPeekConfig[] = R"(limits:
  bucket: {algorithm: token_bucket, capacity: 2, refill_per_second: 0.001, timeout: 2s}
  window: {algorithm: fixed_window, limit: 2, window: 1d, timeout: 2s}
  sliding: {algorithm: sliding_window, limit: 2, window: 1d, timeout: 2s}
)";
  std::unique_ptr<tollgate::testing::RedisServer> redis;
  std::vector<std::string> args;
  if (GetParam()) {
    auto started = tollgate::testing::RedisServer::Start();
    ASSERT_TRUE(started.ok()) << started.status();
    redis = std::move(*started);
    args = {"--redis", redis->url(), "--instances", "1"};
  }
  auto server = Server::Start(kPeekConfig, args);
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  auto check = [&](const std::string& limit, int cost) {
    std::optional<Response> response = client.Check(
        absl::StrCat(R"({"limit":")", limit, R"(","key":"peek:user","cost":)", cost, "}"));
    EXPECT_TRUE(response.has_value());
    return response.has_value() ? *response : Response();
  };
  for (const std::string limit : {"bucket", "window", "sliding"}) {
    SCOPED_TRACE(limit);
    Response fresh = check(limit, 0);
    EXPECT_EQ(fresh.result(), http::status::ok);
    EXPECT_EQ(Json(fresh)["remaining"], 2);
    EXPECT_EQ(Json(fresh)["source"], GetParam() ? "redis" : "memory");
    EXPECT_EQ(Json(check(limit, 0))["remaining"], 2);  // the peek consumed nothing
    ASSERT_EQ(check(limit, 1).result(), http::status::ok);
    Response one_left = check(limit, 0);
    EXPECT_EQ(Json(one_left)["remaining"], 1);  // >= 1: a cost of 1 passes now
    EXPECT_EQ(Json(one_left)["retry_after_ms"], 0);
    ASSERT_EQ(check(limit, 1).result(), http::status::ok);

    Response spent = check(limit, 0);
    EXPECT_EQ(spent.result(), http::status::ok) << spent.body();
    nlohmann::json peek = Json(spent);
    EXPECT_EQ(peek["allowed"], true);
    EXPECT_EQ(peek["remaining"], 0);  // 0: a cost of 1 is refused now
    EXPECT_FALSE(peek.contains("reason"));
    // It asked for nothing, so it is told to wait for nothing.
    EXPECT_EQ(spent.find(http::field::retry_after), spent.end());

    Response refused = check(limit, 1);
    EXPECT_EQ(refused.result(), http::status::too_many_requests);
    const int64_t retry_after_ms = Json(refused)["retry_after_ms"];
    const int64_t peek_retry_after_ms = peek["retry_after_ms"];
    EXPECT_GT(retry_after_ms, 0);
    // When a cost of 1 passes: what the refusal says, seconds apart at most.
    EXPECT_NEAR(peek_retry_after_ms, retry_after_ms, 5000);
    if (limit == "window") {
      EXPECT_EQ(peek_retry_after_ms, peek["reset_after_ms"]);
    } else if (limit == "bucket") {
      // One token refills in 1 / refill_per_second = 1000 s.
      EXPECT_NEAR(peek_retry_after_ms, 1'000'000, 5000);
    }
    EXPECT_EQ(Json(check(limit, 0))["remaining"], 0);  // the refusal consumed nothing
  }
}

INSTANTIATE_TEST_SUITE_P(MemoryAndRedis, PeekTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Redis" : "Memory";
                         });

}  // namespace
}  // namespace tollgate
