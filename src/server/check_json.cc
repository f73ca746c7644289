// Copyright tollgate authors.
#include "src/server/check_json.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "src/core/absl_view.h"
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
absl::StatusOr<ParsedCheck> ParseOneCheck(const json& object, absl::string_view prefix) {
  if (!object.is_object()) {
    std::string where = prefix.empty() ? "body" : std::string(prefix.substr(0, prefix.size() - 1));
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": expected an object with \"limit\" and \"key\", got ", Shown(object)));
  }
  for (const auto& [field, value] : object.items()) {
    if (field != "limit" && field != "key" && field != "cost" && field != "reserve") {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, Shown(json(field)),
                       ": unknown field (expected \"limit\", \"key\", \"cost\", \"reserve\")"));
    }
  }
  ParsedCheck request;
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
    auto expected = [&] { return absl::StrCat("expected an integer >= 0, got ", Shown(*cost)); };
    if (cost->is_number_unsigned()) {
      uint64_t value = cost->get<uint64_t>();
      if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return FieldError(prefix, "cost", "too large");
      }
      request.cost = static_cast<int64_t>(value);
    } else if (cost->is_number_integer()) {
      request.cost = cost->get<int64_t>();
      if (request.cost < 0) return FieldError(prefix, "cost", expected());
    } else {
      return FieldError(prefix, "cost", expected());
    }
  }

  if (auto reserve = object.find("reserve"); reserve != object.end()) {
    if (!reserve->is_boolean()) {
      return FieldError(prefix, "reserve",
                        absl::StrCat("expected true or false, got ", Shown(*reserve)));
    }
    request.reserve = reserve->get<bool>();
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
    absl::StatusOr<ParsedCheck> one = ParseOneCheck(document, "");
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
    absl::StatusOr<ParsedCheck> one = ParseOneCheck((*checks)[i], absl::StrCat("checks[", i, "]."));
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

namespace {

// `text` as a JSON string. Limit names are [A-Za-z0-9_.-] (src/config/names.h); anything
// else goes through the JSON library's escaping.
void AppendJsonString(std::string& out, absl::string_view text) {
  for (char c : text) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-' &&
        c != ':') {
      out += DumpJson(json(std::string(text)));
      return;
    }
  }
  out += '"';
  out.append(text.data(), text.size());
  out += '"';
}

// The members in the order the JSON library wrote them (by name), so replies read the same.
// `extras`: the members a metered reply adds, "" for none.
void AppendDecision(std::string& out, absl::string_view name, const Decision& decision,
                    bool allowed, const DecisionExtras& extras = {}) {
  out += allowed ? "\"allowed\":true" : "\"allowed\":false";
  if (decision.debt > 0) absl::StrAppend(&out, ",\"debt\":", decision.debt);
  if (!extras.lease.empty()) {
    absl::StrAppend(&out, ",\"expires_in_ms\":", extras.expires_in_ms, ",\"lease\":");
    AppendJsonString(out, extras.lease);
  }
  absl::StrAppend(&out, ",\"limit\":", decision.limit, ",\"name\":");
  AppendJsonString(out, name);
  if (!allowed) {
    absl::StrAppend(&out, ",\"reason\":\"", AbslView(DenyReasonName(decision.reason)), "\"");
  }
  if (extras.released.has_value()) {
    out += *extras.released ? ",\"released\":true" : ",\"released\":false";
  }
  absl::StrAppend(&out, ",\"remaining\":", std::max<int64_t>(decision.remaining, 0));
  if (!extras.reservation.empty()) {
    out += ",\"reservation\":";
    AppendJsonString(out, extras.reservation);
  }
  absl::StrAppend(&out, ",\"reset_after_ms\":", CeilMillis(decision.reset_after_micros),
                  ",\"retry_after_ms\":", CeilMillis(decision.retry_after_micros), ",\"source\":\"",
                  AbslView(DecisionSourceName(decision.source)), "\"");
}

}  // namespace

std::string DecisionJson(absl::string_view name, const Decision& decision,
                         const DecisionExtras& extras) {
  std::string out;
  // Room for the usual answer (its fields and numbers, the limit's name), so that it is not
  // grown piece by piece.
  out.reserve(144 + name.size() + extras.lease.size() + extras.reservation.size());
  out += '{';
  AppendDecision(out, name, decision, decision.allowed, extras);
  out += '}';
  return out;
}

DecisionExtras ExtrasOf(const MultiDecision& result, absl::Span<const Limit* const> limits,
                        size_t i) {
  DecisionExtras out;
  if (i >= result.tokens.size() || i >= limits.size() || result.tokens[i].empty()) return out;
  if (limits[i]->numbers.algorithm == Algorithm::kConcurrency) {
    out.lease = result.tokens[i];
    out.expires_in_ms = CeilMillis(limits[i]->numbers.window_micros);
  } else {
    out.reservation = result.tokens[i];
  }
  return out;
}

std::string CheckReplyBody(const ParsedCheckBody& body, const MultiDecision& result,
                           absl::Span<const Limit* const> limits) {
  auto extras = [&](size_t i) { return ExtrasOf(result, limits, i); };
  if (!body.batch) return DecisionJson(body.requests[0].limit, result.decisions[0], extras(0));
  const size_t top = MostRestrictive(result.allowed, result.decisions);
  std::string out = "{";
  AppendDecision(out, body.requests[top].limit, result.decisions[top], result.allowed);
  out += ",\"results\":[";
  for (size_t i = 0; i < result.decisions.size(); ++i) {
    if (i != 0) out += ',';
    out += DecisionJson(body.requests[i].limit, result.decisions[i], extras(i));
  }
  out += "]}";
  return out;
}

std::string DumpJson(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ErrorBody(absl::string_view message) {
  return DumpJson(json{{"error", std::string(message)}});
}

}  // namespace tollgate::server
