// Copyright tollgate authors.
#include "src/cli/serve_environment.h"

#include <string>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/redis/redis_url.h"

namespace tollgate::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kPassword[] = "p@ss:w/rd%?#&=[]x";

// The password ParseRedisTarget reads back from WithRedisPassword(url, kPassword).
std::string RoundTrip(const std::string& url) {
  absl::StatusOr<std::string> with = WithRedisPassword(url, kPassword);
  EXPECT_TRUE(with.ok()) << with.status();
  if (!with.ok()) return "";
  absl::StatusOr<redis::RedisTarget> target = redis::ParseRedisTarget(*with);
  EXPECT_TRUE(target.ok()) << target.status();
  return target.ok() ? target->node.password : "";
}

TEST(WithRedisPasswordTest, EveryUrlFormKeepsItsPartsAndGainsThePassword) {
  EXPECT_EQ(RoundTrip("redis://127.0.0.1:6379"), kPassword);
  EXPECT_EQ(RoundTrip("redis://127.0.0.1"), kPassword);
  EXPECT_EQ(RoundTrip("redis://[::1]:6380/3"), kPassword);
  EXPECT_EQ(RoundTrip("rediss://redis.internal:6380?verify=no"), kPassword);
  EXPECT_EQ(RoundTrip("redis-cluster://10.0.0.1:7000,10.0.0.2:7001"), kPassword);
  EXPECT_EQ(RoundTrip("redis-sentinel://10.0.0.5,10.0.0.6:26380/primary?db=2"), kPassword);

  EXPECT_EQ(*WithRedisPassword("redis://app@10.0.0.5:6379/2", "pw"),
            "redis://app:pw@10.0.0.5:6379/2");
  EXPECT_EQ(*WithRedisPassword("redis-sentinel://s1:26379/m?db=1", "a b"),
            "redis-sentinel://:a%20b@s1:26379/m?db=1");
  absl::StatusOr<redis::RedisTarget> acl =
      redis::ParseRedisTarget(*WithRedisPassword("redis://app@127.0.0.1:6379/4", kPassword));
  ASSERT_TRUE(acl.ok()) << acl.status();
  EXPECT_EQ(acl->node.user, "app");
  EXPECT_EQ(acl->node.password, kPassword);
  EXPECT_EQ(acl->node.db, 4);
}

TEST(WithRedisPasswordTest, RefusesTwoPasswordsAndNeverEchoesThem) {
  absl::StatusOr<std::string> twice = WithRedisPassword("redis://:old-secret@host:6379", "new");
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(std::string(twice.status().message()), HasSubstr("already has a password"));
  EXPECT_THAT(std::string(twice.status().message()), Not(HasSubstr("secret")));
  EXPECT_FALSE(WithRedisPassword("host:6379", "pw").ok());
}

TEST(RedisUrlHasPasswordTest, OnlyCredentialsWithAPassword) {
  EXPECT_TRUE(RedisUrlHasPassword("redis://:pw@host"));
  EXPECT_TRUE(RedisUrlHasPassword("redis://user:pw@host:6379/1"));
  EXPECT_FALSE(RedisUrlHasPassword("redis://user@host"));
  EXPECT_FALSE(RedisUrlHasPassword("redis://host:6379"));
  EXPECT_FALSE(RedisUrlHasPassword("redis://[::1]:6379"));
  EXPECT_FALSE(RedisUrlHasPassword("redis://host:6379/0?ca=/a:b@c"));
}

TEST(HideRedisPasswordsTest, OverwritesThePasswordInPlace) {
  char program[] = "tollgate";
  char serve[] = "serve";
  char flag[] = "--redis";
  char url[] = "redis://user:pw%40x@host:6379/2";
  char joined[] = "--redis=redis://:secret@host";
  char other[] = "--http=127.0.0.1:0";
  char* argv[] = {program, serve, flag, url, joined, other};
  EXPECT_TRUE(HideRedisPasswords(6, argv));
  EXPECT_STREQ(url, "redis://user:xxxxxx@host:6379/2");
  EXPECT_STREQ(joined, "--redis=redis://:xxxxxx@host");
  EXPECT_STREQ(other, "--http=127.0.0.1:0");
  char plain[] = "redis://host:6379";
  char* without[] = {program, serve, flag, plain};
  EXPECT_FALSE(HideRedisPasswords(4, without));
  EXPECT_STREQ(plain, "redis://host:6379");
}

TEST(EnvironmentNameTest, PrefixAndCapitals) {
  EXPECT_EQ(EnvironmentName("redis-password-file"), "TOLLGATE_REDIS_PASSWORD_FILE");
  EXPECT_EQ(EnvironmentName("http"), "TOLLGATE_HTTP");
}

}  // namespace
}  // namespace tollgate::cli
