// Copyright tollgate authors.
#include "src/server/metered_json.h"

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "src/server/check_json.h"
#include "src/server/json_errors.h"
#include "tollgate/limiter.h"

namespace tollgate::server {
namespace {

using nlohmann::json;

// The body as an object whose members are all among `fields`.
absl::StatusOr<json> ObjectOf(std::string_view body, std::initializer_list<const char*> fields) {
  absl::StatusOr<json> document = ParseJsonBody(body, kMaxJsonDepth);
  if (!document.ok()) return document.status();
  if (!document->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("body: expected a JSON object, got ", ShowForMessage(*document)));
  }
  for (const auto& [field, value] : document->items()) {
    bool known = false;
    for (const char* name : fields) known |= field == name;
    if (!known) {
      std::vector<std::string> quoted;
      for (const char* name : fields) quoted.push_back(absl::StrCat("\"", name, "\""));
      return absl::InvalidArgumentError(absl::StrCat(ShowForMessage(json(field)),
                                                     ": unknown field (expected ",
                                                     absl::StrJoin(quoted, ", "), ")"));
    }
  }
  return document;
}

// The non-empty string member `name`, at most `max_bytes` long.
absl::StatusOr<std::string> StringField(const json& object, const char* name,
                                        size_t max_bytes = std::numeric_limits<size_t>::max()) {
  auto it = object.find(name);
  if (it == object.end()) return absl::InvalidArgumentError(absl::StrCat(name, ": missing"));
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected a string, got ", ShowForMessage(*it)));
  }
  std::string value = it->get<std::string>();
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(name, ": must not be empty"));
  if (value.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": longer than ", max_bytes, " bytes (", value.size(), " bytes)"));
  }
  return value;
}

}  // namespace

absl::StatusOr<ParsedCheckBody> ParseAcquireBody(std::string_view body) {
  absl::StatusOr<json> object = ObjectOf(body, {"limit", "key"});
  if (!object.ok()) return object.status();
  ParsedCheck request;
  absl::StatusOr<std::string> limit = StringField(*object, "limit");
  if (!limit.ok()) return limit.status();
  absl::StatusOr<std::string> key = StringField(*object, "key", kMaxKeyBytes);
  if (!key.ok()) return key.status();
  request.limit = *std::move(limit);
  request.key = *std::move(key);
  request.cost = 1;
  ParsedCheckBody parsed;
  parsed.requests.push_back(std::move(request));
  return parsed;
}

absl::StatusOr<SettleBody> ParseSettleBody(std::string_view body) {
  absl::StatusOr<json> object = ObjectOf(body, {"reservation", "cost"});
  if (!object.ok()) return object.status();
  SettleBody settle;
  absl::StatusOr<std::string> reservation = StringField(*object, "reservation");
  if (!reservation.ok()) return reservation.status();
  settle.reservation = *std::move(reservation);
  auto cost = object->find("cost");
  if (cost == object->end()) return absl::InvalidArgumentError("cost: missing");
  if (cost->is_number_unsigned() && cost->get<uint64_t>() <= uint64_t{INT64_MAX}) {
    settle.cost = static_cast<int64_t>(cost->get<uint64_t>());
  } else if (cost->is_number_integer() && !cost->is_number_unsigned() &&
             cost->get<int64_t>() >= 0) {
    settle.cost = cost->get<int64_t>();
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("cost: expected an integer >= 0, got ", ShowForMessage(*cost)));
  }
  return settle;
}

absl::StatusOr<LeaseBody> ParseLeaseBody(std::string_view body) {
  absl::StatusOr<json> object = ObjectOf(body, {"limit", "key", "lease"});
  if (!object.ok()) return object.status();
  LeaseBody lease;
  for (auto [name, out, max] : {std::tuple{"limit", &lease.limit, std::string::npos},
                                std::tuple{"key", &lease.key, kMaxKeyBytes},
                                std::tuple{"lease", &lease.lease, std::string::npos}}) {
    absl::StatusOr<std::string> value = StringField(*object, name, max);
    if (!value.ok()) return value.status();
    *out = *std::move(value);
  }
  return lease;
}

}  // namespace tollgate::server
