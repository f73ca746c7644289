// Copyright tollgate authors.
#include "src/server/check_json.h"

#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/server/json_errors.h"
#include "src/server/ratelimit_headers.h"

namespace tollgate::server {
namespace {

using nlohmann::json;

// A short rendering of a client's value for an error message, without raw bytes of it.
std::string Shown(const json& value) { return ShowForMessage(value); }

absl::Status FieldError(absl::string_view prefix, absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(prefix, field, ": ", what));
}

// Parses one {"limit", "key", "cost"} object. `prefix` is "" or "checks[i].".
absl::StatusOr<CheckRequest> ParseOneCheck(const json& object, absl::string_view prefix) {
  if (!object.is_object()) {
    std::string where = prefix.empty() ? "body" : std::string(prefix.substr(0, prefix.size() - 1));
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": expected an object with \"limit\" and \"key\", got ", Shown(object)));
  }
  for (const auto& [field, value] : object.items()) {
    if (field != "limit" && field != "key" && field != "cost") {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, Shown(json(field)), ": unknown field (expected \"limit\", \"key\", \"cost\")"));
    }
  }
  CheckRequest request;
  auto limit = object.find("limit");
  if (limit == object.end()) return FieldError(prefix, "limit", "missing");
  if (!limit->is_string()) {
    return FieldError(prefix, "limit", absl::StrCat("expected a string, got ", Shown(*limit)));
  }
  request.limit = limit->get<std::string>();
  if (request.limit.empty()) return FieldError(prefix, "limit", "must not be empty");

  auto key = object.find("key");
  if (key == object.end()) return FieldError(prefix, "key", "missing");
  if (!key->is_string()) {
    return FieldError(prefix, "key", absl::StrCat("expected a string, got ", Shown(*key)));
  }
  request.key = key->get<std::string>();
  if (request.key.empty()) return FieldError(prefix, "key", "must not be empty");
  if (request.key.size() > kMaxKeyBytes) {
    return FieldError(
        prefix, "key",
        absl::StrCat("longer than ", kMaxKeyBytes, " bytes (", request.key.size(), " bytes)"));
  }

  auto cost = object.find("cost");
  if (cost != object.end()) {
    std::string expected = absl::StrCat("expected an integer >= 0, got ", Shown(*cost));
    if (cost->is_number_unsigned()) {
      uint64_t value = cost->get<uint64_t>();
      if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return FieldError(prefix, "cost", "too large");
      }
      request.cost = static_cast<int64_t>(value);
    } else if (cost->is_number_integer()) {
      request.cost = cost->get<int64_t>();
      if (request.cost < 0) return FieldError(prefix, "cost", expected);
    } else {
      return FieldError(prefix, "cost", expected);
    }
  }
  return request;
}

// Rank of a refusal for MostRestrictive: larger is more restrictive.
int64_t RefusalRank(const Decision& decision) {
  if (decision.reason == DenyReason::kCostExceedsLimit) return std::numeric_limits<int64_t>::max();
  return decision.retry_after_micros;
}

}  // namespace

absl::StatusOr<ParsedCheckBody> ParseCheckBody(std::string_view body, size_t max_checks) {
  // Parse errors become a status here, at the edge, with messages that quote no input.
  absl::StatusOr<json> parsed_document = ParseJsonBody(body, kMaxJsonDepth);
  if (!parsed_document.ok()) return parsed_document.status();
  const json& document = *parsed_document;
  if (!document.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("body: expected a JSON object, got ", Shown(document)));
  }

  ParsedCheckBody parsed;
  auto checks = document.find("checks");
  if (checks == document.end()) {
    absl::StatusOr<CheckRequest> one = ParseOneCheck(document, "");
    if (!one.ok()) return one.status();
    parsed.requests.push_back(*std::move(one));
    return parsed;
  }

  parsed.batch = true;
  if (document.size() != 1) {
    return absl::InvalidArgumentError(
        "body: give either \"checks\" or \"limit\"/\"key\"/\"cost\", not both");
  }
  if (!checks->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checks: expected an array, got ", Shown(*checks)));
  }
  if (checks->empty()) return absl::InvalidArgumentError("checks: must not be empty");
  if (checks->size() > max_checks) {
    return absl::InvalidArgumentError(
        absl::StrCat("checks: at most ", max_checks, " items, got ", checks->size()));
  }
  parsed.requests.reserve(checks->size());
  for (size_t i = 0; i < checks->size(); ++i) {
    absl::StatusOr<CheckRequest> one =
        ParseOneCheck((*checks)[i], absl::StrCat("checks[", i, "]."));
    if (!one.ok()) return one.status();
    parsed.requests.push_back(*std::move(one));
  }
  return parsed;
}

size_t MostRestrictive(bool allowed, absl::Span<const Decision> decisions) {
  size_t best = 0;
  bool found = false;
  for (size_t i = 0; i < decisions.size(); ++i) {
    const Decision& d = decisions[i];
    if (allowed) {
      if (!found || d.remaining < decisions[best].remaining) best = i;
      found = true;
    } else if (!d.allowed) {
      if (!found || RefusalRank(d) > RefusalRank(decisions[best])) best = i;
      found = true;
    }
  }
  return best;
}

nlohmann::json DecisionJson(absl::string_view name, const Decision& decision) {
  json reply = {
      {"allowed", decision.allowed},
      {"name", std::string(name)},
      {"limit", decision.limit},
      {"remaining", decision.remaining < 0 ? 0 : decision.remaining},
      {"reset_after_ms", CeilMillis(decision.reset_after_micros)},
      {"retry_after_ms", CeilMillis(decision.retry_after_micros)},
      {"source", std::string(DecisionSourceName(decision.source))},
  };
  if (!decision.allowed) reply["reason"] = std::string(DenyReasonName(decision.reason));
  return reply;
}

nlohmann::json CheckReplyJson(const ParsedCheckBody& body, const MultiDecision& result) {
  if (!body.batch) return DecisionJson(body.requests[0].limit, result.decisions[0]);
  size_t top = MostRestrictive(result.allowed, result.decisions);
  json reply = DecisionJson(body.requests[top].limit, result.decisions[top]);
  reply["allowed"] = result.allowed;
  if (result.allowed) reply.erase("reason");
  json results = json::array();
  for (size_t i = 0; i < result.decisions.size(); ++i) {
    results.push_back(DecisionJson(body.requests[i].limit, result.decisions[i]));
  }
  reply["results"] = std::move(results);
  return reply;
}

std::string DumpJson(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ErrorBody(absl::string_view message) {
  return DumpJson(json{{"error", std::string(message)}});
}

}  // namespace tollgate::server
