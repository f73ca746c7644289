// Copyright tollgate authors. A Redis older than 7.0 is refused at connect, with a message
// that says why.
//
// Debian 12 ships only Redis 7, so the old server here is a small RESP peer of the test's own
// that answers INFO server the way Redis 6.2 does (the version line is all the check reads).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/redis/connection.h"
#include "tests/support/redis_server.h"

namespace tollgate {
namespace {

using ::testing::HasSubstr;

// Accepts one connection on a loopback port and answers every command with the INFO server
// reply of `version` (the handshake sends only INFO server when there is no AUTH or SELECT).
class OldRedis {
 public:
  explicit OldRedis(std::string version) : version_(std::move(version)) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    listen(listener_, 4);
    socklen_t length = sizeof(address);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~OldRedis() {
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  void Serve() {
    const int client = accept(listener_, nullptr, nullptr);
    if (client < 0) return;
    const std::string info =
        absl::StrCat("# Server\r\nredis_version:", version_, "\r\nredis_mode:standalone\r\n");
    const std::string reply = absl::StrCat("$", info.size(), "\r\n", info, "\r\n");
    char buffer[4096];
    while (read(client, buffer, sizeof(buffer)) > 0) {
      if (write(client, reply.data(), reply.size()) < 0) break;
    }
    close(client);
  }

  const std::string version_;
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
};

absl::Status ConnectTo(int port) {
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  redis::ConnectionOptions options;
  options.url.host = "127.0.0.1";
  options.url.port = port;
  redis::RedisConnection connection(io, options);
  std::thread thread([&io] { io.run(); });
  std::promise<absl::Status> first;
  connection.Start([&first](absl::Status status) { first.set_value(std::move(status)); });
  absl::Status status = first.get_future().get();
  std::promise<void> stopped;
  boost::asio::post(io, [&] {
    connection.Shutdown();
    stopped.set_value();
  });
  stopped.get_future().wait();
  work.reset();
  io.stop();
  thread.join();
  return status;
}

TEST(RedisVersionTest, ARedisOlderThanSevenIsRefusedWithTheReason) {
  OldRedis old_redis("6.2.14");
  absl::Status status = ConnectTo(old_redis.port());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("Redis 6.2.14"));
  EXPECT_THAT(status.message(), HasSubstr("7.0 or later"));
}

TEST(RedisVersionTest, TheRealRedisOfThisMachineIsAccepted) {
  absl::StatusOr<std::unique_ptr<testing::RedisServer>> server = testing::RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(ConnectTo((*server)->port()).ok());
}

}  // namespace
}  // namespace tollgate
