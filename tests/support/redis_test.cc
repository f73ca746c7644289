// Copyright tollgate authors.
#include "tests/support/redis_test.h"

#include <utility>

#include "src/store/redis/redis_url.h"

namespace tollgate::testing {

void RedisTest::SetUp() {
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *std::move(server);
  redis::ClientOptions options;
  options.connections = 1;
  options.connection.url = *redis::ParseRedisUrl(server_->url());
  absl::StatusOr<std::unique_ptr<redis::RedisClient>> client = redis::RedisClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  client_ = *std::move(client);
}

}  // namespace tollgate::testing
