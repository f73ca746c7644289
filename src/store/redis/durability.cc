// Copyright tollgate authors.
#include "src/store/redis/durability.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tollgate::redis {
namespace {

// Bytes of check.lua's and lease.lua's reply: the time, then per item its flags and three
// doubles (redis_store.cc's ParseCheckReply reads the same).
constexpr size_t kReplyHeadBytes = 8;
constexpr size_t kReplyBytesPerItem = 1 + 3 * 8;

// CONFIG GET `name` on the node of `slot`: its value as a number, or -1.
int64_t ConfigNumber(Router& router, int slot, const std::string& name, std::string* error) {
  absl::StatusOr<RedisReply> reply = router.Command({"CONFIG", "GET", name}, slot);
  int64_t value = -1;
  if (reply.ok() && reply->type == RedisReply::Type::kArray && reply->elements.size() == 2 &&
      absl::SimpleAtoi(reply->elements[1].str, &value)) {
    return value;
  }
  if (error->empty()) {
    *error = absl::StrCat("CONFIG GET ", name, ": ",
                          reply.ok() ? DebugString(*reply) : reply.status().ToString());
  }
  return -1;
}

// One primary, through the slot it serves (kAnySlot: the only one).
PrimaryReplication ReadPrimary(Router& router, int slot, std::string address, bool cluster) {
  PrimaryReplication primary;
  primary.address = std::move(address);
  absl::StatusOr<RedisReply> info = router.Command({"INFO", "replication"}, slot);
  if (info.ok() && info->type == RedisReply::Type::kString) {
    primary.online_replicas = OnlineReplicas(info->str);
  }
  if (primary.online_replicas < 0) {
    primary.error = absl::StrCat("INFO replication: ",
                                 info.ok() ? DebugString(*info) : info.status().ToString());
  }
  primary.min_replicas_to_write =
      ConfigNumber(router, slot, "min-replicas-to-write", &primary.error);
  primary.min_replicas_max_lag = ConfigNumber(router, slot, "min-replicas-max-lag", &primary.error);
  if (cluster) {
    primary.cluster_replica_validity_factor =
        ConfigNumber(router, slot, "cluster-replica-validity-factor", &primary.error);
  }
  return primary;
}

// Each primary of a cluster once, with the first slot it serves (CLUSTER SLOTS).
std::vector<std::pair<std::string, int>> ClusterPrimaries(Router& router) {
  std::vector<std::pair<std::string, int>> primaries;
  absl::StatusOr<RedisReply> slots = router.Command({"CLUSTER", "SLOTS"});
  if (!slots.ok() || slots->type != RedisReply::Type::kArray) return primaries;
  for (const RedisReply& range : slots->elements) {
    if (range.type != RedisReply::Type::kArray || range.elements.size() < 3 ||
        range.elements[2].type != RedisReply::Type::kArray ||
        range.elements[2].elements.size() < 2) {
      continue;
    }
    const RedisReply& node = range.elements[2];
    const std::string address = absl::StrCat(node.elements[0].str, ":", node.elements[1].integer);
    if (std::none_of(primaries.begin(), primaries.end(),
                     [&](const auto& known) { return known.first == address; })) {
      primaries.emplace_back(address, static_cast<int>(range.elements[0].integer));
    }
  }
  return primaries;
}

}  // namespace

int64_t OnlineReplicas(std::string_view info_replication) {
  bool found = false;
  int64_t online = 0;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(info_replication.data(), info_replication.size()), '\n')) {
    line = absl::StripSuffix(line, "\r");
    if (absl::StartsWith(line, "connected_slaves:")) found = true;
    // slave0:ip=127.0.0.1,port=6380,state=online,offset=...,lag=0
    if (absl::StartsWith(line, "slave") && absl::StrContains(line, "state=online")) ++online;
  }
  return found ? online : -1;
}

DurabilityAssessment AssessDurability(Router& router) {
  std::vector<PrimaryReplication> primaries;
  const bool cluster = router.topology() == Topology::kCluster;
  if (cluster) {
    for (auto& [address, slot] : ClusterPrimaries(router)) {
      primaries.push_back(ReadPrimary(router, slot, address, true));
    }
  } else {
    const std::vector<std::string> addresses = router.Primaries();
    primaries.push_back(
        ReadPrimary(router, kAnySlot, addresses.empty() ? "?" : addresses.front(), false));
  }
  return AssessReplication(router.topology(), primaries);
}

DurabilityAssessment AssessReplication(Topology topology,
                                       const std::vector<PrimaryReplication>& primaries) {
  DurabilityAssessment assessment;
  const bool fails_over = topology != Topology::kStandalone;
  bool every_primary_replicated = !primaries.empty();
  for (const PrimaryReplication& primary : primaries) {
    if (primary.online_replicas <= 0) {
      every_primary_replicated = false;
      assessment.without_replica.push_back(primary.address);
      if (fails_over) {
        assessment.warnings.push_back(absl::StrCat(
            "Redis primary ", primary.address,
            primary.online_replicas < 0 ? ": its replicas could not be read ("
                                        : " has no connected replica (",
            primary.online_replicas < 0 ? primary.error : "INFO replication",
            "): fail_closed "
            "limits are not durable by default until tollgate starts with a replica in place, and "
            "a limit with durable: true is refused (docs/redis.md#durable-limits)"));
      }
      continue;
    }
    if (primary.min_replicas_to_write == 0) {
      assessment.warnings.push_back(absl::StrCat(
          "Redis primary ", primary.address, " (", primary.online_replicas,
          " replica(s)) has min-replicas-to-write 0: it accepts writes however far its replicas "
          "lag, and a failover to a replica that lagged loses every count of a non-durable limit "
          "it had not received (Sentinel promotes a replica cut off for up to 10 x "
          "down-after-milliseconds); set min-replicas-to-write 1 and min-replicas-max-lag 10 to "
          "bound that to about 10 s of counts, or make the limit durable "
          "(docs/redis.md#what-a-failover-loses)"));
    }
    if (topology == Topology::kCluster && primary.cluster_replica_validity_factor == 0) {
      assessment.warnings.push_back(absl::StrCat(
          "Redis Cluster node ", primary.address,
          " has cluster-replica-validity-factor 0: a replica cut off from its primary for any "
          "time can be promoted, so what a failover loses of non-durable limits has no bound "
          "(docs/redis.md#what-a-failover-loses)"));
    }
    if (!primary.error.empty()) {
      assessment.warnings.push_back(
          absl::StrCat("could not read the replication settings of Redis "
                       "primary ",
                       primary.address, ": ", primary.error));
    }
  }
  assessment.durable_by_default = fails_over && every_primary_replicated;
  return assessment;
}

int64_t DurableTimeoutMicros(const std::vector<CheckItem>& items, bool durable_by_default) {
  bool durable = false;
  int64_t timeout_micros = items.empty() ? 0 : items.front().limit->timeout_micros;
  for (const CheckItem& item : items) {
    // A peek (a check of cost 0) writes nothing a replica must hold.
    const bool writes = item.cost > 0 || !IsConditional(item.op);
    durable = durable || (writes && IsDurable(*item.limit, durable_by_default));
    timeout_micros = std::min(timeout_micros, item.limit->timeout_micros);
  }
  return durable ? std::max<int64_t>(timeout_micros, 1) : 0;
}

bool ScriptReplyWrote(const RedisReply& reply) {
  const std::string& bytes = reply.str;
  if (reply.type != RedisReply::Type::kString || bytes.size() < kReplyHeadBytes ||
      (bytes.size() - kReplyHeadBytes) % kReplyBytesPerItem != 0) {
    return true;
  }
  for (size_t at = kReplyHeadBytes; at < bytes.size(); at += kReplyBytesPerItem) {
    if ((static_cast<unsigned char>(bytes[at]) & 1) != 0) return true;
  }
  return false;
}

absl::Status CheckDurableLimits(const std::vector<Limit>& limits,
                                const DurabilityAssessment& assessment) {
  if (assessment.without_replica.empty()) return absl::OkStatus();
  std::vector<std::string> names;
  for (const Limit& limit : limits) {
    if (limit.durable.value_or(false)) names.push_back(absl::StrCat("limit '", limit.name, "'"));
  }
  if (names.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      absl::StrJoin(names, ", "), names.size() == 1 ? " says" : " say",
      " durable: true (answered once a replica holds the count), but Redis primary ",
      absl::StrJoin(assessment.without_replica, ", "),
      " reported no connected replica at start: none of its admissions could be confirmed. Add a "
      "replica, or set durable: false (docs/redis.md#durable-limits)"));
}

}  // namespace tollgate::redis
