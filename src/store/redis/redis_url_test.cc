// Copyright tollgate authors.
#include "src/store/redis/redis_url.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tollgate::redis {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(RedisUrlTest, HostAndPort) {
  absl::StatusOr<RedisUrl> url = ParseRedisUrl("redis://127.0.0.1:6380");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->host, "127.0.0.1");
  EXPECT_EQ(url->port, 6380);
  EXPECT_EQ(url->db, 0);
  EXPECT_TRUE(url->user.empty());
  EXPECT_TRUE(url->password.empty());
}

TEST(RedisUrlTest, DefaultPortAndDatabase) {
  absl::StatusOr<RedisUrl> url = ParseRedisUrl("redis://redis.internal/3");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->host, "redis.internal");
  EXPECT_EQ(url->port, 6379);
  EXPECT_EQ(url->db, 3);
}

TEST(RedisUrlTest, PasswordOnlyAndAclUser) {
  absl::StatusOr<RedisUrl> password = ParseRedisUrl("redis://:s3cret@localhost:6379");
  ASSERT_TRUE(password.ok()) << password.status();
  EXPECT_EQ(password->user, "");
  EXPECT_EQ(password->password, "s3cret");

  absl::StatusOr<RedisUrl> acl = ParseRedisUrl("redis://limiter:p%40ss%3Aword@localhost:7000/1");
  ASSERT_TRUE(acl.ok()) << acl.status();
  EXPECT_EQ(acl->user, "limiter");
  EXPECT_EQ(acl->password, "p@ss:word");
  EXPECT_EQ(acl->port, 7000);
  EXPECT_EQ(acl->db, 1);
}

TEST(RedisUrlTest, Ipv6Host) {
  absl::StatusOr<RedisUrl> url = ParseRedisUrl("redis://[::1]:6390");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->port, 6390);
}

TEST(RedisUrlTest, ErrorsSayWhatIsWrongWithoutEchoingThePassword) {
  struct Case {
    const char* url;
    const char* message;
  };
  for (const Case& c :
       {Case{"http://localhost:6379", "must start with redis://"},
        Case{"redis://:6379", "missing host"}, Case{"redis://localhost:0", "port \"0\""},
        Case{"redis://localhost:http", "port \"http\""},
        Case{"redis://localhost:6379/x", "database \"x\""},
        Case{"redis://user@localhost", "user:password"},
        Case{"redis://u:%zz@localhost", "bad percent escape in the password"}}) {
    absl::StatusOr<RedisUrl> url = ParseRedisUrl(c.url);
    ASSERT_FALSE(url.ok()) << c.url;
    EXPECT_EQ(url.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(url.status().message()), HasSubstr(c.message)) << c.url;
  }
  absl::StatusOr<RedisUrl> url = ParseRedisUrl("redis://:hunter2@localhost:99999");
  ASSERT_FALSE(url.ok());
  EXPECT_THAT(std::string(url.status().message()), Not(HasSubstr("hunter2")));
}

TEST(RedisTargetTest, ClusterSeeds) {
  absl::StatusOr<RedisTarget> target =
      ParseRedisTarget("redis-cluster://:pw@10.0.0.1:7000,10.0.0.2,[::1]:7002");
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->topology, Topology::kCluster);
  EXPECT_EQ(target->node.password, "pw");
  EXPECT_EQ(target->node.db, 0);
  EXPECT_EQ(target->seeds,
            (std::vector<HostPort>{{"10.0.0.1", 7000}, {"10.0.0.2", 6379}, {"::1", 7002}}));
}

TEST(RedisTargetTest, SentinelMasterAndDatabase) {
  absl::StatusOr<RedisTarget> target =
      ParseRedisTarget("redis-sentinel://u:p%40ss@s1:5000,s2/limits-primary?db=2");
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->topology, Topology::kSentinel);
  EXPECT_EQ(target->master_name, "limits-primary");
  EXPECT_EQ(target->node.user, "u");
  EXPECT_EQ(target->node.password, "p@ss");
  EXPECT_EQ(target->node.db, 2);
  EXPECT_EQ(target->seeds, (std::vector<HostPort>{{"s1", 5000}, {"s2", 26379}}));
}

TEST(RedisTargetTest, TlsClusterAndSentinel) {
  absl::StatusOr<RedisTarget> cluster = ParseRedisTarget(
      "rediss-cluster://:pw@h1:7000,h2?ca=/ca%20dir/ca.pem&cert=/c.pem&key=/k.pem");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ(cluster->topology, Topology::kCluster);
  EXPECT_TRUE(cluster->node.tls);
  EXPECT_EQ(cluster->node.password, "pw");
  EXPECT_EQ(cluster->node.tls_options.ca_file, "/ca dir/ca.pem");
  EXPECT_EQ(cluster->node.tls_options.cert_file, "/c.pem");
  EXPECT_EQ(cluster->node.tls_options.key_file, "/k.pem");
  EXPECT_TRUE(cluster->node.tls_options.verify_peer);
  EXPECT_EQ(cluster->seeds, (std::vector<HostPort>{{"h1", 7000}, {"h2", 6379}}));

  absl::StatusOr<RedisTarget> sentinel =
      ParseRedisTarget("rediss-sentinel://s1:5000/limits?db=3&verify=no&ca=/ca.pem");
  ASSERT_TRUE(sentinel.ok()) << sentinel.status();
  EXPECT_EQ(sentinel->topology, Topology::kSentinel);
  EXPECT_TRUE(sentinel->node.tls);
  EXPECT_EQ(sentinel->master_name, "limits");
  EXPECT_EQ(sentinel->node.db, 3);
  EXPECT_FALSE(sentinel->node.tls_options.verify_peer);
  EXPECT_EQ(sentinel->node.tls_options.ca_file, "/ca.pem");

  EXPECT_FALSE(ParseRedisTarget("redis-cluster://h")->node.tls);
  EXPECT_EQ(UrlTopology("rediss-cluster://h"), Topology::kCluster);
  EXPECT_EQ(UrlTopology("rediss-sentinel://h/m"), Topology::kSentinel);
  EXPECT_EQ(UrlTopology("rediss://h"), Topology::kStandalone);
}

TEST(RedisTargetTest, StandaloneIsRedisUrl) {
  absl::StatusOr<RedisTarget> target = ParseRedisTarget("redis://h:6380/4");
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->topology, Topology::kStandalone);
  EXPECT_EQ(target->node.db, 4);
  EXPECT_EQ(target->seeds, (std::vector<HostPort>{{"h", 6380}}));
}

TEST(RedisTargetTest, RejectsWithTheReason) {
  struct Case {
    std::string url;
    std::string message;
  };
  for (const Case& c :
       {Case{"redis-cluster://h:1/3", "only database 0"},
        Case{"redis-cluster://h:1,,h:2", "missing host"}, Case{"redis-cluster://h:x", "port \"x\""},
        Case{"redis-sentinel://s:26379", "missing /<master name>"},
        Case{"redis-sentinel://s:26379/m?database=1", "unknown parameter \"database\""},
        Case{"redis-sentinel://s:26379/m?db=-1", "db must be a number >= 0"},
        Case{"redis-sentinel://s/m?ca=/x", "TLS files need rediss-sentinel://"},
        Case{"redis-cluster://h?ca=/x", "TLS files need rediss-cluster://"},
        Case{"rediss-cluster://h?cafile=/x", "unknown parameter \"cafile\""},
        Case{"rediss-sentinel://s/m?verify=maybe", "unknown parameter \"verify\""}}) {
    absl::StatusOr<RedisTarget> target = ParseRedisTarget(c.url);
    ASSERT_FALSE(target.ok()) << c.url;
    EXPECT_EQ(target.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(target.status().message()), HasSubstr(c.message)) << c.url;
  }
  absl::StatusOr<RedisTarget> secret = ParseRedisTarget("redis-cluster://:hunter2@h:0");
  ASSERT_FALSE(secret.ok());
  EXPECT_THAT(std::string(secret.status().message()), Not(HasSubstr("hunter2")));
}

}  // namespace
}  // namespace tollgate::redis

namespace tollgate::redis {
namespace {

TEST(RedisUrlTest, RedissTurnsTlsOnWithItsOptions) {
  absl::StatusOr<RedisUrl> url = ParseRedisUrl(
      "rediss://:pw@cache.internal:6380/1?ca=/etc/ca%20dir/ca.pem&cert=/c.pem&key=/k.pem");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_TRUE(url->tls);
  EXPECT_EQ(url->host, "cache.internal");
  EXPECT_EQ(url->port, 6380);
  EXPECT_EQ(url->db, 1);
  EXPECT_EQ(url->password, "pw");
  EXPECT_EQ(url->tls_options.ca_file, "/etc/ca dir/ca.pem");
  EXPECT_EQ(url->tls_options.cert_file, "/c.pem");
  EXPECT_EQ(url->tls_options.key_file, "/k.pem");
  EXPECT_TRUE(url->tls_options.verify_peer);

  EXPECT_TRUE(url->tls_options.verify_host);

  url = ParseRedisUrl("rediss://h?verify=no");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_FALSE(url->tls_options.verify_peer);
  url = ParseRedisUrl("rediss://h?verify=chain");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_TRUE(url->tls_options.verify_peer);
  EXPECT_FALSE(url->tls_options.verify_host);
  EXPECT_FALSE(ParseRedisUrl("redis://h")->tls);
}

TEST(RedisUrlTest, TlsParametersAreChecked) {
  EXPECT_THAT(std::string(ParseRedisUrl("redis://h?ca=/x").status().message()),
              HasSubstr("need rediss://"));
  EXPECT_THAT(std::string(ParseRedisUrl("rediss://h?cafile=/x").status().message()),
              HasSubstr("unknown parameter \"cafile\""));
  EXPECT_THAT(std::string(ParseRedisUrl("rediss://h?verify=maybe").status().message()),
              HasSubstr("unknown parameter \"verify\""));
}

}  // namespace
}  // namespace tollgate::redis
