// Copyright tollgate authors. `tollgate serve`'s options from the environment, the Redis
// password from a file or the environment instead of the command line (and never in a log,
// a reply or /proc/PID/cmdline), and the memory store's key cap with its metrics. Real
// processes: tollgate serve, and redis-server with a password, on loopback ports.
#include <signal.h>

#include <cctype>
#include <chrono>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/beast/http.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/redis_server.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

namespace http = boost::beast::http;
using ::testing::HasSubstr;
using ::testing::Not;
using ::tollgate::testing::HttpTestClient;
using ::tollgate::testing::MakeTempDir;
using ::tollgate::testing::ReadFileText;
using ::tollgate::testing::RedisServer;
using ::tollgate::testing::ServeProcess;
using ::tollgate::testing::Subprocess;
using ::tollgate::testing::WriteFile;

constexpr char kConfig[] = R"(limits:
  api:
    algorithm: fixed_window
    limit: 100
    window: 1h
)";

// A password with every character a URL would need encoded.
constexpr char kPassword[] = "p@ss:w/rd%?#s3cret";
// kPassword percent-encoded, as it goes into a redis:// URL.
constexpr char kEncodedPassword[] = "p%40ss%3Aw%2Frd%25%3F%23s3cret";

// The value of the metric line `name VALUE` in `text`, or -1.
int64_t MetricValue(const std::string& text, const std::string& name) {
  const std::regex line("(^|\n)" + name + " (\\d+)");
  std::smatch match;
  return std::regex_search(text, match, line) ? std::stoll(match[2]) : -1;
}

std::string Metrics(int port) {
  HttpTestClient client(port);
  std::optional<testing::HttpTestResponse> response = client.Send(http::verb::get, "/metrics");
  return response ? response->body() : "";
}

// The arguments of process `pid` as /proc shows them to every local user.
std::string CommandLine(pid_t pid) {
  std::string text = ReadFileText(absl::StrCat("/proc/", pid, "/cmdline"));
  for (char& c : text) {
    if (c == '\0') c = ' ';
  }
  return text;
}

// Runs `tollgate ARGS` to its end with `environment` added; returns the exit code and sets
// `output` to what it printed.
int RunTollgate(const std::vector<std::string>& args, const std::vector<std::string>& environment,
                std::string& output) {
  const std::string log = MakeTempDir("tollgate-env") + "/out.log";
  // coreutils' timeout bounds a server that should have exited but serves (exit 124).
  std::vector<std::string> argv = {"timeout", "60", TOLLGATE_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<Subprocess> process = Subprocess::Start(argv, log, environment);
  EXPECT_TRUE(process.ok()) << process.status();
  if (!process.ok()) return -1;
  const int code = process->Wait();
  output = ReadFileText(log);
  return code;
}

// One check of limit "api" for `key`; the reply's "source", or "" when it failed.
std::string CheckSource(int port, const std::string& key) {
  HttpTestClient client(port);
  std::optional<testing::HttpTestResponse> response =
      client.Check(absl::StrCat(R"({"limit": "api", "key": ")", key, R"("})"));
  if (!response || response->result_int() != 200) return "";
  return nlohmann::json::parse(response->body(), nullptr, false).value("source", "");
}

TEST(ServeEnvironmentTest, HelpNamesTheVariableOfEveryOption) {
  std::string help;
  ASSERT_EQ(RunTollgate({"serve", "--help"}, {}, help), 0) << help;
  int options = 0;
  const std::regex option_line(R"(^  (--[a-z0-9-]+)(.*)$)");
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) {
    std::smatch match;
    if (!std::regex_match(line, match, option_line)) continue;
    ++options;
    std::string env = "TOLLGATE_" + std::string(match[1]).substr(2);
    for (char& c : env) c = c == '-' ? '_' : static_cast<char>(std::toupper(c));
    EXPECT_THAT(line, HasSubstr("(Env:" + env + ")")) << "option " << match[1];
  }
  EXPECT_GE(options, 20) << help;
  EXPECT_THAT(help, HasSubstr("(Env:TOLLGATE_REDIS_PASSWORD_FILE)"));
  EXPECT_THAT(help, HasSubstr("the command line wins"));
}

TEST(ServeEnvironmentTest, OptionsFromTheEnvironmentAndTheCommandLineWins) {
  // Everything from the environment, the config file too.
  const std::string dir = MakeTempDir("tollgate-env");
  WriteFile(dir + "/limits.yaml", kConfig);
  const std::string log = dir + "/serve.log";
  absl::StatusOr<Subprocess> process = Subprocess::Start(
      {TOLLGATE_BINARY, "serve"}, log,
      {"TOLLGATE_CONFIG=" + dir + "/limits.yaml", "TOLLGATE_HTTP=127.0.0.1:0",
       "TOLLGATE_GRPC=127.0.0.1:0", "TOLLGATE_THREADS=1", "TOLLGATE_MEMORY_MAX_KEYS=7",
       "TOLLGATE_SHADOW_MODE=true", "TOLLGATE_THRADS=2"});
  ASSERT_TRUE(process.ok()) << process.status();
  const std::regex listening(R"(listening http=127\.0\.0\.1:(\d+))");
  int port = 0;
  for (auto deadline = std::chrono::steady_clock::now() + testing::kServeStartTimeout;
       port == 0 && std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
    std::smatch match;
    const std::string text = ReadFileText(log);
    if (std::regex_search(text, match, listening)) port = std::stoi(match[1]);
  }
  ASSERT_NE(port, 0) << ReadFileText(log);
  EXPECT_EQ(CheckSource(port, "u"), "memory");
  EXPECT_EQ(MetricValue(Metrics(port), "tollgate_memory_store_max_keys"), 7);
  // A misspelled variable is named (and ignored), not silently lost.
  EXPECT_THAT(ReadFileText(log), HasSubstr("TOLLGATE_THRADS is not an option of serve (did you "
                                           "mean TOLLGATE_THREADS?)"));
  EXPECT_EQ(process->Stop(std::chrono::seconds(30)), 0);

  // The command line wins over the environment.
  std::unique_ptr<ServeProcess> server = ServeProcess::Start(
      kConfig, {"--memory-max-keys", "3"}, {"TOLLGATE_MEMORY_MAX_KEYS=7", "TOLLGATE_HTTP=bad"});
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(MetricValue(Metrics(server->port()), "tollgate_memory_store_max_keys"), 3);
}

TEST(ServeEnvironmentTest, ABadValueInTheEnvironmentIsAUsageError) {
  std::string output;
  EXPECT_EQ(RunTollgate({"serve", "--config", "x.yaml"}, {"TOLLGATE_THREADS=many"}, output), 2);
  EXPECT_THAT(output, HasSubstr("--threads"));
  EXPECT_THAT(output, HasSubstr("TOLLGATE_THREADS"));  // where the value came from
}

class ServeRedisSecretTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<RedisServer>> redis =
        RedisServer::Start({"--requirepass", kPassword});
    ASSERT_TRUE(redis.ok()) << redis.status();
    redis_ = *std::move(redis);
    dir_ = MakeTempDir("tollgate-secret");
  }

  std::string Url() const { return absl::StrCat("redis://127.0.0.1:", redis_->port()); }
  std::string UrlWithPassword() const {
    return absl::StrCat("redis://:", kEncodedPassword, "@127.0.0.1:", redis_->port());
  }

  // Serves from Redis with `args` and `environment`, checks once (from Redis), and expects
  // the password nowhere: not in the log, the metrics or the process's arguments.
  void ExpectServesWithoutShowingThePassword(const std::vector<std::string>& args,
                                             const std::vector<std::string>& environment) {
    std::unique_ptr<ServeProcess> server = ServeProcess::Start(kConfig, args, environment);
    ASSERT_NE(server, nullptr);
    EXPECT_EQ(CheckSource(server->port(), "u"), "redis") << server->log();
    const std::string metrics = Metrics(server->port());
    EXPECT_FALSE(metrics.empty());
    const std::string cmdline = CommandLine(server->pid());
    EXPECT_THAT(cmdline, HasSubstr("serve"));
    EXPECT_EQ(server->Stop(), 0);
    for (const std::string& where : {server->log(), metrics, cmdline}) {
      EXPECT_THAT(where, Not(HasSubstr("s3cret")));
    }
  }

  std::unique_ptr<RedisServer> redis_;
  std::string dir_;
};

TEST_F(ServeRedisSecretTest, PasswordFromAFile) {
  // As Kubernetes mounts a secret and systemd a credential: the secret and a newline.
  WriteFile(dir_ + "/password", std::string(kPassword) + "\n");
  ExpectServesWithoutShowingThePassword(
      {"--redis", Url(), "--redis-password-file", dir_ + "/password"}, {});
  // The same from the environment.
  ExpectServesWithoutShowingThePassword(
      {}, {"TOLLGATE_REDIS=" + Url(), "TOLLGATE_REDIS_PASSWORD_FILE=" + dir_ + "/password"});
}

TEST_F(ServeRedisSecretTest, UrlFromTheEnvironmentOrAFile) {
  ExpectServesWithoutShowingThePassword({}, {"TOLLGATE_REDIS=" + UrlWithPassword()});
  WriteFile(dir_ + "/url", UrlWithPassword() + "\n");
  ExpectServesWithoutShowingThePassword({"--redis-url-file", dir_ + "/url"}, {});
}

TEST_F(ServeRedisSecretTest, APasswordOnTheCommandLineIsHiddenAndWarnedAbout) {
  std::unique_ptr<ServeProcess> server =
      ServeProcess::Start(kConfig, {"--redis", UrlWithPassword()});
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(CheckSource(server->port(), "u"), "redis");
  const std::string cmdline = CommandLine(server->pid());
  EXPECT_THAT(cmdline, HasSubstr(absl::StrCat("@127.0.0.1:", redis_->port())));
  EXPECT_THAT(cmdline, Not(HasSubstr("s3cret")));
  EXPECT_THAT(server->log(), HasSubstr("TOLLGATE_REDIS or with --redis-password-file"));
  EXPECT_EQ(server->Stop(), 0);
  EXPECT_THAT(server->log(), Not(HasSubstr("s3cret")));
}

TEST_F(ServeRedisSecretTest, ErrorsNeverShowTheSecret) {
  WriteFile(dir_ + "/config.yaml", kConfig);
  const std::vector<std::string> serve = {
      "serve", "--config", dir_ + "/config.yaml", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"};
  const auto with = [&](std::vector<std::string> args) {
    args.insert(args.begin(), serve.begin(), serve.end());
    return args;
  };
  std::string output;
  // A wrong password: Redis refuses it, serve exits 1.
  WriteFile(dir_ + "/wrong", "wrong-s3cret\n");
  EXPECT_EQ(
      RunTollgate(with({"--redis", Url(), "--redis-password-file", dir_ + "/wrong"}), {}, output),
      1)
      << output;
  EXPECT_THAT(output, HasSubstr("AUTH"));
  EXPECT_THAT(output, Not(HasSubstr("s3cret")));
  // A password in both places.
  WriteFile(dir_ + "/password", kPassword);
  EXPECT_EQ(RunTollgate(with({"--redis-password-file", dir_ + "/password"}),
                        {"TOLLGATE_REDIS=" + UrlWithPassword()}, output),
            2);
  EXPECT_THAT(output, HasSubstr("already has a password"));
  EXPECT_THAT(output, Not(HasSubstr("s3cret")));
  // A file that cannot be read, one with two lines, and --redis with --redis-url-file.
  EXPECT_EQ(
      RunTollgate(with({"--redis", Url(), "--redis-password-file", dir_ + "/none"}), {}, output),
      2);
  EXPECT_THAT(output, HasSubstr(dir_ + "/none"));
  WriteFile(dir_ + "/two", "s3cret\nmore\n");
  EXPECT_EQ(
      RunTollgate(with({"--redis", Url(), "--redis-password-file", dir_ + "/two"}), {}, output), 2);
  EXPECT_THAT(output, HasSubstr("more than one line"));
  EXPECT_THAT(output, Not(HasSubstr("s3cret")));
  WriteFile(dir_ + "/url", UrlWithPassword());
  EXPECT_EQ(RunTollgate(with({"--redis", Url(), "--redis-url-file", dir_ + "/url"}), {}, output),
            2);
  EXPECT_THAT(output, Not(HasSubstr("s3cret")));
  // A password file without a Redis to use it with.
  EXPECT_EQ(RunTollgate(with({"--redis-password-file", dir_ + "/password"}), {}, output), 2);
  EXPECT_THAT(output, HasSubstr("needs the Redis"));
}

TEST(ServeMemoryStoreTest, KeyCapFromTheConfigAndTheOption) {
  constexpr char kCapped[] = R"(limits:
  api:
    algorithm: fixed_window
    limit: 100
    window: 1h
memory_store:
  max_keys: 3
)";
  // Shards split the cap, and a new key evicts within its shard: at most the cap is held,
  // and every key checked is either held or was evicted (none expires within the hour).
  constexpr int kKeys = 50;
  std::unique_ptr<ServeProcess> server = ServeProcess::Start(kCapped);
  ASSERT_NE(server, nullptr);
  std::string metrics = Metrics(server->port());
  EXPECT_EQ(MetricValue(metrics, "tollgate_memory_store_max_keys"), 3);
  EXPECT_EQ(MetricValue(metrics, "tollgate_memory_store_keys"), 0);
  EXPECT_EQ(MetricValue(metrics, "tollgate_memory_store_evictions_total"), 0);
  for (int i = 0; i < kKeys; ++i) {
    EXPECT_EQ(CheckSource(server->port(), absl::StrCat("k", i)), "memory");
  }
  metrics = Metrics(server->port());
  int64_t held = MetricValue(metrics, "tollgate_memory_store_keys");
  EXPECT_GE(held, 1);
  EXPECT_LE(held, 3);
  EXPECT_EQ(held + MetricValue(metrics, "tollgate_memory_store_evictions_total"), kKeys);

  // The option overrides the config's key.
  server = ServeProcess::Start(kCapped, {"--memory-max-keys", "10"});
  ASSERT_NE(server, nullptr);
  for (int i = 0; i < kKeys; ++i) {
    EXPECT_EQ(CheckSource(server->port(), absl::StrCat("k", i)), "memory");
  }
  metrics = Metrics(server->port());
  EXPECT_EQ(MetricValue(metrics, "tollgate_memory_store_max_keys"), 10);
  held = MetricValue(metrics, "tollgate_memory_store_keys");
  EXPECT_GT(held, 3);
  EXPECT_LE(held, 10);
  EXPECT_EQ(held + MetricValue(metrics, "tollgate_memory_store_evictions_total"), kKeys);

  // Without either: the default cap.
  server = ServeProcess::Start(kConfig);
  ASSERT_NE(server, nullptr);
  for (int i = 0; i < kKeys; ++i) {
    EXPECT_EQ(CheckSource(server->port(), absl::StrCat("k", i)), "memory");
  }
  metrics = Metrics(server->port());
  EXPECT_EQ(MetricValue(metrics, "tollgate_memory_store_max_keys"), 1'000'000);
  EXPECT_EQ(MetricValue(metrics, "tollgate_memory_store_keys"), kKeys);
  EXPECT_EQ(MetricValue(metrics, "tollgate_memory_store_evictions_total"), 0);
}

TEST(ServeMemoryStoreTest, AReloadThatChangesTheCapSaysItNeedsARestart) {
  constexpr char kCapped[] =
      "limits:\n  api: {algorithm: fixed_window, limit: 1, window: 1h}\n"
      "memory_store: {max_keys: 3}\n";
  std::unique_ptr<ServeProcess> server = ServeProcess::Start(kCapped);
  ASSERT_NE(server, nullptr);
  WriteFile(server->config_path(),
            "limits:\n  api: {algorithm: fixed_window, limit: 1, window: 1h}\n"
            "memory_store: {max_keys: 30}\n");
  server->Signal(SIGHUP);
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       server->log().find("until a restart") == std::string::npos &&
       std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
  }
  EXPECT_THAT(server->log(), HasSubstr("keeps its cap of 3 keys until a restart"));
  EXPECT_EQ(MetricValue(Metrics(server->port()), "tollgate_memory_store_max_keys"), 3);
}

TEST(ServeMemoryStoreTest, OneConfigFileSetsTheCap) {
  const std::string dir = MakeTempDir("tollgate-cap");
  WriteFile(dir + "/a.yaml",
            "limits:\n  a: {algorithm: fixed_window, limit: 1, window: 1h}\n"
            "memory_store: {max_keys: 3}\n");
  WriteFile(dir + "/b.yaml",
            "limits:\n  b: {algorithm: fixed_window, limit: 1, window: 1h}\n"
            "memory_store: {max_keys: 4}\n");
  std::string output;
  EXPECT_EQ(RunTollgate({"validate", "--config", dir + "/a.yaml", "--config", dir + "/b.yaml"}, {},
                        output),
            1);
  EXPECT_THAT(output,
              HasSubstr(dir + "/b.yaml: memory_store.max_keys: also set in " + dir + "/a.yaml"));
}

}  // namespace
}  // namespace tollgate
