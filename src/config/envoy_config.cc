// Copyright tollgate authors. envoyproxy/ratelimit's YAML format -> EnvoyDomainConfig: the
// parser's root and checks of single values, and the format's public functions.
//
// Errors are statuses, as in tollgate's own format (config.cc): every one is recorded with
// its file, line, column and field. yaml-cpp reports its own by throwing; those are caught
// here and turned into InvalidArgument the same way. Nothing throws past this file.
#include "src/config/envoy_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "src/config/config_file.h"
#include "src/config/envoy_config_tree.h"
#include "src/config/envoy_parser.h"
#include "src/config/names.h"
#include "src/config/yaml_node.h"
#include "src/core/absl_view.h"

namespace tollgate {
namespace config {
namespace {

// `name` is accepted and not used, as by envoyproxy/ratelimit: Envoy Gateway writes the
// RateLimitConfig message's name beside its domain.
constexpr absl::string_view kRootKeys[] = {"domain", "descriptors", "name"};

std::string Located(absl::string_view file_name, const YAML::Mark& mark, absl::string_view what) {
  if (mark.is_null()) return absl::StrCat(file_name, ": ", what);
  return absl::StrCat(file_name, ":", mark.line + 1, ":", mark.column + 1, ": ", what);
}

// What `read` returns, or InvalidArgument naming the file (and the position) for what yaml-cpp
// threw while reading it.
template <typename T>
absl::StatusOr<T> CatchYaml(std::string_view file_name,
                            absl::FunctionRef<absl::StatusOr<T>()> read) {
  try {
    return read();
  } catch (const YAML::ParserException& error) {
    return absl::InvalidArgumentError(
        Located(AbslView(file_name), error.mark, absl::StrCat("invalid YAML: ", error.msg)));
  } catch (const YAML::Exception& error) {
    return absl::InvalidArgumentError(Located(AbslView(file_name), error.mark, error.msg));
  } catch (const std::exception& error) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(file_name), ": ", error.what()));
  }
}

}  // namespace

EnvoyParser::EnvoyParser(std::string_view file_name, bool positions)
    : file_name_(file_name), problems_(AbslView(file_name)), positions_(positions) {}

absl::Status EnvoyParser::Fail(const YAML::Node& node, absl::string_view field,
                               absl::string_view what) {
  return problems_.Add(positions_ ? node.Mark() : YAML::Mark::null_mark(), "",
                       absl::StrCat(field, ": ", what));
}

void EnvoyParser::Report(const YAML::Node& node, absl::string_view field, absl::string_view what) {
  Fail(node, field, what).IgnoreError();
}

absl::Status EnvoyParser::CheckMap(const YAML::Node& node, absl::string_view field,
                                   absl::Span<const absl::string_view> allowed) {
  if (!node.IsMap()) return Fail(node, field, absl::StrCat("expected a map, got ", Describe(node)));
  absl::flat_hash_set<std::string> seen;
  for (const auto& pair : node) {
    const YAML::Node& key = pair.first;
    if (!key.IsScalar()) {
      Report(key, field, "expected keys to be plain names");
      continue;
    }
    const std::string& name = key.Scalar();
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      Report(key, field,
             absl::StrCat("unknown key '", name, "', expected ", OneOf(allowed),
                          DidYouMean(name, allowed)));
      continue;
    }
    if (!seen.insert(name).second) Report(key, field, absl::StrCat("duplicate key '", name, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> EnvoyParser::Scalar(const YAML::Node& node, absl::string_view field) {
  if (!node.IsScalar())
    return Fail(node, field, absl::StrCat("expected a string, got ", Describe(node)));
  return node.Scalar();
}

absl::StatusOr<bool> EnvoyParser::Bool(const YAML::Node& node, absl::string_view field) {
  bool value = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
    return Fail(node, field, absl::StrCat("expected true or false, got ", Describe(node)));
  }
  return value;
}

absl::StatusOr<uint32_t> EnvoyParser::Uint32(const YAML::Node& node, absl::string_view field) {
  const std::string text = node.IsScalar() ? node.Scalar() : std::string();
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, error] = std::from_chars(text.data(), end, value);
  if (!node.IsScalar() || text.empty() || error != std::errc() || ptr != end ||
      value > UINT32_MAX) {
    return Fail(
        node, field,
        absl::StrCat("expected a whole number from 0 to ", UINT32_MAX, ", got ", Describe(node)));
  }
  return static_cast<uint32_t>(value);
}

absl::StatusOr<EnvoyDomainConfig> EnvoyParser::Parse(const YAML::Node& root) {
  try {
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(Located(
          file_name_, positions_ ? root.Mark() : YAML::Mark::null_mark(),
          absl::StrCat("expected a map with domain and descriptors, got ", Describe(root))));
    }
    CheckMap(root, "(top level)", kRootKeys).IgnoreError();  // a map: never an error
    const bool top_level_has_errors = problems_.size() > 0;
    EnvoyDomainConfig config;
    config.file_name = file_name_;
    if (const YAML::Node domain = root["domain"]; !domain) {
      // A misspelt `domain:` already has its error (with "did you mean"); a second one
      // saying it is missing would only repeat it.
      if (!top_level_has_errors) Report(root, "domain", "missing");
    } else if (absl::StatusOr<std::string> name = Scalar(domain, "domain"); name.ok()) {
      config.domain = *std::move(name);
      if (config.domain.empty()) Report(domain, "domain", "must not be empty");
    }
    if (YAML::Node descriptors = root["descriptors"]) {
      absl::StatusOr<std::vector<EnvoyDescriptor>> parsed =
          ParseDescriptors(descriptors, "descriptors");
      if (parsed.ok()) config.descriptors = *std::move(parsed);
    }
    if (absl::Status status = problems_.ToStatus(); !status.ok()) return status;
    return config;
  } catch (const YAML::Exception& error) {
    problems_.Add(positions_ ? error.mark : YAML::Mark::null_mark(), "", error.msg).IgnoreError();
  } catch (const std::exception& error) {
    return absl::InvalidArgumentError(absl::StrCat(file_name_, ": ", error.what()));
  }
  return problems_.ToStatus();
}

}  // namespace config

namespace {

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

// The keys that say a file is in one format or the other.
constexpr absl::string_view kEnvoyKeys[] = {"domain", "descriptors"};
constexpr absl::string_view kLimitsKeys[] = {"limits", "memory_store"};

// Which format `root` is written in (DetectConfigKind).
absl::StatusOr<ConfigKind> KindOf(const YAML::Node& root, std::string_view file_name) {
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
  // Neither: a top-level key of one format, or one close to it (`limit:`, `domian:`), names
  // the format, whose parser then reports the typo with "did you mean" beside the file's
  // other errors.
  if (root.IsMap()) {
    for (const auto& pair : root) {
      if (!pair.first.IsScalar()) continue;
      const std::string& name = pair.first.Scalar();
      if (!config_internal::ClosestName(name, kLimitsKeys).empty()) return ConfigKind::kLimits;
      if (!config_internal::ClosestName(name, kEnvoyKeys).empty()) return ConfigKind::kEnvoy;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(AbslView(file_name),
                   ": expected a top-level 'limits:' (tollgate's format) or 'domain:' "
                   "(Envoy's format)"));
}

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
  absl::StatusOr<YAML::Node> root = config::CatchYaml<YAML::Node>(
      file_name,
      [&]() -> absl::StatusOr<YAML::Node> { return YAML::Load(std::string(yaml_text)); });
  if (!root.ok()) return root.status();
  return config::EnvoyParser(file_name, /*positions=*/true).Parse(*root);
}

absl::StatusOr<EnvoyDomainConfig> ParseEnvoyConfigTree(const YAML::Node& root,
                                                       std::string_view source_name) {
  return config::EnvoyParser(source_name, /*positions=*/false).Parse(root);
}

absl::StatusOr<EnvoyDomainConfig> LoadEnvoyConfigFile(const std::string& path) {
  absl::StatusOr<std::string> text = config::ReadConfigFile(path, "");
  if (!text.ok()) return text.status();
  return ParseEnvoyConfig(*text, path);
}

absl::StatusOr<ConfigKind> DetectConfigKind(std::string_view yaml_text,
                                            std::string_view file_name) {
  return config::CatchYaml<ConfigKind>(file_name, [&]() -> absl::StatusOr<ConfigKind> {
    return KindOf(YAML::Load(std::string(yaml_text)), file_name);
  });
}

void SetDefaultAlgorithm(std::vector<EnvoyDomainConfig>& domains, Algorithm algorithm) {
  for (EnvoyDomainConfig& domain : domains) SetDefaultAlgorithm(domain.descriptors, algorithm);
}

}  // namespace tollgate
