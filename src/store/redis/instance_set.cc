// Copyright tollgate authors.
#include "src/store/redis/instance_set.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/store/redis/lua_scripts.h"
#include "src/store/redis/redis_connections_impl.h"
#include "src/store/redis/resp.h"
#include "src/store/redis/router.h"
#include "src/store/redis/slot.h"

namespace tollgate::redis {
namespace {

absl::StatusOr<HeartbeatReply> ParseHeartbeat(const absl::StatusOr<RedisReply>& reply,
                                              bool demand) {
  if (!reply.ok()) return reply.status();
  const auto unexpected = [&] {
    return absl::UnavailableError(
        absl::StrCat("heartbeat: unexpected reply ", DebugString(*reply)));
  };
  const RedisReply* count = &*reply;
  if (demand) {
    if (reply->type != RedisReply::Type::kArray || reply->elements.size() < 3 ||
        reply->elements[1].type != RedisReply::Type::kInteger ||
        reply->elements[2].type != RedisReply::Type::kString) {
      return unexpected();
    }
    count = &reply->elements[0];
  }
  if (count->type != RedisReply::Type::kInteger || count->integer < 1) return unexpected();
  HeartbeatReply heartbeat;
  heartbeat.count = count->integer;
  if (!demand) return heartbeat;
  heartbeat.period = reply->elements[1].integer;
  heartbeat.created = reply->elements[2].str;
  heartbeat.has_previous = reply->elements.size() >= 5;
  for (size_t i = 3; heartbeat.has_previous && i < 5; ++i) {
    const RedisReply& table = reply->elements[i];
    if (table.type != RedisReply::Type::kArray || table.elements.size() % 2 != 0) {
      return unexpected();
    }
    DemandTotals& totals = heartbeat.previous.emplace_back();
    for (size_t field = 0; field + 1 < table.elements.size(); field += 2) {
      const std::string& name = table.elements[field].str;
      const std::string& value = table.elements[field + 1].str;
      int64_t units = 0;
      if (name == "created") {
        totals.created = value;
      } else if (absl::StartsWith(name, "l:") && absl::SimpleAtoi(value, &units)) {
        totals.units.emplace_back(name.substr(2), units);
      }
    }
  }
  return heartbeat;
}

absl::StatusOr<HeartbeatReply> PingAnswer(const absl::StatusOr<RedisReply>& reply) {
  if (!reply.ok()) return reply.status();
  if (reply->type == RedisReply::Type::kError) {
    return absl::UnavailableError(absl::StrCat("PING: ", reply->str));
  }
  return HeartbeatReply{};
}

}  // namespace

InstanceSet::InstanceSet(std::shared_ptr<RedisConnections> connections, InstanceSetOptions options)
    : connections_(std::move(connections)),
      options_(std::move(options)),
      slot_(KeySlot(options_.key)) {
  // The demand of periods p % 3 == 0, 1, 2, in the slot of the set (one script call).
  for (int i = 0; i < 3; ++i) {
    demand_keys_.push_back(absl::StrCat(options_.key, ":demand:", i, "{", SlotTag(slot_), "}"));
  }
}

InstanceSet::Send InstanceSet::Heartbeat(const Demand* demand) const {
  std::vector<std::string> command = {"EVAL", std::string(kLuaHeartbeat),
                                      demand != nullptr ? "4" : "1", options_.key};
  if (demand != nullptr) command.insert(command.end(), demand_keys_.begin(), demand_keys_.end());
  command.push_back(options_.instance_id);
  command.push_back(absl::StrCat(options_.instance_ttl_ms * 1000));
  if (demand != nullptr) {
    command.push_back(absl::StrCat(options_.demand_period_ms * 1000));
    command.push_back(absl::StrCat(demand->learned_period));
    for (const auto& [limit, units] : *demand->units) {
      command.push_back(limit);
      command.push_back(absl::StrCat(units));
    }
  }
  return Sender(FormatCommand(command), /*heartbeat=*/true, demand != nullptr);
}

InstanceSet::Send InstanceSet::Ping() const {
  return Sender(FormatCommand({"PING"}), /*heartbeat=*/false, /*demand=*/false);
}

InstanceSet::Send InstanceSet::Sender(std::string formatted_command, bool heartbeat,
                                      bool demand) const {
  return [connections = connections_, slot = slot_, command = std::move(formatted_command),
          heartbeat, demand](Reply reply) mutable {
    RouterOf(*connections)
        .Send(slot, std::move(command),
              [heartbeat, demand,
               reply = std::move(reply)](const absl::StatusOr<RedisReply>& raw) mutable {
                std::move(reply)(heartbeat ? ParseHeartbeat(raw, demand) : PingAnswer(raw));
              });
  };
}

void InstanceSet::Post(absl::AnyInvocable<void() &&> task) const {
  RouterOf(*connections_).Post(std::move(task));
}

void InstanceSet::Leave() const {
  (void)RouterOf(*connections_).Command({"ZREM", options_.key, options_.instance_id}, slot_);
}

}  // namespace tollgate::redis
