// Copyright tollgate authors. tollgate in envoyproxy/ratelimit's place, as its users deploy it
// outside Envoy Gateway: the binary called as `ratelimit`, configured only by the peer's
// environment; config files in the peer's runtime directory laid out as a mounted
// Kubernetes ConfigMap (its Helm charts' RUNTIME_ROOT=/data, RUNTIME_SUBDIRECTORY=ratelimit),
// changed by swapping the ConfigMap's ..data link as the kubelet does; Redis as a single
// server, through Sentinel and as a Cluster in the peer's REDIS_URL forms. Real processes:
// the tollgate binary and redis-server (and redis-sentinel) on loopback ports.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/beast/http.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

namespace http = boost::beast::http;
using ::testing::HasSubstr;
using ::testing::Not;
using ::tollgate::testing::FreePort;
using ::tollgate::testing::HttpTestClient;
using ::tollgate::testing::MakeTempDir;
using ::tollgate::testing::ReadFileText;
using ::tollgate::testing::RedisCluster;
using ::tollgate::testing::RedisCommand;
using ::tollgate::testing::RedisSentinelSet;
using ::tollgate::testing::RedisServer;
using ::tollgate::testing::ServeProcess;
using ::tollgate::testing::WriteFile;

std::string Config(int requests_per_minute) {
  return absl::StrCat(R"(domain: rl
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: )",
                      requests_per_minute, "\n");
}

// A ConfigMap mounted at <root>/ratelimit/config, as the kubelet lays it out: the files in a
// timestamped directory, `..data` linking to it, and each file a link through `..data`.
class MountedConfigMap {
 public:
  explicit MountedConfigMap(std::string root) : dir_(std::move(root) + "/ratelimit/config") {
    std::filesystem::create_directories(dir_);
  }

  // Sets file `name` of the ConfigMap and publishes a new version holding every file: written
  // in a directory of its own, then `..data` swapped to it in one rename, as the kubelet does.
  void Publish(const std::string& name, const std::string& contents) {
    files_[name] = contents;
    const std::string version = absl::StrCat("..2026_12_06_", ++versions_);
    std::filesystem::create_directory(dir_ + "/" + version);
    for (const auto& [file, text] : files_) {
      WriteFile(absl::StrCat(dir_, "/", version, "/", file), text);
    }
    std::filesystem::create_directory_symlink(version, dir_ + "/..data_tmp");
    std::filesystem::rename(dir_ + "/..data_tmp", dir_ + "/..data");
    std::error_code absent;
    if (!std::filesystem::is_symlink(dir_ + "/" + name, absent)) {
      std::filesystem::create_symlink("..data/" + name, dir_ + "/" + name);
    }
    if (versions_ > 1) {
      std::filesystem::remove_all(dir_ + "/..2026_12_06_" + std::to_string(versions_ - 1));
    }
  }

 private:
  const std::string dir_;
  std::map<std::string, std::string> files_;
  int versions_ = 0;
};

// The binary as Envoy Gateway's container calls it: a `ratelimit` link to tollgate, started
// with `environment` only (beside the test's own).
std::unique_ptr<ServeProcess> StartAsRatelimit(const std::vector<std::string>& environment) {
  const std::string dir = MakeTempDir("ratelimit");
  std::filesystem::create_symlink(TOLLGATE_BINARY, dir + "/ratelimit");
  return ServeProcess::StartCommand({dir + "/ratelimit"}, environment, dir);
}

// POST /json for user=`user` with `hits` (0: the request's default, 1).
int JsonStatus(int port, const std::string& user, int descriptor_hits = -1) {
  HttpTestClient client(port);
  std::string descriptor = absl::StrCat(R"({"entries":[{"key":"user","value":")", user, R"("}])");
  if (descriptor_hits >= 0) absl::StrAppend(&descriptor, R"(,"hits_addend":)", descriptor_hits);
  descriptor += "}";
  std::optional<testing::HttpTestResponse> response =
      client.Send(http::verb::post, "/json",
                  absl::StrCat(R"({"domain":"rl","descriptors":[)", descriptor, "]}"));
  return response ? static_cast<int>(response->result_int()) : -1;
}

// How many of `n` requests for `user` are allowed.
int Allowed(int port, const std::string& user, int n) {
  int allowed = 0;
  for (int i = 0; i < n; ++i) allowed += JsonStatus(port, user) == 200;
  return allowed;
}

std::string Get(int port, const std::string& target, int* status = nullptr) {
  HttpTestClient client(port);
  std::optional<testing::HttpTestResponse> response = client.Send(http::verb::get, target);
  if (status != nullptr) *status = response ? static_cast<int>(response->result_int()) : -1;
  return response ? response->body() : "";
}

// Waits (bounded) until `condition` holds.
template <typename Condition>
bool Eventually(Condition condition, std::chrono::seconds within = std::chrono::seconds(15)) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return condition();
}

std::vector<std::string> PeerEnvironment(const std::string& root, const std::string& redis_url) {
  return {"RUNTIME_ROOT=" + root,
          "RUNTIME_SUBDIRECTORY=ratelimit",
          "RUNTIME_IGNOREDOTFILES=true",
          "RUNTIME_WATCH_ROOT=false",
          "REDIS_SOCKET_TYPE=tcp",
          "REDIS_URL=" + redis_url,
          "HOST=127.0.0.1",
          absl::StrCat("PORT=", FreePort()),
          "GRPC_HOST=127.0.0.1",
          absl::StrCat("GRPC_PORT=", FreePort()),
          "USE_STATSD=false",
          "USE_PROMETHEUS=true",
          absl::StrCat("PROMETHEUS_ADDR=127.0.0.1:", FreePort()),
          "LOG_LEVEL=info"};
}

// A runtime directory mounted as a ConfigMap holding config.yaml (Config(limit)), and the
// peer's environment pointing at it and at the Redis `redis_address` (host:port).
struct Runtime {
  Runtime(const std::string& redis_address, int limit)
      : root(MakeTempDir("runtime")),
        config_map(root),
        environment(PeerEnvironment(root, redis_address)) {
    config_map.Publish("config.yaml", Config(limit));
  }
  std::string root;
  MountedConfigMap config_map;
  std::vector<std::string> environment;
};

std::string Address(const RedisServer& redis) { return absl::StrCat("127.0.0.1:", redis.port()); }

TEST(RatelimitDropInTest, ARuntimeDirectoryMountedAsAConfigMapIsServedAndFollowed) {
  absl::StatusOr<std::unique_ptr<RedisServer>> redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  Runtime runtime(Address(**redis), 3);
  MountedConfigMap& config_map = runtime.config_map;
  runtime.environment.push_back("CACHE_KEY_PREFIX=eg:rl:");  // as Envoy Gateway's docs set it
  std::unique_ptr<ServeProcess> server = StartAsRatelimit(runtime.environment);
  ASSERT_NE(server, nullptr);
  ASSERT_NE(server->metrics_port(), 0) << server->log();
  EXPECT_EQ(Allowed(server->port(), "a", 5), 3);
  // Counted in Redis, not in the process, under the prefix; the rule names no algorithm, so
  // a fixed window, whose key ends in its window's index.
  absl::StatusOr<redis::RedisReply> keys =
      RedisCommand((*redis)->port(), {"KEYS", "eg:rl:rl.user:{user=a}*"});
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_EQ(keys->elements.size(), 1u);
  EXPECT_FALSE(keys->elements[0].str.ends_with("}")) << keys->elements[0].str;
  absl::StatusOr<redis::RedisReply> unprefixed =
      RedisCommand((*redis)->port(), {"KEYS", "tollgate:*"});
  ASSERT_TRUE(unprefixed.ok()) << unprefixed.status();
  EXPECT_TRUE(unprefixed->elements.empty());

  int status = 0;
  EXPECT_EQ(Get(server->port(), "/healthcheck", &status), "OK");
  EXPECT_EQ(status, 200);
  const std::string metrics = Get(server->metrics_port(), "/metrics");
  EXPECT_THAT(metrics,
              HasSubstr(R"(ratelimit_service_rate_limit_total_hits{domain="rl",key1="user"} 5)"));
  EXPECT_THAT(metrics,
              HasSubstr(R"(ratelimit_service_rate_limit_over_limit{domain="rl",key1="user"} 2)"));
  EXPECT_THAT(metrics, HasSubstr("tollgate_decisions_total"));  // beside tollgate's own

  // A new version of the ConfigMap is picked up.
  config_map.Publish("config.yaml", Config(5));
  ASSERT_TRUE(Eventually([&] {
    return server->log().find("config reloaded") != std::string::npos;
  })) << server->log();
  EXPECT_EQ(Allowed(server->port(), "b", 7), 5);

  // A broken version is refused; the last good one keeps serving.
  config_map.Publish("config.yaml", "domain: rl\ndescriptors: [\n");
  ASSERT_TRUE(Eventually([&] {
    return server->log().find("refused, the old config keeps serving") != std::string::npos;
  })) << server->log();
  EXPECT_EQ(Allowed(server->port(), "c", 7), 5);
  EXPECT_THAT(Get(server->metrics_port(), "/metrics"),
              HasSubstr("ratelimit_service_config_load_error 1"));

  // A second file in the directory: another domain, added while serving.
  config_map.Publish("config.yaml", Config(5));
  config_map.Publish("another.yaml",
                     "domain: other\ndescriptors:\n  - key: k\n    rate_limit: "
                     "{unit: hour, requests_per_unit: 1}\n");
  ASSERT_TRUE(Eventually([&] {
    return server->log().find("0 limits and 2 Envoy domains") != std::string::npos;
  })) << server->log();
  EXPECT_EQ(server->Stop(), 0);
}

TEST(RatelimitDropInTest, StopIncrementWhenOverLimitSpendsNothingOnARefusedDescriptorHit) {
  absl::StatusOr<std::unique_ptr<RedisServer>> redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  for (const bool stop_increment : {false, true}) {
    SCOPED_TRACE(stop_increment ? "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true" : "the default");
    Runtime runtime(Address(**redis), 3);
    runtime.environment.push_back(absl::StrCat("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=",
                                               stop_increment ? "true" : "false"));
    std::unique_ptr<ServeProcess> server = StartAsRatelimit(runtime.environment);
    ASSERT_NE(server, nullptr);
    const std::string user = stop_increment ? "stop" : "count";
    EXPECT_EQ(JsonStatus(server->port(), user, 2), 200);  // 2 of 3
    EXPECT_EQ(JsonStatus(server->port(), user, 2), 429);  // 4 of 3: over
    // The default takes a descriptor's hits as a report, charged in full: the limit is in
    // debt. Told to stop incrementing when over, the refused hits spent nothing: 1 is left.
    EXPECT_EQ(JsonStatus(server->port(), user, 1), stop_increment ? 200 : 429);
    EXPECT_EQ(server->Stop(), 0);
  }
}

TEST(RatelimitDropInTest, SentinelAndClusterInThePeersUrlForms) {
  absl::StatusOr<std::unique_ptr<RedisSentinelSet>> sentinel = RedisSentinelSet::Start();
  ASSERT_TRUE(sentinel.ok()) << sentinel.status();
  absl::StatusOr<std::unique_ptr<RedisCluster>> cluster = RedisCluster::Start(3, 0);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::StatusOr<std::vector<RedisCluster::Node>> nodes = (*cluster)->Nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status();

  struct Case {
    const char* type;
    std::string url;
  };
  const Case cases[] = {
      {"sentinel", absl::StrCat("limits,127.0.0.1:", (*sentinel)->sentinel_port())},
      {"cluster", absl::StrCat("127.0.0.1:", (*nodes)[0].port, ",127.0.0.1:", (*nodes)[1].port)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.type);
    Runtime runtime(c.url, 3);
    runtime.environment.push_back(absl::StrCat("REDIS_TYPE=", c.type));
    std::unique_ptr<ServeProcess> server = StartAsRatelimit(runtime.environment);
    ASSERT_NE(server, nullptr);
    EXPECT_EQ(Allowed(server->port(), "a", 5), 3);
    EXPECT_EQ(server->Stop(), 0);
  }
  // The counts went to the sentinel's primary and to the cluster's nodes.
  absl::StatusOr<int> primary = (*sentinel)->PrimaryPort();
  ASSERT_TRUE(primary.ok());
  absl::StatusOr<redis::RedisReply> primary_keys = RedisCommand(*primary, {"DBSIZE"});
  ASSERT_TRUE(primary_keys.ok());
  EXPECT_GT(primary_keys->integer, 0);
  int64_t cluster_keys = 0;
  for (const RedisCluster::Node& node : *nodes) {
    absl::StatusOr<redis::RedisReply> size = RedisCommand(node.port, {"DBSIZE"});
    if (size.ok()) cluster_keys += size->integer;
  }
  EXPECT_GT(cluster_keys, 0);
}

TEST(RatelimitDropInTest, AValueItCannotUseStopsTheStartNamingTheVariable) {
  Runtime runtime("127.0.0.1:1", 3);
  std::vector<std::string>& environment = runtime.environment;
  for (std::string& variable : environment) {
    if (variable.rfind("GRPC_PORT=", 0) == 0) variable = "GRPC_PORT=grpc";
  }
  environment.push_back("BACKEND_TYPE=memcache");
  const std::string dir = MakeTempDir("ratelimit");
  std::filesystem::create_symlink(TOLLGATE_BINARY, dir + "/ratelimit");
  absl::StatusOr<testing::Subprocess> process =
      testing::Subprocess::Start({dir + "/ratelimit"}, dir + "/log", environment);
  ASSERT_TRUE(process.ok()) << process.status();
  EXPECT_EQ(process->Wait(), 2);
  const std::string log = ReadFileText(dir + "/log");
  EXPECT_THAT(log, HasSubstr("GRPC_PORT: expected an integer"));
  EXPECT_THAT(log, HasSubstr("BACKEND_TYPE: only redis is supported"));
}

TEST(RatelimitDropInTest, VariablesTollgateDoesNotUseAreNamedOnceAtStart) {
  absl::StatusOr<std::unique_ptr<RedisServer>> redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  Runtime runtime(Address(**redis), 3);
  runtime.environment.push_back("LOCAL_CACHE_SIZE_IN_BYTES=1048576");
  runtime.environment.push_back("REDIS_POOL_SIZE=20");
  std::unique_ptr<ServeProcess> server = StartAsRatelimit(runtime.environment);
  ASSERT_NE(server, nullptr);
  const std::string log = server->log();
  for (const std::string variable : {"LOCAL_CACHE_SIZE_IN_BYTES", "REDIS_POOL_SIZE"}) {
    const std::string line = variable + " is not used by tollgate";
    const size_t first = log.find(line);
    EXPECT_NE(first, std::string::npos) << log;
    EXPECT_EQ(log.find(line, first + 1), std::string::npos) << "named twice: " << variable;
  }
  EXPECT_THAT(log, Not(HasSubstr("USE_STATSD")));  // false: nothing tollgate lacks
  EXPECT_EQ(server->Stop(), 0);
}

}  // namespace
}  // namespace tollgate
