// Copyright tollgate authors. envoyproxy/ratelimit's YAML format -> EnvoyDomainConfig.
//
// yaml-cpp reports errors by throwing; every exception is caught here and turned into
// InvalidArgument naming the file, line, column and field. Nothing throws past this file.
#include "src/config/envoy_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/config/config_file.h"
#include "src/config/envoy_config_tree.h"
#include "src/config/names.h"
#include "src/config/problems.h"
#include "src/config/yaml_node.h"
#include "src/core/absl_view.h"
#include "tollgate/config.h"

namespace tollgate {
namespace {

constexpr int64_t kMinTimeoutMicros = 1'000;
constexpr int64_t kMaxTimeoutMicros = 60'000'000;

// `name` is accepted and not used, as by envoyproxy/ratelimit: Envoy Gateway writes the
// RateLimitConfig message's name beside its domain.
constexpr absl::string_view kRootKeys[] = {"domain", "descriptors", "name"};
// The keys that say a file is in Envoy's format.
constexpr absl::string_view kFormatKeys[] = {"domain", "descriptors"};
constexpr absl::string_view kDescriptorKeys[] = {
    "key",        "value",           "rate_limit",      "descriptors",     "shadow_mode",
    "quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata"};
constexpr absl::string_view kRateLimitKeys[] = {
    "unit",     "requests_per_unit", "unit_multiplier",  "unlimited", "name",
    "replaces", "algorithm",         "on_store_failure", "timeout",   "rlqs_on_store_failure"};
// A window of unit_multiplier units is at most this many seconds (ten years of 365 days).
constexpr int64_t kMaxWindowSeconds = 10 * 365 * 86'400;
constexpr absl::string_view kReplacesKeys[] = {"name"};

struct UnitInfo {
  EnvoyUnit unit;
  absl::string_view name;
  int64_t seconds;
};
constexpr UnitInfo kUnits[] = {
    {EnvoyUnit::kSecond, "second", 1},        {EnvoyUnit::kMinute, "minute", 60},
    {EnvoyUnit::kHour, "hour", 3'600},        {EnvoyUnit::kDay, "day", 86'400},
    {EnvoyUnit::kWeek, "week", 7 * 86'400},   {EnvoyUnit::kMonth, "month", 30 * 86'400},
    {EnvoyUnit::kYear, "year", 365 * 86'400},
};

// Thrown inside this file only, caught in ParseEnvoyConfig: a mark and a message.
struct ConfigError {
  YAML::Mark mark;
  std::string message;
};

[[noreturn]] void Fail(const YAML::Node& node, absl::string_view field, absl::string_view what) {
  throw ConfigError{node.Mark(), absl::StrCat(field, ": ", what)};
}

// The errors of one file (or one tree built in memory). A check Fail()s; the part of the
// file it belongs to is abandoned (Try catches the error and records it) and the parse goes
// on with the next independent part, so that one run reports every error of the file.
// Without `positions` (a tree built in memory has none) errors name the field only.
class Errors {
 public:
  Errors(absl::string_view file_name, bool positions)
      : problems_(file_name), positions_(positions) {}

  // Runs `check`; returns false when it Fail()ed, recording the error.
  template <typename Check>
  bool Try(Check&& check) {
    try {
      check();
      return true;
    } catch (ConfigError& error) {
      Add(error);
      return false;
    }
  }

  void Add(const ConfigError& error) {
    problems_.Add(positions_ ? error.mark : YAML::Mark::null_mark(), "", error.message)
        .IgnoreError();
  }
  size_t size() const { return problems_.size(); }
  absl::Status ToStatus() const { return problems_.ToStatus(); }
  bool positions() const { return positions_; }

 private:
  config::Problems problems_;
  const bool positions_;
};

std::string Describe(const YAML::Node& node) { return config::DescribeNode(node); }

std::string OneOf(absl::Span<const absl::string_view> names) {
  return absl::StrCat("one of ", absl::StrJoin(names, ", "));
}

// Checks that `node` is a map (else Fail()s) whose keys are all in `allowed` and unique;
// each key that is not is an error of its own (recorded, with the closest allowed key as a
// suggestion), and the map's other keys are still read.
void CheckMap(const YAML::Node& node, absl::string_view field,
              absl::Span<const absl::string_view> allowed, Errors& errors) {
  if (!node.IsMap()) Fail(node, field, absl::StrCat("expected a map, got ", Describe(node)));
  absl::flat_hash_set<std::string> seen;
  for (const auto& pair : node) {
    errors.Try([&] {
      const YAML::Node& key = pair.first;
      if (!key.IsScalar()) Fail(key, field, "expected keys to be plain names");
      const std::string& name = key.Scalar();
      if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
        std::string message = absl::StrCat("unknown key '", name, "', expected ", OneOf(allowed));
        if (absl::string_view suggestion = config_internal::ClosestName(name, allowed);
            !suggestion.empty()) {
          absl::StrAppend(&message, " (did you mean '", suggestion, "'?)");
        }
        Fail(key, field, message);
      }
      if (!seen.insert(name).second) Fail(key, field, absl::StrCat("duplicate key '", name, "'"));
    });
  }
}

std::string Scalar(const YAML::Node& node, absl::string_view field) {
  if (!node.IsScalar()) Fail(node, field, absl::StrCat("expected a string, got ", Describe(node)));
  return node.Scalar();
}

bool Bool(const YAML::Node& node, absl::string_view field) {
  bool value = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
    Fail(node, field, absl::StrCat("expected true or false, got ", Describe(node)));
  }
  return value;
}

uint32_t Uint32(const YAML::Node& node, absl::string_view field) {
  const std::string text = node.IsScalar() ? node.Scalar() : std::string();
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, error] = std::from_chars(text.data(), end, value);
  if (!node.IsScalar() || text.empty() || error != std::errc() || ptr != end ||
      value > UINT32_MAX) {
    Fail(node, field,
         absl::StrCat("expected a whole number from 0 to ", UINT32_MAX, ", got ", Describe(node)));
  }
  return static_cast<uint32_t>(value);
}

// Reads a `rate_limit:` block; each of its errors is recorded in `errors` and the other
// fields are still read (Fail()s only when it is not a map).
EnvoyRateLimit ParseRateLimit(const YAML::Node& node, const std::string& field, Errors& errors) {
  CheckMap(node, field, kRateLimitKeys, errors);
  EnvoyRateLimit rate_limit;
  // Whether `unlimited` (and then `unit`) was read; checks that depend on one are skipped
  // when it is wrong, since its error is already recorded.
  bool unlimited_known = true;
  if (YAML::Node unlimited = node["unlimited"]) {
    unlimited_known = errors.Try(
        [&] { rate_limit.unlimited = Bool(unlimited, absl::StrCat(field, ".unlimited")); });
  }
  const YAML::Node unit = node["unit"];
  const YAML::Node requests = node["requests_per_unit"];
  bool unit_known = unlimited_known;
  if (!unlimited_known) {
    // Whether numbers belong here is unknown.
  } else if (rate_limit.unlimited) {
    // As envoyproxy/ratelimit: an unlimited rule has no numbers.
    errors.Try([&] {
      if (unit) Fail(unit, field + ".unit", "must not be set when unlimited is true");
    });
    errors.Try([&] {
      if (requests) {
        Fail(requests, field + ".requests_per_unit", "must not be set when unlimited is true");
      }
    });
  } else {
    unit_known = errors.Try([&] {
      constexpr absl::string_view kUnitNames[] = {"second", "minute", "hour", "day",
                                                  "week",   "month",  "year"};
      if (!unit) Fail(node, field + ".unit", absl::StrCat("missing; expected ", OneOf(kUnitNames)));
      std::optional<EnvoyUnit> parsed = ParseEnvoyUnit(Scalar(unit, field + ".unit"));
      if (!parsed.has_value()) {
        Fail(unit, field + ".unit",
             absl::StrCat("expected ", OneOf(kUnitNames), ", got ", Describe(unit)));
      }
      rate_limit.unit = *parsed;
    });
    errors.Try([&] {
      if (!requests) Fail(node, field + ".requests_per_unit", "missing; expected a whole number");
      rate_limit.requests_per_unit = Uint32(requests, field + ".requests_per_unit");
    });
  }
  if (YAML::Node multiplier = node["unit_multiplier"]; multiplier && unit_known) {
    errors.Try([&] {
      const std::string multiplier_field = field + ".unit_multiplier";
      if (rate_limit.unlimited) {
        Fail(multiplier, multiplier_field, "must not be set when unlimited is true");
      }
      const uint32_t value = Uint32(multiplier, multiplier_field);
      const int64_t max = kMaxWindowSeconds / EnvoyUnitSeconds(rate_limit.unit);
      if (value < 1 || value > max) {
        Fail(multiplier, multiplier_field,
             absl::StrCat("expected a whole number from 1 to ", max,
                          " (a window of at most ten years), got ", Describe(multiplier)));
      }
      rate_limit.unit_multiplier = value;
    });
  }
  bool name_known = true;
  if (YAML::Node name = node["name"]) {
    name_known = errors.Try([&] {
      rate_limit.name = Scalar(name, field + ".name");
      if (rate_limit.name.empty()) Fail(name, field + ".name", "must not be empty");
    });
  }
  if (YAML::Node replaces = node["replaces"]) {
    const std::string replaces_field = field + ".replaces";
    errors.Try([&] {
      if (!replaces.IsSequence()) {
        Fail(replaces, replaces_field,
             absl::StrCat("expected a list of {name: ...}, got ", Describe(replaces)));
      }
      for (size_t i = 0; i < replaces.size(); ++i) {
        errors.Try([&] {
          const std::string item_field = absl::StrCat(replaces_field, "[", i, "]");
          const YAML::Node item = replaces[i];
          CheckMap(item, item_field, kReplacesKeys, errors);
          const YAML::Node name = item["name"];
          if (!name) Fail(item, item_field + ".name", "missing");
          std::string replaced = Scalar(name, item_field + ".name");
          if (replaced.empty()) Fail(name, item_field + ".name", "must not be empty");
          if (name_known && replaced == rate_limit.name) {
            Fail(name, item_field + ".name", "a rule cannot replace itself");
          }
          rate_limit.replaces.push_back(std::move(replaced));
        });
      }
    });
  }
  if (YAML::Node algorithm = node["algorithm"]) {
    errors.Try([&] {
      const std::string text = Scalar(algorithm, field + ".algorithm");
      rate_limit.algorithm_given = true;
      constexpr absl::string_view kAlgorithms[] = {"fixed_window", "sliding_window",
                                                   "token_bucket"};
      if (text == "fixed_window") {
        rate_limit.algorithm = Algorithm::kFixedWindow;
      } else if (text == "sliding_window") {
        rate_limit.algorithm = Algorithm::kSlidingWindow;
      } else if (text == "token_bucket") {
        rate_limit.algorithm = Algorithm::kTokenBucket;
      } else {
        Fail(algorithm, field + ".algorithm",
             absl::StrCat("expected ", OneOf(kAlgorithms), ", got ", Describe(algorithm)));
      }
      if (rate_limit.unlimited) {
        Fail(algorithm, field + ".algorithm", "must not be set when unlimited is true");
      }
    });
  }
  if (YAML::Node failure = node["on_store_failure"]) {
    errors.Try([&] {
      // `local` needs numbers of its own, which this format has no place for.
      const std::string text = Scalar(failure, field + ".on_store_failure");
      if (text == "fail_open") {
        rate_limit.on_store_failure = FailureMode::kFailOpen;
      } else if (text == "fail_closed") {
        rate_limit.on_store_failure = FailureMode::kFailClosed;
      } else {
        Fail(failure, field + ".on_store_failure",
             absl::StrCat("expected fail_open or fail_closed, got ", Describe(failure)));
      }
    });
  }
  if (YAML::Node failure = node["rlqs_on_store_failure"]) {
    errors.Try([&] {
      const std::string text = Scalar(failure, field + ".rlqs_on_store_failure");
      if (text == "fail_open") {
        rate_limit.rlqs_on_store_failure = RlqsStoreFailure::kFailOpen;
      } else if (text == "fail_closed") {
        rate_limit.rlqs_on_store_failure = RlqsStoreFailure::kFailClosed;
      } else if (text == "expire") {
        rate_limit.rlqs_on_store_failure = RlqsStoreFailure::kExpire;
      } else {
        Fail(failure, field + ".rlqs_on_store_failure",
             absl::StrCat("expected fail_open, fail_closed or expire, got ", Describe(failure)));
      }
    });
  }
  if (YAML::Node timeout = node["timeout"]) {
    errors.Try([&] {
      absl::StatusOr<int64_t> micros = ParseDurationMicros(Scalar(timeout, field + ".timeout"));
      if (!micros.ok() || *micros < kMinTimeoutMicros || *micros > kMaxTimeoutMicros) {
        Fail(timeout, field + ".timeout",
             absl::StrCat("expected a duration from 1ms to 60s such as 10ms, got ",
                          Describe(timeout)));
      }
      rate_limit.timeout_micros = *micros;
    });
  }
  return rate_limit;
}

// Appends `text` as a JSON string.
void AppendJsonString(absl::string_view text, std::string& out) {
  out.push_back('"');
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppend(&out, "\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

// Whether a plain scalar reads as a number in YAML (decimal, with an optional fraction and
// exponent), as envoyproxy/ratelimit's YAML decoder types it.
bool IsYamlNumber(absl::string_view text) {
  size_t i = 0;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
  size_t digits = 0;
  while (i < text.size() && absl::ascii_isdigit(text[i])) ++i, ++digits;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && absl::ascii_isdigit(text[i])) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
    size_t exponent = 0;
    while (i < text.size() && absl::ascii_isdigit(text[i])) ++i, ++exponent;
    if (exponent == 0) return false;
  }
  return i == text.size();
}

// `node` as JSON: maps as objects, sequences as arrays; a plain scalar as null, a boolean
// (true/false, yes/no, on/off in any case, as YAML 1.1) or a number when it reads as one,
// else (and always when quoted) a string.
void AppendYamlAsJson(const YAML::Node& node, std::string& out) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      out.push_back('{');
      bool first = true;
      for (const auto& entry : node) {
        if (!first) out.push_back(',');
        first = false;
        AppendJsonString(entry.first.IsScalar() ? entry.first.Scalar() : "", out);
        out.push_back(':');
        AppendYamlAsJson(entry.second, out);
      }
      out.push_back('}');
      return;
    }
    case YAML::NodeType::Sequence: {
      out.push_back('[');
      for (size_t i = 0; i < node.size(); ++i) {
        if (i > 0) out.push_back(',');
        AppendYamlAsJson(node[i], out);
      }
      out.push_back(']');
      return;
    }
    case YAML::NodeType::Scalar: {
      const std::string& text = node.Scalar();
      if (node.Tag() != "!") {  // plain, not quoted
        const std::string lower = absl::AsciiStrToLower(text);
        if (lower == "null" || lower == "~" || lower.empty()) {
          out += "null";
          return;
        }
        if (lower == "true" || lower == "yes" || lower == "on") {
          out += "true";
          return;
        }
        if (lower == "false" || lower == "no" || lower == "off") {
          out += "false";
          return;
        }
        if (IsYamlNumber(text)) {
          // JSON has no leading '+' nor a bare '.5' or '5.': print the double.
          double value = 0;
          if (absl::SimpleAtod(text, &value) && std::isfinite(value)) {
            absl::StrAppend(&out, value);
            return;
          }
        }
      }
      AppendJsonString(text, out);
      return;
    }
    default:
      out += "null";
  }
}

// A byte that `text` does not hold.
char AbsentByte(absl::string_view text) {
  bool present[256] = {};
  for (unsigned char c : text) present[c] = true;
  for (int c = 1; c < 256; ++c) {
    if (!present[c]) return static_cast<char>(c);
  }
  return '\0';
}

// Whether every value `later` matches is matched by `earlier` too (both wildcards). True
// exactly when `earlier` matches `later` with each of its '*'s replaced by a byte `earlier`
// lacks: that byte can only be taken by a '*' of `earlier`, so any run in its place is too.
bool Covers(const std::string& earlier, const std::string& later) {
  std::string probe = later;
  const char absent = AbsentByte(earlier);
  for (char& c : probe) {
    if (c == '*') c = absent;
  }
  return WildcardMatches(SplitWildcard(earlier), probe);
}

// Reads a `descriptors:` list (Fail()s when it is not a list). Each entry's errors are
// recorded in `errors` and the other entries, and the entry's other fields, are still read.
std::vector<EnvoyDescriptor> ParseDescriptors(const YAML::Node& node, const std::string& field,
                                              Errors& errors) {
  if (node.IsNull()) return {};
  if (!node.IsSequence()) {
    Fail(node, field, absl::StrCat("expected a list of descriptors, got ", Describe(node)));
  }
  std::vector<EnvoyDescriptor> descriptors;
  // Where each of `descriptors` was written ("line 3", or its field without positions).
  std::vector<std::string> written_at;
  // As envoyproxy/ratelimit: within one list, a (key, value) pair appears once.
  absl::flat_hash_set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string item_field = absl::StrCat(field, "[", i, "]");
    const YAML::Node item = node[i];
    if (!errors.Try([&] { CheckMap(item, item_field, kDescriptorKeys, errors); })) continue;
    EnvoyDescriptor descriptor;
    if (errors.positions()) descriptor.line = item.Mark().line + 1;
    const bool key_known = errors.Try([&] {
      const YAML::Node key = item["key"];
      if (!key) Fail(item, item_field + ".key", "missing");
      descriptor.key = Scalar(key, item_field + ".key");
      if (descriptor.key.empty()) Fail(key, item_field + ".key", "must not be empty");
    });
    const bool value_known = errors.Try([&] {
      if (YAML::Node value = item["value"]) {
        descriptor.value = Scalar(value, item_field + ".value");
      }
    });
    if (key_known && value_known) {
      errors.Try([&] {
        if (!seen.emplace(descriptor.key, descriptor.value).second) {
          Fail(item, item_field,
               absl::StrCat(
                   "duplicate descriptor key '", descriptor.key, "'",
                   descriptor.value.empty() ? "" : absl::StrCat(" value '", descriptor.value, "'"),
                   " in the same list"));
        }
        if (descriptor.value.find('*') == std::string::npos) return;
        // As envoyproxy/ratelimit, the first wildcard of a key that matches (in file order)
        // wins; one that an earlier one always beats could never match, so it is refused.
        for (size_t j = 0; j < descriptors.size(); ++j) {
          const EnvoyDescriptor& earlier = descriptors[j];
          if (earlier.key == descriptor.key && earlier.value.find('*') != std::string::npos &&
              Covers(earlier.value, descriptor.value)) {
            Fail(item["value"], item_field + ".value",
                 absl::StrCat("wildcard '", descriptor.value, "' can never match: '", earlier.value,
                              "' (", written_at[j],
                              ") comes first and matches every value it would"));
          }
        }
      });
    }
    if (YAML::Node rate_limit = item["rate_limit"]) {
      errors.Try([&] {
        descriptor.rate_limit = ParseRateLimit(rate_limit, item_field + ".rate_limit", errors);
      });
    }
    if (YAML::Node shadow = item["shadow_mode"]) {
      errors.Try([&] { descriptor.shadow_mode = Bool(shadow, item_field + ".shadow_mode"); });
    }
    if (YAML::Node quota = item["quota_mode"]) {
      errors.Try([&] { descriptor.quota_mode = Bool(quota, item_field + ".quota_mode"); });
    }
    // Accepted and checked; they name envoyproxy/ratelimit's statistics, which tollgate does
    // not keep per descriptor value (docs/envoy.md).
    if (YAML::Node detailed = item["detailed_metric"]) {
      errors.Try([&] { Bool(detailed, item_field + ".detailed_metric"); });
    }
    if (YAML::Node to_metric = item["value_to_metric"]) {
      errors.Try([&] { Bool(to_metric, item_field + ".value_to_metric"); });
    }
    if (YAML::Node metadata = item["metadata"]) {
      errors.Try([&] {
        // Any map, as envoyproxy/ratelimit (which sends it as response dynamic metadata).
        if (!metadata.IsMap() && !metadata.IsNull()) {
          Fail(metadata, item_field + ".metadata",
               absl::StrCat("expected a map, got ", Describe(metadata)));
        }
        if (metadata.IsMap() && metadata.size() > 0) {
          AppendYamlAsJson(metadata, descriptor.metadata_json);
        }
      });
    }
    if (YAML::Node share = item["share_threshold"]) {
      errors.Try([&] {
        descriptor.share_threshold = Bool(share, item_field + ".share_threshold");
        if (value_known && descriptor.share_threshold &&
            descriptor.value.find('*') == std::string::npos) {
          Fail(share, item_field + ".share_threshold",
               absl::StrCat("only applies to a wildcard value (one containing '*'), got value '",
                            descriptor.value, "'"));
        }
      });
    }
    if (YAML::Node nested = item["descriptors"]) {
      errors.Try([&] {
        descriptor.descriptors = ParseDescriptors(nested, item_field + ".descriptors", errors);
      });
    }
    written_at.push_back(errors.positions() ? absl::StrCat("line ", descriptor.line) : item_field);
    descriptors.push_back(std::move(descriptor));
  }
  return descriptors;
}

std::string Located(absl::string_view file_name, const YAML::Mark& mark, absl::string_view what) {
  if (mark.is_null()) return absl::StrCat(file_name, ": ", what);
  return absl::StrCat(file_name, ":", mark.line + 1, ":", mark.column + 1, ": ", what);
}

// The one parser of a domain's config, for files and for trees built in memory alike.
absl::StatusOr<EnvoyDomainConfig> ParseRoot(const YAML::Node& root, std::string_view file_name,
                                            bool positions) {
  Errors errors(AbslView(file_name), positions);
  try {
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(Located(
          AbslView(file_name), positions ? root.Mark() : YAML::Mark::null_mark(),
          absl::StrCat("expected a map with domain and descriptors, got ", Describe(root))));
    }
    CheckMap(root, "(top level)", kRootKeys, errors);
    const bool top_level_has_errors = errors.size() > 0;
    EnvoyDomainConfig config;
    config.file_name = std::string(file_name);
    errors.Try([&] {
      const YAML::Node domain = root["domain"];
      // A misspelt `domain:` already has its error (with "did you mean"); a second one
      // saying it is missing would only repeat it.
      if (!domain && top_level_has_errors) return;
      if (!domain) Fail(root, "domain", "missing");
      config.domain = Scalar(domain, "domain");
      if (config.domain.empty()) Fail(domain, "domain", "must not be empty");
    });
    if (YAML::Node descriptors = root["descriptors"]) {
      errors.Try(
          [&] { config.descriptors = ParseDescriptors(descriptors, "descriptors", errors); });
    }
    if (absl::Status status = errors.ToStatus(); !status.ok()) return status;
    return config;
  } catch (const ConfigError& error) {
    errors.Add(error);
  } catch (const YAML::Exception& error) {
    errors.Add({error.mark, error.msg});
  } catch (const std::exception& error) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(file_name), ": ", error.what()));
  }
  return errors.ToStatus();
}

}  // namespace

std::vector<std::string> SplitWildcard(std::string_view pattern) {
  return absl::StrSplit(AbslView(pattern), '*');
}

bool WildcardMatches(const std::vector<std::string>& parts, std::string_view text) {
  const absl::string_view value = AbslView(text);
  if (parts.size() == 1) return value == parts[0];
  const std::string& first = parts.front();
  const std::string& last = parts.back();
  if (value.size() < first.size() + last.size()) return false;
  if (!absl::StartsWith(value, first) || !absl::EndsWith(value, last)) return false;
  absl::string_view middle = value.substr(first.size(), value.size() - first.size() - last.size());
  for (size_t i = 1; i + 1 < parts.size(); ++i) {
    const size_t at = middle.find(parts[i]);
    if (at == absl::string_view::npos) return false;
    middle.remove_prefix(at + parts[i].size());
  }
  return true;
}

int64_t EnvoyUnitSeconds(EnvoyUnit unit) {
  for (const UnitInfo& info : kUnits) {
    if (info.unit == unit) return info.seconds;
  }
  return 1;
}

std::string_view EnvoyUnitName(EnvoyUnit unit) {
  for (const UnitInfo& info : kUnits) {
    if (info.unit == unit) return std::string_view(info.name.data(), info.name.size());
  }
  return "second";
}

std::optional<EnvoyUnit> ParseEnvoyUnit(std::string_view text) {
  const std::string lower = absl::AsciiStrToLower(AbslView(text));
  for (const UnitInfo& info : kUnits) {
    if (info.name == lower) return info.unit;
  }
  return std::nullopt;
}

absl::StatusOr<EnvoyDomainConfig> ParseEnvoyConfig(std::string_view yaml_text,
                                                   std::string_view file_name) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::ParserException& error) {
    return absl::InvalidArgumentError(
        Located(AbslView(file_name), error.mark, absl::StrCat("invalid YAML: ", error.msg)));
  } catch (const YAML::Exception& error) {
    return absl::InvalidArgumentError(Located(AbslView(file_name), error.mark, error.msg));
  } catch (const std::exception& error) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(file_name), ": ", error.what()));
  }
  return ParseRoot(root, file_name, /*positions=*/true);
}

absl::StatusOr<EnvoyDomainConfig> ParseEnvoyConfigTree(const YAML::Node& root,
                                                       std::string_view source_name) {
  return ParseRoot(root, source_name, /*positions=*/false);
}

absl::StatusOr<EnvoyDomainConfig> LoadEnvoyConfigFile(const std::string& path) {
  absl::StatusOr<std::string> text = config::ReadConfigFile(path, "");
  if (!text.ok()) return text.status();
  return ParseEnvoyConfig(*text, path);
}

absl::StatusOr<ConfigKind> DetectConfigKind(std::string_view yaml_text,
                                            std::string_view file_name) {
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    const bool limits = root.IsMap() && root["limits"];
    const bool domain = root.IsMap() && root["domain"];
    if (limits && domain) {
      return absl::InvalidArgumentError(
          absl::StrCat(AbslView(file_name),
                       ": has both 'limits:' (tollgate's format) and 'domain:' (Envoy's format); "
                       "put each in its own file"));
    }
    if (limits) return ConfigKind::kLimits;
    if (domain) return ConfigKind::kEnvoy;
    // Neither: a top-level key of one format, or one close to it (`limit:`, `domian:`),
    // names the format, whose parser then reports the typo with "did you mean" beside the
    // file's other errors.
    if (root.IsMap()) {
      constexpr absl::string_view kLimitsKeys[] = {"limits", "memory_store"};
      for (const auto& pair : root) {
        if (!pair.first.IsScalar()) continue;
        const std::string& name = pair.first.Scalar();
        if (!config_internal::ClosestName(name, kLimitsKeys).empty()) return ConfigKind::kLimits;
        if (!config_internal::ClosestName(name, kFormatKeys).empty()) return ConfigKind::kEnvoy;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat(AbslView(file_name),
                     ": expected a top-level 'limits:' (tollgate's format) or 'domain:' "
                     "(Envoy's format)"));
  } catch (const YAML::ParserException& error) {
    return absl::InvalidArgumentError(
        Located(AbslView(file_name), error.mark, absl::StrCat("invalid YAML: ", error.msg)));
  } catch (const YAML::Exception& error) {
    return absl::InvalidArgumentError(Located(AbslView(file_name), error.mark, error.msg));
  } catch (const std::exception& error) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(file_name), ": ", error.what()));
  }
}

namespace {

void SetDefaultAlgorithm(std::vector<EnvoyDescriptor>& descriptors, Algorithm algorithm) {
  for (EnvoyDescriptor& descriptor : descriptors) {
    if (descriptor.rate_limit.has_value() && !descriptor.rate_limit->algorithm_given &&
        !descriptor.rate_limit->unlimited) {
      descriptor.rate_limit->algorithm = algorithm;
    }
    SetDefaultAlgorithm(descriptor.descriptors, algorithm);
  }
}

}  // namespace

void SetDefaultAlgorithm(std::vector<EnvoyDomainConfig>& domains, Algorithm algorithm) {
  for (EnvoyDomainConfig& domain : domains) SetDefaultAlgorithm(domain.descriptors, algorithm);
}

}  // namespace tollgate
