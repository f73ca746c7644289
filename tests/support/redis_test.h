// Copyright tollgate authors. A test fixture with a real redis-server of its own.
#ifndef TOLLGATE_TESTS_SUPPORT_REDIS_TEST_H_
#define TOLLGATE_TESTS_SUPPORT_REDIS_TEST_H_

#include <memory>

#include "gtest/gtest.h"
#include "src/store/redis/client.h"
#include "tests/support/redis_server.h"

namespace tollgate::testing {

// Starts a redis-server for each test (server_) and connects one client to it (client_,
// one connection), for the test to read and write keys beside the code under test.
class RedisTest : public ::testing::Test {
 protected:
  void SetUp() override;

  std::unique_ptr<RedisServer> server_;
  std::unique_ptr<redis::RedisClient> client_;
};

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_REDIS_TEST_H_
