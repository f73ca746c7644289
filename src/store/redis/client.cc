// Copyright tollgate authors.
#include "src/store/redis/client.h"

#include <boost/asio/post.hpp>
#include <future>
#include <utility>

namespace tollgate::redis {

RedisClient::RedisClient(const ClientOptions& options) : work_(boost::asio::make_work_guard(io_)) {
  for (int i = 0; i < std::max(1, options.connections); ++i) {
    connections_.push_back(std::make_unique<RedisConnection>(io_, options.connection));
  }
  thread_ = std::thread([this] { io_.run(); });
}

absl::StatusOr<std::unique_ptr<RedisClient>> RedisClient::Connect(const ClientOptions& options) {
  std::unique_ptr<RedisClient> client(new RedisClient(options));
  std::vector<std::future<absl::Status>> results;
  for (auto& connection : client->connections_) {
    auto promise = std::make_shared<std::promise<absl::Status>>();
    results.push_back(promise->get_future());
    connection->Start([promise](absl::Status status) { promise->set_value(std::move(status)); });
  }
  // Every first attempt ends (ready, refused, or the connect timeout fires).
  for (auto& result : results) {
    absl::Status status = result.get();
    if (!status.ok()) return status;  // the destructor stops everything
  }
  return client;
}

RedisClient::~RedisClient() {
  std::promise<void> stopped;
  boost::asio::post(io_, [this, &stopped] {
    for (auto& connection : connections_) connection->Shutdown();
    stopped.set_value();
  });
  stopped.get_future().wait();
  work_.reset();
  io_.stop();
  thread_.join();
}

void RedisClient::Send(std::string formatted_command, ReplyCallback done) {
  const size_t n = connections_.size();
  const uint64_t start = next_.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    RedisConnection& connection = *connections_[(start + i) % n];
    if (i + 1 == n || connection.ready()) {
      connection.Send(std::move(formatted_command), std::move(done));
      return;
    }
  }
}

absl::StatusOr<RedisReply> RedisClient::Command(const std::vector<std::string>& args) {
  std::promise<absl::StatusOr<RedisReply>> promise;
  std::future<absl::StatusOr<RedisReply>> result = promise.get_future();
  Send(args, [&promise](absl::StatusOr<RedisReply> reply) { promise.set_value(std::move(reply)); });
  return result.get();
}

int RedisClient::ReadyConnections() const {
  int ready = 0;
  for (const auto& connection : connections_) ready += connection->ready() ? 1 : 0;
  return ready;
}

}  // namespace tollgate::redis
