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
        Case{"rediss://localhost:6379", "TLS"}, Case{"redis://:6379", "missing host"},
        Case{"redis://localhost:0", "port \"0\""}, Case{"redis://localhost:http", "port \"http\""},
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

}  // namespace
}  // namespace tollgate::redis
