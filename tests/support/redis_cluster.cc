// Copyright tollgate authors.
#include "tests/support/redis_cluster.h"

#include <signal.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/store/redis/client.h"
#include "src/store/redis/durability.h"

namespace tollgate::testing {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv) {
  const std::string dir = MakeTempDir("tollgate-cmd");
  const std::string log = dir + "/out.log";
  absl::StatusOr<Subprocess> process = Subprocess::Start(argv, log);
  if (!process.ok()) return process.status();
  const int code = process->Wait();
  std::string output = ReadAll(log);
  if (code != 0) {
    return absl::InternalError(
        absl::StrCat(absl::StrJoin(argv, " "), " exited with ", code, ":\n", output));
  }
  return output;
}

absl::StatusOr<redis::RedisReply> RedisCommand(int port, const std::vector<std::string>& args) {
  redis::ClientOptions options;
  options.connections = 1;
  options.connection.url.host = "127.0.0.1";
  options.connection.url.port = port;
  options.connection.connect_timeout = std::chrono::milliseconds(1000);
  absl::StatusOr<std::unique_ptr<redis::RedisClient>> client = redis::RedisClient::Connect(options);
  if (!client.ok()) return client.status();
  return (*client)->Command(args);
}

absl::StatusOr<std::unique_ptr<RedisCluster>> RedisCluster::Start(int primaries,
                                                                  int replicas_per_primary,
                                                                  const TestCertificates* tls) {
  std::unique_ptr<RedisCluster> cluster(new RedisCluster());
  cluster->tls_ = tls;
  const int total = primaries * (1 + replicas_per_primary);
  std::vector<std::string> create = {"redis-cli", "--cluster", "create"};
  for (int i = 0; i < total; ++i) {
    std::vector<std::string> args = {
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout",
        "1000", "--cluster-require-full-coverage", "no",
        // A replica may take over however long ago it last heard from its primary.
        "--cluster-replica-validity-factor", "0",
        // The bus port defaults to port + 10000, out of range for a high free port.
        "--cluster-port", absl::StrCat(FreePort())};
    if (tls != nullptr) {
      cluster->tls_ports_.push_back(FreePort());
      std::vector<std::string> tls_args = tls->NodeArgs(cluster->tls_ports_.back());
      args.insert(args.end(), tls_args.begin(), tls_args.end());
    }
    absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start(std::move(args));
    if (!server.ok()) return server.status();
    create.push_back(absl::StrCat("127.0.0.1:", (*server)->port()));
    cluster->servers_.push_back(*std::move(server));
  }
  create.insert(create.end(),
                {"--cluster-replicas", absl::StrCat(replicas_per_primary), "--cluster-yes"});
  absl::StatusOr<std::string> created = RunCommand(create);
  if (!created.ok()) return created.status();
  absl::Status healthy = cluster->WaitHealthy(std::chrono::seconds(30));
  if (!healthy.ok()) return healthy;
  // Replicas are assigned after the slots: wait until every node sees them as replicas.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (true) {
    bool settled = true;
    for (int port : cluster->live_ports()) {
      absl::StatusOr<redis::RedisReply> reply = RedisCommand(port, {"CLUSTER", "NODES"});
      int masters = 0;
      int lines = 0;
      if (reply.ok()) {
        for (absl::string_view line : absl::StrSplit(reply->str, '\n', absl::SkipEmpty())) {
          std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
          if (fields.size() < 8) continue;
          ++lines;
          masters += absl::StrContains(fields[2], "master") ? 1 : 0;
          if (absl::StrContains(fields[2], "fail") || absl::StrContains(fields[2], "handshake") ||
              absl::StrContains(fields[2], "noaddr")) {
            settled = false;
          }
        }
      }
      if (!reply.ok() || masters != primaries || lines != total) settled = false;
      // A replica must have finished its first sync before a test kills its primary, and its
      // primary must count it online (what a store reads to call a limit durable).
      absl::StatusOr<redis::RedisReply> role = RedisCommand(port, {"INFO", "replication"});
      if (!role.ok() || (absl::StrContains(role->str, "role:slave") &&
                         !absl::StrContains(role->str, "master_link_status:up"))) {
        settled = false;
      }
      if (role.ok() && absl::StrContains(role->str, "role:master") &&
          redis::OnlineReplicas(role->str) < replicas_per_primary) {
        settled = false;
      }
    }
    if (settled) break;
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError("cluster nodes never agreed on primaries and replicas");
    }
    std::this_thread::sleep_for(kPoll);
  }
  return cluster;
}

std::vector<int> RedisCluster::live_ports() const {
  std::vector<int> ports;
  for (const auto& server : servers_) ports.push_back(server->port());
  return ports;
}

std::string RedisCluster::url() const {
  std::vector<std::string> seeds;
  for (int port : live_ports()) {
    seeds.push_back(absl::StrCat("127.0.0.1:", port));
    if (seeds.size() == 2) break;
  }
  return absl::StrCat("redis-cluster://", absl::StrJoin(seeds, ","));
}

std::string RedisCluster::tls_url() const {
  std::vector<std::string> seeds;
  for (size_t i = 0; i < tls_ports_.size() && i < 2; ++i) {
    seeds.push_back(absl::StrCat("127.0.0.1:", tls_ports_[i]));
  }
  return absl::StrCat("rediss-cluster://", absl::StrJoin(seeds, ","), "?",
                      tls_ == nullptr ? "" : tls_->UrlQuery());
}

absl::StatusOr<std::vector<RedisCluster::Node>> RedisCluster::Nodes() const {
  absl::Status last = absl::UnavailableError("no live node");
  for (int port : live_ports()) {
    absl::StatusOr<redis::RedisReply> reply = RedisCommand(port, {"CLUSTER", "NODES"});
    if (!reply.ok() || reply->type != redis::RedisReply::Type::kString) {
      last = reply.ok() ? absl::InternalError(redis::DebugString(*reply)) : reply.status();
      continue;
    }
    std::vector<Node> nodes;
    const std::vector<int> live = live_ports();
    for (absl::string_view line : absl::StrSplit(reply->str, '\n', absl::SkipEmpty())) {
      std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
      if (fields.size() < 8) continue;
      Node node;
      node.id = std::string(fields[0]);
      absl::string_view address = fields[1].substr(0, fields[1].find('@'));
      if (!absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &node.port)) continue;
      if (std::find(live.begin(), live.end(), node.port) == live.end()) continue;
      node.primary = absl::StrContains(fields[2], "master");
      if (!node.primary) node.primary_id = std::string(fields[3]);
      nodes.push_back(node);
    }
    return nodes;
  }
  return last;
}

absl::StatusOr<int> RedisCluster::SlotOwner(int slot) const {
  absl::Status last = absl::UnavailableError("no live node");
  for (int port : live_ports()) {
    absl::StatusOr<redis::RedisReply> reply = RedisCommand(port, {"CLUSTER", "SLOTS"});
    if (!reply.ok()) {
      last = reply.status();
      continue;
    }
    for (const redis::RedisReply& range : reply->elements) {
      if (range.elements.size() >= 3 && range.elements[0].integer <= slot &&
          slot <= range.elements[1].integer) {
        return static_cast<int>(range.elements[2].elements[1].integer);
      }
    }
    return absl::NotFoundError(absl::StrCat("no node serves slot ", slot));
  }
  return last;
}

void RedisCluster::Kill(int port) {
  for (auto it = servers_.begin(); it != servers_.end(); ++it) {
    if ((*it)->port() == port) {
      (*it)->Kill();
      servers_.erase(it);
      return;
    }
  }
}

absl::Status RedisCluster::WaitHealthy(std::chrono::milliseconds timeout,
                                       std::optional<int> primary_port) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string why;
  while (std::chrono::steady_clock::now() < deadline) {
    bool ok = true;
    for (int port : live_ports()) {
      absl::StatusOr<redis::RedisReply> info = RedisCommand(port, {"CLUSTER", "INFO"});
      if (!info.ok() || !absl::StrContains(info->str, "cluster_state:ok")) {
        ok = false;
        why = absl::StrCat("node ", port, " is not cluster_state:ok");
        break;
      }
    }
    if (ok && primary_port.has_value()) {
      absl::StatusOr<std::vector<Node>> nodes = Nodes();
      ok = nodes.ok() && std::any_of(nodes->begin(), nodes->end(), [&](const Node& node) {
             return node.port == *primary_port && node.primary;
           });
      if (!ok) why = absl::StrCat("node ", *primary_port, " is not a primary");
    }
    if (ok) return absl::OkStatus();
    std::this_thread::sleep_for(kPoll);
  }
  return absl::DeadlineExceededError(absl::StrCat("cluster not healthy: ", why));
}

absl::Status RedisCluster::MoveSlot(int slot, int from_port, int to_port, int batch,
                                    std::chrono::milliseconds pause) {
  absl::StatusOr<std::vector<Node>> nodes = Nodes();
  if (!nodes.ok()) return nodes.status();
  std::string from_id;
  std::string to_id;
  for (const Node& node : *nodes) {
    if (node.port == from_port) from_id = node.id;
    if (node.port == to_port) to_id = node.id;
  }
  if (from_id.empty() || to_id.empty()) return absl::NotFoundError("unknown node");
  auto command = [](int port, const std::vector<std::string>& args) -> absl::Status {
    absl::StatusOr<redis::RedisReply> reply = RedisCommand(port, args);
    if (!reply.ok()) return reply.status();
    if (reply->is_error()) {
      return absl::InternalError(absl::StrCat(absl::StrJoin(args, " "), ": ", reply->str));
    }
    return absl::OkStatus();
  };
  const std::string s = absl::StrCat(slot);
  absl::Status status = command(to_port, {"CLUSTER", "SETSLOT", s, "IMPORTING", from_id});
  if (status.ok()) status = command(from_port, {"CLUSTER", "SETSLOT", s, "MIGRATING", to_id});
  while (status.ok()) {
    absl::StatusOr<redis::RedisReply> keys =
        RedisCommand(from_port, {"CLUSTER", "GETKEYSINSLOT", s, absl::StrCat(batch)});
    if (!keys.ok()) return keys.status();
    if (keys->elements.empty()) break;
    std::vector<std::string> migrate = {"MIGRATE", "127.0.0.1", absl::StrCat(to_port), "", "0",
                                        "5000",    "KEYS"};
    for (const redis::RedisReply& key : keys->elements) migrate.push_back(key.str);
    status = command(from_port, migrate);
    std::this_thread::sleep_for(pause);
  }
  if (!status.ok()) return status;
  // As redis-cli: the importing node first, then the source, then every other primary.
  status = command(to_port, {"CLUSTER", "SETSLOT", s, "NODE", to_id});
  if (status.ok()) status = command(from_port, {"CLUSTER", "SETSLOT", s, "NODE", to_id});
  for (const Node& node : *nodes) {
    if (!status.ok()) break;
    if (node.primary && node.port != from_port && node.port != to_port) {
      status = command(node.port, {"CLUSTER", "SETSLOT", s, "NODE", to_id});
    }
  }
  return status;
}

absl::StatusOr<std::unique_ptr<RedisSentinelSet>> RedisSentinelSet::StartWithProxiedReplication(
    const std::string& master_name) {
  return Start(master_name, nullptr, /*proxy_replication=*/true);
}

absl::StatusOr<std::unique_ptr<RedisSentinelSet>> RedisSentinelSet::Start(
    const std::string& master_name, const TestCertificates* tls) {
  return Start(master_name, tls, /*proxy_replication=*/false);
}

absl::StatusOr<std::unique_ptr<RedisSentinelSet>> RedisSentinelSet::Start(
    const std::string& master_name, const TestCertificates* tls, bool proxy_replication) {
  std::unique_ptr<RedisSentinelSet> set(new RedisSentinelSet());
  set->master_name_ = master_name;
  set->tls_ = tls;
  // With TLS, each server serves it on a port of its own, and the primary is known by it.
  auto tls_args = [tls](int* port) {
    if (tls == nullptr) return std::vector<std::string>();
    *port = FreePort();
    return tls->NodeArgs(*port);
  };
  int primary_tls_port = 0;
  absl::StatusOr<std::unique_ptr<RedisServer>> primary =
      RedisServer::Start(tls_args(&primary_tls_port));
  if (!primary.ok()) return primary.status();
  const int primary_port = tls != nullptr ? primary_tls_port : (*primary)->port();
  set->servers_.push_back(*std::move(primary));
  int replica_tls_port = 0;
  std::vector<std::string> replica_args = tls_args(&replica_tls_port);
  int link_port = primary_port;
  if (proxy_replication) {
    set->replication_link_ = std::make_unique<FaultProxy>(primary_port);
    link_port = set->replication_link_->port();
  }
  replica_args.insert(replica_args.end(), {"--replicaof", "127.0.0.1", absl::StrCat(link_port)});
  absl::StatusOr<std::unique_ptr<RedisServer>> replica = RedisServer::Start(replica_args);
  if (!replica.ok()) return replica.status();
  set->servers_.push_back(*std::move(replica));

  set->sentinel_port_ = FreePort();
  set->dir_ = MakeTempDir("tollgate-sentinel");
  const std::string config = set->dir_ + "/sentinel.conf";
  std::string tls_config;
  if (tls != nullptr) {
    set->sentinel_tls_port_ = FreePort();
    tls_config =
        absl::StrCat("tls-port ", set->sentinel_tls_port_, "\ntls-cert-file ", tls->node_cert(),
                     "\ntls-key-file ", tls->node_key(), "\ntls-ca-cert-file ", tls->ca(),
                     "\ntls-auth-clients yes\ntls-replication yes\n");
  }
  WriteFile(config, absl::StrCat("port ", set->sentinel_port_, "\nbind 127.0.0.1\ndir ", set->dir_,
                                 "\n", tls_config, "sentinel monitor ", master_name, " 127.0.0.1 ",
                                 primary_port, " 1\nsentinel down-after-milliseconds ", master_name,
                                 " 1000\nsentinel failover-timeout ", master_name, " 10000\n"));
  absl::StatusOr<Subprocess> sentinel =
      Subprocess::Start({"redis-server", config, "--sentinel"}, set->dir_ + "/sentinel.log");
  if (!sentinel.ok()) return sentinel.status();
  set->sentinel_.emplace(*std::move(sentinel));
  absl::Status up = WaitForRedisPing(set->sentinel_port_, 10'000);
  if (!up.ok()) return up;
  return set;
}

RedisSentinelSet::~RedisSentinelSet() {
  if (sentinel_.has_value()) {
    sentinel_->Signal(SIGKILL);
    sentinel_->Wait();
  }
}

std::string RedisSentinelSet::url() const {
  if (tls_ != nullptr) {
    return absl::StrCat("rediss-sentinel://127.0.0.1:", sentinel_tls_port_, "/", master_name_, "?",
                        tls_->UrlQuery());
  }
  return absl::StrCat("redis-sentinel://127.0.0.1:", sentinel_port_, "/", master_name_);
}

absl::StatusOr<int> RedisSentinelSet::PrimaryPort() const {
  absl::StatusOr<redis::RedisReply> reply =
      RedisCommand(sentinel_port_, {"SENTINEL", "get-master-addr-by-name", master_name_});
  if (!reply.ok()) return reply.status();
  int port = 0;
  if (reply->elements.size() != 2 || !absl::SimpleAtoi(reply->elements[1].str, &port)) {
    return absl::InternalError(redis::DebugString(*reply));
  }
  return port;
}

absl::Status RedisSentinelSet::WaitReplicaKnown(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    absl::StatusOr<redis::RedisReply> replicas =
        RedisCommand(sentinel_port_, {"SENTINEL", "replicas", master_name_});
    if (replicas.ok()) {
      for (const redis::RedisReply& replica : replicas->elements) {
        bool slave = false;
        bool link_ok = false;
        for (size_t i = 0; i + 1 < replica.elements.size(); i += 2) {
          const std::string& key = replica.elements[i].str;
          const std::string& value = replica.elements[i + 1].str;
          if (key == "flags") slave = value == "slave";
          if (key == "master-link-status") link_ok = value == "ok";
        }
        if (!slave || !link_ok) continue;
        // And the primary counts it online: what a store reads to call a limit durable.
        absl::StatusOr<redis::RedisReply> primary =
            RedisCommand(servers_.front()->port(), {"INFO", "replication"});
        if (primary.ok() && redis::OnlineReplicas(primary->str) > 0) return absl::OkStatus();
      }
    }
    std::this_thread::sleep_for(kPoll);
  }
  return absl::DeadlineExceededError("the sentinel does not know a healthy replica");
}

}  // namespace tollgate::testing
