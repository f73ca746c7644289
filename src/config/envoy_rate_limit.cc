// Copyright tollgate authors. A descriptor's `rate_limit:` block (EnvoyParser::ParseRateLimit).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/config/envoy_parser.h"
#include "src/config/field_rules.h"
#include "src/config/yaml_node.h"
#include "tollgate/config.h"

namespace tollgate::config {
namespace {

constexpr absl::string_view kRateLimitKeys[] = {"unit",
                                                "requests_per_unit",
                                                "unit_multiplier",
                                                "unlimited",
                                                "name",
                                                "replaces",
                                                "algorithm",
                                                "on_store_failure",
                                                "timeout",
                                                "durable",
                                                "rlqs_on_store_failure"};
constexpr absl::string_view kReplacesKeys[] = {"name"};
constexpr absl::string_view kUnitNames[] = {"second", "minute", "hour", "day",
                                            "week",   "month",  "year"};
// A window of unit_multiplier units is at most this many seconds (ten years of 365 days).
constexpr int64_t kMaxWindowSeconds = 10 * 365 * 86'400;
constexpr absl::string_view kUnlimitedHasNone = "must not be set when unlimited is true";

// The parts of ParseRateLimit, each reading one field into `rate_limit` (ReadUnit and
// ReadRequests from the block, `node`); an error when that field is wrong, for the fields
// read after it that depend on it.
absl::Status ReadUnit(EnvoyParser& parser, const YAML::Node& node, const std::string& field,
                      EnvoyRateLimit& rate_limit) {
  const std::string unit_field = field + ".unit";
  const YAML::Node unit = node["unit"];
  if (!unit)
    return parser.Fail(node, unit_field, absl::StrCat("missing; expected ", OneOf(kUnitNames)));
  absl::StatusOr<std::string> text = parser.Scalar(unit, unit_field);
  if (!text.ok()) return text.status();
  const std::optional<EnvoyUnit> parsed = ParseEnvoyUnit(*text);
  if (!parsed.has_value()) {
    return parser.Fail(unit, unit_field,
                       absl::StrCat("expected ", OneOf(kUnitNames), ", got ", Describe(unit)));
  }
  rate_limit.unit = *parsed;
  return absl::OkStatus();
}
absl::Status ReadRequests(EnvoyParser& parser, const YAML::Node& node, const std::string& field,
                          EnvoyRateLimit& rate_limit) {
  const std::string requests_field = field + ".requests_per_unit";
  const YAML::Node requests = node["requests_per_unit"];
  if (!requests) return parser.Fail(node, requests_field, "missing; expected a whole number");
  absl::StatusOr<uint32_t> value = parser.Uint32(requests, requests_field);
  if (!value.ok()) return value.status();
  rate_limit.requests_per_unit = *value;
  return absl::OkStatus();
}
absl::Status ReadMultiplier(EnvoyParser& parser, const YAML::Node& multiplier,
                            const std::string& field, EnvoyRateLimit& rate_limit) {
  if (rate_limit.unlimited) return parser.Fail(multiplier, field, kUnlimitedHasNone);
  absl::StatusOr<uint32_t> value = parser.Uint32(multiplier, field);
  if (!value.ok()) return value.status();
  const int64_t max = kMaxWindowSeconds / EnvoyUnitSeconds(rate_limit.unit);
  if (*value < 1 || *value > max) {
    return parser.Fail(
        multiplier, field,
        absl::StrCat("expected a whole number from 1 to ", max,
                     " (a window of at most ten years), got ", Describe(multiplier)));
  }
  rate_limit.unit_multiplier = *value;
  return absl::OkStatus();
}
absl::Status ReadName(EnvoyParser& parser, const YAML::Node& name, const std::string& field,
                      EnvoyRateLimit& rate_limit) {
  absl::StatusOr<std::string> text = parser.Scalar(name, field);
  if (!text.ok()) return text.status();
  rate_limit.name = *std::move(text);
  if (rate_limit.name.empty()) return parser.Fail(name, field, "must not be empty");
  return absl::OkStatus();
}
absl::Status ReadReplaces(EnvoyParser& parser, const YAML::Node& replaces, const std::string& field,
                          bool name_known, EnvoyRateLimit& rate_limit) {
  if (!replaces.IsSequence()) {
    return parser.Fail(replaces, field,
                       absl::StrCat("expected a list of {name: ...}, got ", Describe(replaces)));
  }
  for (size_t i = 0; i < replaces.size(); ++i) {
    const std::string item_field = absl::StrCat(field, "[", i, "]");
    const YAML::Node item = replaces[i];
    if (!parser.CheckMap(item, item_field, kReplacesKeys).ok()) continue;
    const YAML::Node name = item["name"];
    if (!name) {
      parser.Report(item, item_field + ".name", "missing");
      continue;
    }
    absl::StatusOr<std::string> replaced = parser.Scalar(name, item_field + ".name");
    if (!replaced.ok()) continue;
    if (replaced->empty()) {
      parser.Report(name, item_field + ".name", "must not be empty");
    } else if (name_known && *replaced == rate_limit.name) {
      parser.Report(name, item_field + ".name", "a rule cannot replace itself");
    } else {
      rate_limit.replaces.push_back(*std::move(replaced));
    }
  }
  return absl::OkStatus();
}
absl::Status ReadAlgorithm(EnvoyParser& parser, const YAML::Node& algorithm,
                           const std::string& field, EnvoyRateLimit& rate_limit) {
  absl::StatusOr<std::string> text = parser.Scalar(algorithm, field);
  if (!text.ok()) return text.status();
  rate_limit.algorithm_given = true;
  constexpr absl::string_view kAlgorithms[] = {"fixed_window", "sliding_window", "token_bucket"};
  if (*text == "fixed_window") {
    rate_limit.algorithm = Algorithm::kFixedWindow;
  } else if (*text == "sliding_window") {
    rate_limit.algorithm = Algorithm::kSlidingWindow;
  } else if (*text == "token_bucket") {
    rate_limit.algorithm = Algorithm::kTokenBucket;
  } else {
    return parser.Fail(
        algorithm, field,
        absl::StrCat("expected ", OneOf(kAlgorithms), ", got ", Describe(algorithm)));
  }
  if (rate_limit.unlimited) return parser.Fail(algorithm, field, kUnlimitedHasNone);
  return absl::OkStatus();
}
absl::Status ReadFailureMode(EnvoyParser& parser, const YAML::Node& failure,
                             const std::string& field, EnvoyRateLimit& rate_limit) {
  // `local` needs numbers of its own, which this format has no place for.
  absl::StatusOr<std::string> text = parser.Scalar(failure, field);
  if (!text.ok()) return text.status();
  if (*text == "fail_open") {
    rate_limit.on_store_failure = FailureMode::kFailOpen;
  } else if (*text == "fail_closed") {
    rate_limit.on_store_failure = FailureMode::kFailClosed;
  } else {
    return parser.Fail(failure, field,
                       absl::StrCat("expected fail_open or fail_closed, got ", Describe(failure)));
  }
  return absl::OkStatus();
}
absl::Status ReadRlqsFailure(EnvoyParser& parser, const YAML::Node& failure,
                             const std::string& field, EnvoyRateLimit& rate_limit) {
  absl::StatusOr<std::string> text = parser.Scalar(failure, field);
  if (!text.ok()) return text.status();
  if (*text == "fail_open") {
    rate_limit.rlqs_on_store_failure = RlqsStoreFailure::kFailOpen;
  } else if (*text == "fail_closed") {
    rate_limit.rlqs_on_store_failure = RlqsStoreFailure::kFailClosed;
  } else if (*text == "expire") {
    rate_limit.rlqs_on_store_failure = RlqsStoreFailure::kExpire;
  } else {
    return parser.Fail(
        failure, field,
        absl::StrCat("expected fail_open, fail_closed or expire, got ", Describe(failure)));
  }
  return absl::OkStatus();
}
absl::Status ReadTimeout(EnvoyParser& parser, const YAML::Node& timeout, const std::string& field,
                         EnvoyRateLimit& rate_limit) {
  absl::StatusOr<std::string> text = parser.Scalar(timeout, field);
  if (!text.ok()) return text.status();
  absl::StatusOr<int64_t> micros = ParseDurationMicros(*text);
  if (!micros.ok() || *micros < kTimeoutRange.min_micros || *micros > kTimeoutRange.max_micros) {
    return parser.Fail(timeout, field,
                       absl::StrCat("expected a duration ", kTimeoutRange.text,
                                    " such as 10ms, got ", Describe(timeout)));
  }
  rate_limit.timeout_micros = *micros;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<EnvoyRateLimit> EnvoyParser::ParseRateLimit(const YAML::Node& node,
                                                           const std::string& field) {
  if (absl::Status map = CheckMap(node, field, kRateLimitKeys); !map.ok()) return map;
  EnvoyRateLimit rate_limit;
  // Whether `unlimited` (and then `unit`) was read; checks that depend on one are skipped
  // when it is wrong, since its error is already recorded.
  bool unlimited_known = true;
  if (YAML::Node unlimited = node["unlimited"]) {
    absl::StatusOr<bool> value = Bool(unlimited, absl::StrCat(field, ".unlimited"));
    unlimited_known = value.ok();
    if (value.ok()) rate_limit.unlimited = *value;
  }
  bool unit_known = unlimited_known;
  if (unlimited_known && rate_limit.unlimited) {
    // As envoyproxy/ratelimit: an unlimited rule has no numbers.
    if (YAML::Node unit = node["unit"]) Report(unit, field + ".unit", kUnlimitedHasNone);
    if (YAML::Node requests = node["requests_per_unit"]) {
      Report(requests, field + ".requests_per_unit", kUnlimitedHasNone);
    }
  } else if (unlimited_known) {
    unit_known = ReadUnit(*this, node, field, rate_limit).ok();
    ReadRequests(*this, node, field, rate_limit).IgnoreError();
  }
  if (YAML::Node multiplier = node["unit_multiplier"]; multiplier && unit_known) {
    ReadMultiplier(*this, multiplier, field + ".unit_multiplier", rate_limit).IgnoreError();
  }
  bool name_known = true;
  if (YAML::Node name = node["name"])
    name_known = ReadName(*this, name, field + ".name", rate_limit).ok();
  if (YAML::Node replaces = node["replaces"]) {
    ReadReplaces(*this, replaces, field + ".replaces", name_known, rate_limit).IgnoreError();
  }
  if (YAML::Node algorithm = node["algorithm"]) {
    ReadAlgorithm(*this, algorithm, field + ".algorithm", rate_limit).IgnoreError();
  }
  if (YAML::Node failure = node["on_store_failure"]) {
    ReadFailureMode(*this, failure, field + ".on_store_failure", rate_limit).IgnoreError();
  }
  if (YAML::Node timeout = node["timeout"]) {
    ReadTimeout(*this, timeout, field + ".timeout", rate_limit).IgnoreError();
  }
  if (YAML::Node durable = node["durable"]) {
    absl::StatusOr<bool> value = Bool(durable, field + ".durable");
    if (value.ok()) rate_limit.durable = *value;
  }
  if (YAML::Node failure = node["rlqs_on_store_failure"]) {
    ReadRlqsFailure(*this, failure, field + ".rlqs_on_store_failure", rate_limit).IgnoreError();
  }
  return rate_limit;
}

}  // namespace tollgate::config
