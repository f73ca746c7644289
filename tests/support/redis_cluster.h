// Copyright tollgate authors. Real Redis topologies for tests: a Redis Cluster, and a
// primary with a replica watched by Redis Sentinel. All on loopback, free ports.
#ifndef TOLLGATE_TESTS_SUPPORT_REDIS_CLUSTER_H_
#define TOLLGATE_TESTS_SUPPORT_REDIS_CLUSTER_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/store/redis/resp.h"
#include "tests/support/fault_proxy.h"
#include "tests/support/process.h"
#include "tests/support/redis_server.h"
#include "tests/support/tls_certificates.h"

namespace tollgate::testing {

// Runs `argv` to completion; returns its stdout and stderr, or an error naming the exit
// code and output when it exits non-zero.
absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv);

// One command to 127.0.0.1:`port` on a fresh connection (for inspecting nodes).
absl::StatusOr<redis::RedisReply> RedisCommand(int port, const std::vector<std::string>& args);

// `primaries` primaries and `primaries * replicas_per_primary` replicas of `redis-server
// --cluster-enabled yes` (cluster-node-timeout 1000 ms, so a dead primary fails over in
// about 2 s), joined with `redis-cli --cluster create --cluster-replicas N --cluster-yes`.
// Start returns once every node reports cluster_state:ok and agrees on the slot map. The
// destructor kills every node.
class RedisCluster {
 public:
  struct Node {
    std::string id;
    int port = 0;
    bool primary = false;
    std::string primary_id;  // for a replica
  };

  // With `tls`, every node also serves TLS (TestCertificates::NodeArgs: client certificates
  // required, the cluster bus and replication over TLS) beside its plain port, which the
  // helpers below use. REQUIRES: `tls` outlives the cluster.
  static absl::StatusOr<std::unique_ptr<RedisCluster>> Start(int primaries = 3,
                                                             int replicas_per_primary = 1,
                                                             const TestCertificates* tls = nullptr);

  // redis-cluster://127.0.0.1:<first port>,127.0.0.1:<second port>
  std::string url() const;
  // rediss-cluster://127.0.0.1:<first TLS port>,...?<TestCertificates::UrlQuery()>: a
  // cluster started with `tls`, reached over TLS only.
  std::string tls_url() const;
  // The nodes as CLUSTER NODES on a live node reports them now (dead ones left out).
  absl::StatusOr<std::vector<Node>> Nodes() const;
  // The port of the primary serving `slot` now (CLUSTER SLOTS on a live node).
  absl::StatusOr<int> SlotOwner(int slot) const;
  // SIGKILL of the node on `port`.
  void Kill(int port);
  // Waits until every live node reports cluster_state:ok and `port` (if given) is a
  // primary.
  absl::Status WaitHealthy(std::chrono::milliseconds timeout,
                           std::optional<int> primary_port = std::nullopt) const;
  // Moves `slot` from the primary on `from_port` to the one on `to_port` with the steps
  // `redis-cli --cluster reshard` takes: SETSLOT IMPORTING / MIGRATING, MIGRATE of its
  // keys in batches of `batch` with `pause` between batches, then SETSLOT NODE everywhere.
  absl::Status MoveSlot(int slot, int from_port, int to_port, int batch,
                        std::chrono::milliseconds pause);

 private:
  RedisCluster() = default;
  std::vector<std::unique_ptr<RedisServer>> servers_;
  std::vector<int> tls_ports_;  // with `tls`: servers_[i]'s TLS port
  const TestCertificates* tls_ = nullptr;
  std::vector<int> live_ports() const;
};

// A primary, one replica and one sentinel (quorum 1, down-after 1000 ms) monitoring the
// primary as `master_name`. The destructor kills all three.
class RedisSentinelSet {
 public:
  // With `tls`, the primary, the replica and the sentinel also serve TLS (as
  // RedisCluster::Start), the replica replicates and the sentinel monitors over TLS, so
  // the sentinel names the primary by its TLS port. REQUIRES: `tls` outlives the set.
  static absl::StatusOr<std::unique_ptr<RedisSentinelSet>> Start(
      const std::string& master_name = "limits", const TestCertificates* tls = nullptr);
  // Plaintext, with the replica's replication link to the primary through a FaultProxy
  // (replication_link()): a partition or a lag between primary and replica on demand, while
  // the sentinel and clients reach both directly.
  static absl::StatusOr<std::unique_ptr<RedisSentinelSet>> StartWithProxiedReplication(
      const std::string& master_name = "limits");
  ~RedisSentinelSet();

  // redis-sentinel://127.0.0.1:<sentinel port>/<master name>; started with `tls`:
  // rediss-sentinel://127.0.0.1:<sentinel TLS port>/<master name>?<UrlQuery()>.
  std::string url() const;
  int sentinel_port() const { return sentinel_port_; }
  // The primary's port as the sentinel names it now.
  absl::StatusOr<int> PrimaryPort() const;
  int port(int index) const { return servers_[index]->port(); }
  // Waits until the sentinel knows the replica and the replica's link to the primary is up.
  absl::Status WaitReplicaKnown(std::chrono::milliseconds timeout) const;
  // The proxy between the replica and the first primary (StartWithProxiedReplication), or
  // nullptr.
  FaultProxy* replication_link() const { return replication_link_.get(); }
  // SIGKILL of the first primary.
  void KillPrimary() { servers_[0]->Kill(); }

 private:
  RedisSentinelSet() = default;
  static absl::StatusOr<std::unique_ptr<RedisSentinelSet>> Start(const std::string& master_name,
                                                                 const TestCertificates* tls,
                                                                 bool proxy_replication);
  std::string master_name_;
  // Declared before the servers: the replica's link goes through it until the servers stop.
  std::unique_ptr<FaultProxy> replication_link_;
  std::vector<std::unique_ptr<RedisServer>> servers_;  // [0] first primary, [1] replica
  int sentinel_port_ = 0;
  int sentinel_tls_port_ = 0;
  const TestCertificates* tls_ = nullptr;
  std::string dir_;
  std::optional<Subprocess> sentinel_;
};

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_REDIS_CLUSTER_H_
