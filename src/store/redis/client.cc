// Copyright tollgate authors.
#include "src/store/redis/client.h"

#include <boost/asio/post.hpp>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tollgate::redis {

ConnectionPool::ConnectionPool(boost::asio::io_context& io, const ClientOptions& options,
                               bool with_ask_connection)
    : io_(io),
      options_(options),
      address_(absl::StrCat(options.connection.url.host, ":", options.connection.url.port)) {
  for (int i = 0; i < std::max(1, options.connections); ++i) {
    connections_.push_back(std::make_unique<RedisConnection>(io, options.connection));
    connections_.back()->set_owner(this);
  }
  if (with_ask_connection) {
    ask_connection_ = std::make_unique<RedisConnection>(io, options.connection);
  }
}

ConnectionPool::~ConnectionPool() = default;

void ConnectionPool::Start() {
  {
    absl::MutexLock lock(&mu_);
    pending_starts_ = static_cast<int>(connections_.size());
  }
  for (auto& connection : connections_) {
    connection->Start([this](absl::Status status) {
      absl::MutexLock lock(&mu_);
      if (!status.ok() && first_error_.ok()) first_error_ = std::move(status);
      --pending_starts_;
    });
  }
  if (ask_connection_ != nullptr) ask_connection_->Start([](const absl::Status&) {});
}

absl::Status ConnectionPool::AwaitStarted() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* pending) { return *pending == 0; }, &pending_starts_));
  return first_error_;
}

void ConnectionPool::Send(std::string_view formatted_command, ReplyCallback done) {
  // A command sent while one of our connections' replies are processed (a caller's next
  // check, from its callback) goes on that connection: it leaves in the write that follows
  // that batch of replies, one write per batch, while the other connections' batches are
  // with Redis.
  RedisConnection* reading = RedisConnection::ReadingOnThisThread();
  if (reading != nullptr && reading->owner() == this && reading->TrySend(formatted_command, done)) {
    return;
  }
  const size_t n = connections_.size();
  const uint64_t start = next_.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    RedisConnection& connection = *connections_[(start + i) % n];
    if (i + 1 == n) {
      connection.Send(formatted_command, std::move(done));  // fails fast if down
      return;
    }
    if (connection.TrySend(formatted_command, done)) return;
  }
}

void ConnectionPool::SendAsking(std::string_view formatted_command, ReplyCallback done) {
  // Only the I/O thread sends on this connection, and both commands are queued before it
  // flushes, so they go out back to back: ASKING applies to exactly the next command.
  ask_connection_->Send(FormatCommand({"ASKING"}), [](const absl::StatusOr<RedisReply>&) {});
  ask_connection_->Send(formatted_command, std::move(done));
}

void ConnectionPool::SendDurable(std::string_view formatted_command, const DurableSend& how,
                                 ReplyCallback done) {
  DurableWrites* durable = durable_.load(std::memory_order_acquire);
  if (durable == nullptr) {
    absl::MutexLock lock(&durable_mu_);
    if (shut_down_) {
      std::move(done)(absl::UnavailableError("the Redis store is shutting down"));
      return;
    }
    if (durable_owned_ == nullptr) {
      durable_owned_ =
          std::make_unique<DurableWrites>(io_, options_.connection, options_.durable_monitor);
      durable_owned_->Start();
      durable_.store(durable_owned_.get(), std::memory_order_release);
    }
    durable = durable_owned_.get();
  }
  durable->Send(formatted_command, how, std::move(done));
}

int ConnectionPool::ReadyConnections() const {
  int ready = 0;
  for (const auto& connection : connections_) ready += connection->ready() ? 1 : 0;
  return ready;
}

void ConnectionPool::Shutdown() {
  for (auto& connection : connections_) connection->Shutdown();
  if (ask_connection_ != nullptr) ask_connection_->Shutdown();
  DurableWrites* durable = nullptr;
  {
    absl::MutexLock lock(&durable_mu_);
    shut_down_ = true;
    durable = durable_owned_.get();
  }
  if (durable != nullptr) durable->Shutdown();
}

IoThread::IoThread() : work_(boost::asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}

void IoThread::Stop(absl::AnyInvocable<void() &&> before_stop) {
  if (!thread_.joinable()) return;
  std::promise<void> stopped;
  boost::asio::post(io_, [&stopped, &before_stop] {
    std::move(before_stop)();
    stopped.set_value();
  });
  stopped.get_future().wait();
  work_.reset();
  io_.stop();
  thread_.join();
}

void IoThread::Post(absl::AnyInvocable<void() &&> task) {
  boost::asio::post(io_, [task = std::move(task)]() mutable { std::move(task)(); });
}

IoThread::~IoThread() {
  Stop([] {});
}

RedisClient::RedisClient(const ClientOptions& options)
    : pool_(std::make_unique<ConnectionPool>(io_thread_.io(), options)) {}

absl::StatusOr<std::unique_ptr<RedisClient>> RedisClient::Connect(const ClientOptions& options) {
  std::unique_ptr<RedisClient> client(new RedisClient(options));
  client->pool_->Start();
  // Every first attempt ends (ready, refused, or the connect timeout fires).
  absl::Status status = client->pool_->AwaitStarted();
  if (!status.ok()) return status;  // the destructor stops everything
  return client;
}

RedisClient::~RedisClient() {
  io_thread_.Stop([this] { pool_->Shutdown(); });
}

absl::StatusOr<RedisReply> RedisClient::Command(const std::vector<std::string>& args) {
  return BlockingCommand(args, [this](const std::string& command, ReplyCallback done) {
    Send(command, std::move(done));
  });
}

}  // namespace tollgate::redis
