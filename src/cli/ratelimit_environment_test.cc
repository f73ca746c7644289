// Copyright tollgate authors.
#include "src/cli/ratelimit_environment.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/redis/redis_url.h"

namespace tollgate::cli {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

using Variables = std::map<std::string, std::string>;

absl::StatusOr<RatelimitEnvironment> Read(const Variables& variables) {
  return ReadRatelimitEnvironment([&](std::string_view name) -> std::optional<std::string> {
    auto it = variables.find(std::string(name));
    if (it == variables.end()) return std::nullopt;
    return it->second;
  });
}

// The least a Redis-backed deployment of the peer sets.
Variables WithRedis(Variables variables) {
  variables.emplace("REDIS_SOCKET_TYPE", "tcp");
  variables.emplace("REDIS_URL", "redis.redis-system.svc.cluster.local:6379");
  return variables;
}

TEST(RatelimitEnvironmentTest, CalledAsRatelimitByTheLastPathComponent) {
  EXPECT_TRUE(CalledAsRatelimit("/bin/ratelimit"));
  EXPECT_TRUE(CalledAsRatelimit("ratelimit"));
  EXPECT_TRUE(CalledAsRatelimit("./build/ratelimit"));
  EXPECT_FALSE(CalledAsRatelimit("/bin/tollgate"));
  EXPECT_FALSE(CalledAsRatelimit("/bin/ratelimit-old"));
  EXPECT_FALSE(CalledAsRatelimit("/ratelimit/tollgate"));
}

TEST(RatelimitEnvironmentTest, ThePeersDefaultsWhereNothingIsSet) {
  absl::StatusOr<RatelimitEnvironment> env = Read(WithRedis({}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->options.http_address, "0.0.0.0:8080");
  EXPECT_EQ(env->options.grpc_address, "0.0.0.0:8081");
  EXPECT_THAT(env->options.config_dirs, ElementsAre("/srv/runtime_data/current/config"));
  EXPECT_FALSE(env->options.config_ignore_dotfiles);
  EXPECT_EQ(env->options.metrics_address, "");  // USE_PROMETHEUS is off by default
  EXPECT_EQ(env->log_level, "warn");
  EXPECT_FALSE(env->json_logs);
  EXPECT_EQ(env->options.redis_url, "redis://redis.redis-system.svc.cluster.local:6379");
  EXPECT_EQ(env->options.redis_startup_wait_ms, -1);  // REDIS_STARTUP_MAX_ELAPSED_TIME 0
  EXPECT_FALSE(env->options.shadow_mode);
  EXPECT_FALSE(env->options.descriptor_hits_are_requests);
  EXPECT_TRUE(env->options.ratelimit_metrics);
  EXPECT_FALSE(env->options.envoy_response_headers);  // LIMIT_RESPONSE_HEADERS_ENABLED
  EXPECT_THAT(env->notices, IsEmpty());
}

TEST(RatelimitEnvironmentTest, ThePeersRuntimeDirectoryAsItsHelmChartsSetIt) {
  absl::StatusOr<RatelimitEnvironment> env = Read(WithRedis({{"RUNTIME_ROOT", "/data"},
                                                             {"RUNTIME_SUBDIRECTORY", "ratelimit"},
                                                             {"RUNTIME_IGNOREDOTFILES", "true"},
                                                             {"RUNTIME_WATCH_ROOT", "false"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_THAT(env->options.config_dirs, ElementsAre("/data/ratelimit/config"));
  EXPECT_TRUE(env->options.config_ignore_dotfiles);
}

TEST(RatelimitEnvironmentTest, ListenersPrometheusLogsAndModes) {
  absl::StatusOr<RatelimitEnvironment> env = Read(WithRedis({{"HOST", "127.0.0.1"},
                                                             {"PORT", "18080"},
                                                             {"GRPC_HOST", "::1"},
                                                             {"GRPC_PORT", "18081"},
                                                             {"USE_PROMETHEUS", "true"},
                                                             {"PROMETHEUS_ADDR", ":19001"},
                                                             {"LOG_LEVEL", "INFO"},
                                                             {"LOG_FORMAT", "json"},
                                                             {"SHADOW_MODE", "1"},
                                                             {"QUOTA_MODE", "t"},
                                                             {"RESPONSE_DYNAMIC_METADATA", "True"},
                                                             {"NEAR_LIMIT_RATIO", "0.9"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->options.http_address, "127.0.0.1:18080");
  EXPECT_EQ(env->options.grpc_address, "[::1]:18081");
  EXPECT_EQ(env->options.metrics_address, "0.0.0.0:19001");
  EXPECT_EQ(env->options.metrics_path, "/metrics");
  EXPECT_EQ(env->log_level, "info");
  EXPECT_TRUE(env->json_logs);
  EXPECT_TRUE(env->options.shadow_mode);
  EXPECT_TRUE(env->options.quota_mode);
  EXPECT_TRUE(env->options.response_dynamic_metadata);
  EXPECT_DOUBLE_EQ(env->options.near_limit_ratio, 0.9);
}

TEST(RatelimitEnvironmentTest, LogLevelsAsLogrusNamesThem) {
  const std::pair<const char*, const char*> levels[] = {
      {"trace", "trace"}, {"debug", "debug"}, {"Info", "info"},      {"warning", "warn"},
      {"WARN", "warn"},   {"error", "err"},   {"fatal", "critical"}, {"panic", "critical"}};
  for (const auto& [given, spdlog_name] : levels) {
    absl::StatusOr<RatelimitEnvironment> env = Read(WithRedis({{"LOG_LEVEL", given}}));
    ASSERT_TRUE(env.ok()) << given << ": " << env.status();
    EXPECT_EQ(env->log_level, spdlog_name) << given;
  }
}

// Exactly what Envoy Gateway's rate-limit Deployment sets (its resource.go), Redis and
// Prometheus included.
Variables EnvoyGatewayEnvironment() {
  return {{"RUNTIME_ROOT", "/data"},
          {"RUNTIME_SUBDIRECTORY", "ratelimit"},
          {"RUNTIME_IGNOREDOTFILES", "true"},
          {"RUNTIME_WATCH_ROOT", "false"},
          {"LOG_LEVEL", "info"},
          {"USE_STATSD", "false"},
          {"CONFIG_TYPE", "GRPC_XDS_SOTW"},
          {"CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"},
          {"CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"},
          {"GRPC_SERVER_USE_TLS", "true"},
          {"GRPC_SERVER_TLS_CERT", "/certs/tls.crt"},
          {"GRPC_SERVER_TLS_KEY", "/certs/tls.key"},
          {"GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"},
          {"CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"},
          {"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"},
          {"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"},
          {"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"},
          {"FORCE_START_WITHOUT_INITIAL_CONFIG", "true"},
          {"REDIS_SOCKET_TYPE", "tcp"},
          {"REDIS_URL", "redis.redis-system.svc.cluster.local:6379"},
          {"USE_PROMETHEUS", "true"},
          {"PROMETHEUS_ADDR", ":19001"},
          {"PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"}};
}

TEST(RatelimitEnvironmentTest, EnvoyGatewaysDeployment) {
  absl::StatusOr<RatelimitEnvironment> env = Read(EnvoyGatewayEnvironment());
  ASSERT_TRUE(env.ok()) << env.status();
  const ServeOptions& options = env->options;
  EXPECT_THAT(options.config_dirs, IsEmpty());  // RUNTIME_* are the file mode's
  EXPECT_EQ(options.xds.server_address, "envoy-gateway:18001");
  EXPECT_EQ(options.xds.node_id, "envoy-ratelimit");
  EXPECT_TRUE(options.xds.tls.enabled);
  EXPECT_EQ(options.xds.tls.client_cert_path, "/certs/tls.crt");
  EXPECT_EQ(options.xds.tls.client_key_path, "/certs/tls.key");
  EXPECT_EQ(options.xds.tls.server_ca_path, "/certs/ca.crt");
  EXPECT_EQ(options.xds.backoff_initial_ms, 10'000);
  EXPECT_EQ(options.xds.backoff_max_ms, 60'000);
  EXPECT_TRUE(options.start_without_config);
  EXPECT_EQ(options.grpc_tls.client_ca_path, "/certs/ca.crt");
  EXPECT_EQ(options.http_address, "0.0.0.0:8080");
  EXPECT_EQ(options.grpc_address, "0.0.0.0:8081");
  EXPECT_EQ(options.metrics_address, "0.0.0.0:19001");
  EXPECT_EQ(options.redis_url, "redis://redis.redis-system.svc.cluster.local:6379");
  EXPECT_EQ(env->log_level, "info");
  // Only the mapper file is named: tollgate uses every other variable it sets.
  EXPECT_THAT(env->notices, ElementsAre(HasSubstr("PROMETHEUS_MAPPER_YAML is not used")));
}

TEST(RatelimitEnvironmentTest, TracingAsEnvoyGatewaySetsIt) {
  Variables variables = EnvoyGatewayEnvironment();
  variables["TRACING_ENABLED"] = "true";
  variables["TRACING_SERVICE_NAME"] = "envoy-ratelimit";
  variables["TRACING_SERVICE_NAMESPACE"] = "envoy-gateway-system";
  variables["TRACING_SERVICE_INSTANCE_ID"] = "envoy-ratelimit-7d9f-abcde";
  variables["TRACING_SAMPLING_RATE"] = "0.5";
  variables["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://otel-collector.monitoring:4318";
  absl::StatusOr<RatelimitEnvironment> env = Read(variables);
  ASSERT_TRUE(env.ok()) << env.status();
  const server::TracingOptions& tracing = env->options.tracing;
  EXPECT_TRUE(tracing.enabled);
  EXPECT_EQ(tracing.service_name, "envoy-ratelimit");
  EXPECT_EQ(tracing.service_namespace, "envoy-gateway-system");
  EXPECT_EQ(tracing.service_instance_id, "envoy-ratelimit-7d9f-abcde");
  EXPECT_DOUBLE_EQ(tracing.sampling_rate, 0.5);
  EXPECT_EQ(tracing.endpoint, "http://otel-collector.monitoring:4318");
  // The peer's defaults: service RateLimit, every call sampled.
  absl::StatusOr<RatelimitEnvironment> plain = Read(WithRedis({{"TRACING_ENABLED", "1"}}));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->options.tracing.service_name, "RateLimit");
  EXPECT_DOUBLE_EQ(plain->options.tracing.sampling_rate, 1);
  // Off by default, whatever else is set (named as not used).
  absl::StatusOr<RatelimitEnvironment> off =
      Read(WithRedis({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}}));
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->options.tracing.enabled);
  // What tollgate cannot export to.
  absl::StatusOr<RatelimitEnvironment> grpc = Read(WithRedis({{"TRACING_ENABLED", "true"},
                                                              {"TRACING_EXPORTER_PROTOCOL", "grpc"},
                                                              {"TRACING_SAMPLING_RATE", "2"}}));
  ASSERT_FALSE(grpc.ok());
  EXPECT_THAT(grpc.status().message(), HasSubstr("TRACING_EXPORTER_PROTOCOL:"));
  EXPECT_THAT(grpc.status().message(), HasSubstr("TRACING_SAMPLING_RATE:"));
}

TEST(RatelimitEnvironmentTest, XdsBackoffAndHeaders) {
  Variables variables = EnvoyGatewayEnvironment();
  variables["XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"] = "500ms";
  variables["XDS_CLIENT_BACKOFF_MAX_INTERVAL"] = "2s";
  variables["XDS_CLIENT_BACKOFF_JITTER"] = "false";
  variables["CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"] = "x-tenant:a,x-zone:b";
  variables["CONFIG_GRPC_XDS_NODE_METADATA"] = "cluster=east";
  absl::StatusOr<RatelimitEnvironment> env = Read(variables);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->options.xds.backoff_initial_ms, 500);
  EXPECT_EQ(env->options.xds.backoff_max_ms, 2'000);
  EXPECT_EQ(env->options.xds.backoff_random_factor, 0);
  EXPECT_THAT(env->options.xds.additional_headers, ElementsAre("x-tenant:a,x-zone:b"));
  EXPECT_EQ(env->options.xds.node_metadata, "cluster=east");
  variables["XDS_CLIENT_BACKOFF_MAX_INTERVAL"] = "100ms";
  variables["CONFIG_GRPC_XDS_CLIENT_TLS_KEY"] = "";
  absl::StatusOr<RatelimitEnvironment> bad = Read(variables);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("XDS_CLIENT_BACKOFF_MAX_INTERVAL:"));
  EXPECT_THAT(bad.status().message(), HasSubstr("CONFIG_GRPC_XDS_CLIENT_TLS_KEY:"));
}

TEST(RatelimitEnvironmentTest, GrpcTlsUnderBothNamesOfTheClientCa) {
  // As Envoy Gateway sets it: GRPC_SERVER_TLS_CA_CERT, which the peer itself does not read.
  absl::StatusOr<RatelimitEnvironment> gateway =
      Read(WithRedis({{"GRPC_SERVER_USE_TLS", "true"},
                      {"GRPC_SERVER_TLS_CERT", "/certs/tls.crt"},
                      {"GRPC_SERVER_TLS_KEY", "/certs/tls.key"},
                      {"GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"}}));
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  EXPECT_EQ(gateway->options.grpc_tls.cert_path, "/certs/tls.crt");
  EXPECT_EQ(gateway->options.grpc_tls.key_path, "/certs/tls.key");
  EXPECT_EQ(gateway->options.grpc_tls.client_ca_path, "/certs/ca.crt");
  // The peer's own name, with its SAN check.
  absl::StatusOr<RatelimitEnvironment> peer =
      Read(WithRedis({{"GRPC_SERVER_USE_TLS", "1"},
                      {"GRPC_SERVER_TLS_CERT", "c"},
                      {"GRPC_SERVER_TLS_KEY", "k"},
                      {"GRPC_CLIENT_TLS_CACERT", "ca"},
                      {"GRPC_CLIENT_TLS_SAN", "envoy.internal"}}));
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(peer->options.grpc_tls.client_ca_path, "ca");
  EXPECT_EQ(peer->options.grpc_tls.client_san, "envoy.internal");
  // Off: the files are named as not used, and gRPC stays plaintext.
  absl::StatusOr<RatelimitEnvironment> off =
      Read(WithRedis({{"GRPC_SERVER_TLS_CERT", "/certs/tls.crt"}}));
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->options.grpc_tls.enabled());
  EXPECT_THAT(off->notices, ElementsAre(HasSubstr("GRPC_SERVER_TLS_CERT is not used")));
  // On without a key, or with two different CAs: errors naming the variables.
  absl::StatusOr<RatelimitEnvironment> broken = Read(WithRedis({{"GRPC_SERVER_USE_TLS", "true"},
                                                                {"GRPC_SERVER_TLS_CERT", "c"},
                                                                {"GRPC_CLIENT_TLS_CACERT", "a"},
                                                                {"GRPC_SERVER_TLS_CA_CERT", "b"}}));
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.status().message(), HasSubstr("GRPC_SERVER_TLS_KEY:"));
  EXPECT_THAT(broken.status().message(), HasSubstr("GRPC_SERVER_TLS_CA_CERT:"));
}

TEST(RatelimitEnvironmentTest, CacheKeyPrefixPrefixesEveryRedisKey) {
  absl::StatusOr<RatelimitEnvironment> plain = Read(WithRedis({}));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->options.redis_key_prefix, "tollgate:");
  absl::StatusOr<RatelimitEnvironment> env = Read(WithRedis({{"CACHE_KEY_PREFIX", "eg:rl:"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->options.redis_key_prefix, "eg:rl:");
}

TEST(RatelimitEnvironmentTest, StopIncrementMakesDescriptorHitsRequests) {
  absl::StatusOr<RatelimitEnvironment> env =
      Read(WithRedis({{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_TRUE(env->options.descriptor_hits_are_requests);
}

// The URL each REDIS_TYPE form gives, read back by tollgate's own parser.
redis::RedisTarget TargetOf(const Variables& variables) {
  absl::StatusOr<RatelimitEnvironment> env = Read(variables);
  EXPECT_TRUE(env.ok()) << env.status();
  if (!env.ok()) return {};
  absl::StatusOr<redis::RedisTarget> target = redis::ParseRedisTarget(env->options.redis_url);
  EXPECT_TRUE(target.ok()) << env->options.redis_url << ": " << target.status();
  return target.ok() ? *target : redis::RedisTarget{};
}

TEST(RatelimitEnvironmentTest, RedisTypesInThePeersUrlForms) {
  redis::RedisTarget single = TargetOf(
      {{"REDIS_SOCKET_TYPE", "tcp"}, {"REDIS_URL", "10.0.0.5:6380"}, {"REDIS_AUTH", "s3cr:et"}});
  EXPECT_EQ(single.topology, redis::Topology::kStandalone);
  EXPECT_EQ(single.node.host, "10.0.0.5");
  EXPECT_EQ(single.node.port, 6380);
  EXPECT_EQ(single.node.user, "s3cr");  // the peer's "user:password"
  EXPECT_EQ(single.node.password, "et");

  redis::RedisTarget password_only = TargetOf(
      {{"REDIS_SOCKET_TYPE", "tcp"}, {"REDIS_URL", "r:6379"}, {"REDIS_AUTH", "p@ss/w0rd"}});
  EXPECT_EQ(password_only.node.user, "");
  EXPECT_EQ(password_only.node.password, "p@ss/w0rd");

  redis::RedisTarget cluster = TargetOf({{"REDIS_SOCKET_TYPE", "tcp"},
                                         {"REDIS_TYPE", "cluster"},
                                         {"REDIS_URL", "10.0.0.1:7000,10.0.0.2:7001"}});
  EXPECT_EQ(cluster.topology, redis::Topology::kCluster);
  EXPECT_EQ(cluster.seeds.size(), 2u);
  EXPECT_EQ(cluster.seeds[1].port, 7001);

  redis::RedisTarget sentinel = TargetOf({{"REDIS_SOCKET_TYPE", "tcp"},
                                          {"REDIS_TYPE", "SENTINEL"},
                                          {"REDIS_URL", "mymaster,10.0.0.5:26379,10.0.0.6:26380"}});
  EXPECT_EQ(sentinel.topology, redis::Topology::kSentinel);
  EXPECT_EQ(sentinel.master_name, "mymaster");
  ASSERT_EQ(sentinel.seeds.size(), 2u);
  EXPECT_EQ(sentinel.seeds[0].host, "10.0.0.5");
  EXPECT_EQ(sentinel.seeds[1].port, 26380);
}

TEST(RatelimitEnvironmentTest, RedisTlsWithClientCertificates) {
  redis::RedisTarget target = TargetOf({{"REDIS_SOCKET_TYPE", "tcp"},
                                        {"REDIS_URL", "redis:6379"},
                                        {"REDIS_TLS", "true"},
                                        {"REDIS_TLS_CACERT", "/redis-certs/ca.crt"},
                                        {"REDIS_TLS_CLIENT_CERT", "/redis-certs/tls.crt"},
                                        {"REDIS_TLS_CLIENT_KEY", "/redis-certs/tls.key"},
                                        {"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"}});
  EXPECT_TRUE(target.node.tls);
  EXPECT_EQ(target.node.tls_options.ca_file, "/redis-certs/ca.crt");
  EXPECT_EQ(target.node.tls_options.cert_file, "/redis-certs/tls.crt");
  EXPECT_EQ(target.node.tls_options.key_file, "/redis-certs/tls.key");
  EXPECT_TRUE(target.node.tls_options.verify_peer);   // the chain is still verified
  EXPECT_FALSE(target.node.tls_options.verify_host);  // not the name in it
}

TEST(RatelimitEnvironmentTest, EveryUnusableValueIsOneErrorNamingItsVariable) {
  absl::StatusOr<RatelimitEnvironment> env = Read({{"PORT", "http"},
                                                   {"GRPC_UDS", "/tmp/rl.sock"},
                                                   {"SHADOW_MODE", "yes"},
                                                   {"CONFIG_TYPE", "GRPC_XDS_DELTA"},
                                                   {"LOG_LEVEL", "loud"},
                                                   {"BACKEND_TYPE", "memcache"},
                                                   {"REDIS_SENTINEL_AUTH", "hunter2"},
                                                   {"REDIS_STARTUP_MAX_ELAPSED_TIME", "5"},
                                                   {"LIMIT_RESET_HEADER", "X-Reset"},
                                                   {"REDIS_URL", "/var/run/redis.sock"}});
  ASSERT_FALSE(env.ok());
  const std::string message(env.status().message());
  for (const char* variable :
       {"PORT:", "GRPC_UDS:", "SHADOW_MODE:", "CONFIG_TYPE:", "LOG_LEVEL:", "BACKEND_TYPE:",
        "REDIS_SENTINEL_AUTH:", "REDIS_STARTUP_MAX_ELAPSED_TIME:", "REDIS_SOCKET_TYPE:",
        "LIMIT_RESET_HEADER:"}) {
    EXPECT_THAT(message, HasSubstr(variable));
  }
  EXPECT_THAT(message, Not(HasSubstr("hunter2")));  // a secret is never echoed
}

TEST(RatelimitEnvironmentTest, RedisIsRequiredOverTcp) {
  absl::StatusOr<RatelimitEnvironment> unix_socket = Read({});
  ASSERT_FALSE(unix_socket.ok());
  EXPECT_THAT(unix_socket.status().message(),
              AllOf(HasSubstr("REDIS_SOCKET_TYPE"), HasSubstr("REDIS_SOCKET_TYPE=tcp")));
  absl::StatusOr<RatelimitEnvironment> no_url = Read({{"REDIS_SOCKET_TYPE", "tcp"}});
  ASSERT_FALSE(no_url.ok());
  EXPECT_THAT(no_url.status().message(), HasSubstr("REDIS_URL: not set"));
  absl::StatusOr<RatelimitEnvironment> lonely_sentinel =
      Read({{"REDIS_SOCKET_TYPE", "tcp"}, {"REDIS_TYPE", "sentinel"}, {"REDIS_URL", "mymaster"}});
  ASSERT_FALSE(lonely_sentinel.ok());
  EXPECT_THAT(lonely_sentinel.status().message(), HasSubstr("master,host:port"));
}

TEST(RatelimitEnvironmentTest, AVariableTollgateDoesNotUseIsNamedOnce) {
  absl::StatusOr<RatelimitEnvironment> env =
      Read(WithRedis({{"USE_STATSD", "true"},
                      {"STATSD_HOST", "statsd"},
                      {"REDIS_POOL_SIZE", "20"},
                      {"REDIS_PERSECOND", "true"},
                      {"LOCAL_CACHE_SIZE_IN_BYTES", "1000000"},
                      {"PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"},
                      {"USE_PROMETHEUS", "true"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  for (const char* variable :
       {"USE_STATSD ", "STATSD_HOST ", "REDIS_POOL_SIZE ", "REDIS_PERSECOND ",
        "LOCAL_CACHE_SIZE_IN_BYTES ", "PROMETHEUS_MAPPER_YAML "}) {
    int lines = 0;
    for (const std::string& notice : env->notices) lines += notice.rfind(variable, 0) == 0;
    EXPECT_EQ(lines, 1) << variable;
  }
  // USE_STATSD=false asks for nothing tollgate lacks.
  absl::StatusOr<RatelimitEnvironment> quiet = Read(WithRedis({{"USE_STATSD", "false"}}));
  ASSERT_TRUE(quiet.ok());
  EXPECT_THAT(quiet->notices, IsEmpty());
}

}  // namespace
}  // namespace tollgate::cli
