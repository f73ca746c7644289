// Copyright tollgate authors.
#include "src/store/redis/router.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tollgate::redis {
namespace {

// The one Redis of a redis:// URL: a RedisClient, slots ignored, no redirects.
class StandaloneRouter final : public Router {
 public:
  StandaloneRouter(std::unique_ptr<RedisClient> client, std::string address)
      : address_(std::move(address)), client_(std::move(client)) {}

  void Send(int /*slot*/, std::string formatted_command, ReplyCallback done,
            bool /*follow_ask*/) override {
    client_->Send(formatted_command, std::move(done));
  }
  int ReadyConnections() const override { return client_->ReadyConnections(); }
  Topology topology() const override { return Topology::kStandalone; }
  std::vector<std::string> Primaries() const override { return {address_}; }

 private:
  const std::string address_;
  std::unique_ptr<RedisClient> client_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Router>> Router::Connect(const RedisTarget& target,
                                                        const RouterOptions& options) {
  switch (target.topology) {
    case Topology::kCluster:
      return ConnectClusterRouter(target, options);
    case Topology::kSentinel:
      return ConnectSentinelRouter(target, options);
    case Topology::kStandalone:
      break;
  }
  ClientOptions client_options = options.client;
  client_options.connection.url = target.node;
  absl::StatusOr<std::unique_ptr<RedisClient>> client = RedisClient::Connect(client_options);
  if (!client.ok()) return client.status();
  return std::make_unique<StandaloneRouter>(*std::move(client),
                                            absl::StrCat(target.node.host, ":", target.node.port));
}

absl::StatusOr<RedisReply> Router::Command(const std::vector<std::string>& args, int slot) {
  return BlockingCommand(args, [this, slot](std::string command, ReplyCallback done) {
    Send(slot, std::move(command), std::move(done));
  });
}

}  // namespace tollgate::redis
