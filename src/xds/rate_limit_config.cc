// Copyright tollgate authors.
#include "src/xds/rate_limit_config.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/struct.pb.h"
#include "src/config/envoy_config_tree.h"

namespace tollgate::xds {
namespace {

using ::ratelimit::config::ratelimit::v3::RateLimitConfig;
using ::ratelimit::config::ratelimit::v3::RateLimitDescriptor;
using ::ratelimit::config::ratelimit::v3::RateLimitPolicy;
using ::ratelimit::config::ratelimit::v3::RateLimitUnit;
using ::ratelimit::config::ratelimit::v3::RateLimitUnit_IsValid;
using ::ratelimit::config::ratelimit::v3::RateLimitUnit_Name;

// A scalar the parser reads as a string whatever its text (a quoted one in a file).
YAML::Node QuotedScalar(const std::string& text) {
  YAML::Node node(text);
  node.SetTag("!");
  return node;
}

// The shortest text that reads back as `value`.
std::string NumberText(double value) {
  char buffer[64];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  if (error != std::errc()) return absl::StrCat(value);
  return std::string(buffer, end);
}

YAML::Node ValueToYaml(const google::protobuf::Value& value);

YAML::Node StructToYaml(const google::protobuf::Struct& value) {
  std::vector<const std::string*> keys;
  keys.reserve(value.fields().size());
  for (const auto& [key, unused] : value.fields()) keys.push_back(&key);
  std::sort(keys.begin(), keys.end(),
            [](const std::string* a, const std::string* b) { return *a < *b; });
  YAML::Node map(YAML::NodeType::Map);
  for (const std::string* key : keys) map[*key] = ValueToYaml(value.fields().at(*key));
  return map;
}

YAML::Node ValueToYaml(const google::protobuf::Value& value) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kNumberValue:
      return YAML::Node(NumberText(value.number_value()));
    case google::protobuf::Value::kStringValue:
      return QuotedScalar(value.string_value());
    case google::protobuf::Value::kBoolValue:
      return YAML::Node(value.bool_value() ? "true" : "false");
    case google::protobuf::Value::kStructValue:
      return StructToYaml(value.struct_value());
    case google::protobuf::Value::kListValue: {
      YAML::Node list(YAML::NodeType::Sequence);
      for (const google::protobuf::Value& item : value.list_value().values()) {
        list.push_back(ValueToYaml(item));
      }
      return list;
    }
    case google::protobuf::Value::kNullValue:
    case google::protobuf::Value::KIND_NOT_SET:
      break;
  }
  return YAML::Node(YAML::NodeType::Null);
}

// "second", ...; "UNKNOWN" for 0 and the number for a value outside the enum, which the
// parser refuses naming them.
std::string UnitText(int unit) {
  if (unit == ratelimit::config::ratelimit::v3::UNKNOWN || !RateLimitUnit_IsValid(unit)) {
    return unit == 0 ? "UNKNOWN" : absl::StrCat(unit);
  }
  return absl::AsciiStrToLower(RateLimitUnit_Name(static_cast<RateLimitUnit>(unit)));
}

YAML::Node PolicyToYaml(const RateLimitPolicy& policy) {
  YAML::Node node(YAML::NodeType::Map);
  const bool unknown_unit = policy.unit() == ratelimit::config::ratelimit::v3::UNKNOWN;
  if (policy.unlimited()) node["unlimited"] = "true";
  if (!policy.unlimited() || !unknown_unit) node["unit"] = UnitText(policy.unit());
  if (!policy.unlimited() || policy.requests_per_unit() != 0) {
    node["requests_per_unit"] = absl::StrCat(policy.requests_per_unit());
  }
  if (!policy.name().empty()) node["name"] = QuotedScalar(policy.name());
  if (policy.replaces_size() > 0) {
    YAML::Node replaces(YAML::NodeType::Sequence);
    for (const auto& replace : policy.replaces()) {
      YAML::Node item(YAML::NodeType::Map);
      item["name"] = QuotedScalar(replace.name());
      replaces.push_back(item);
    }
    node["replaces"] = replaces;
  }
  return node;
}

YAML::Node DescriptorsToYaml(
    const google::protobuf::RepeatedPtrField<RateLimitDescriptor>& descriptors) {
  YAML::Node list(YAML::NodeType::Sequence);
  for (const RateLimitDescriptor& descriptor : descriptors) {
    YAML::Node node(YAML::NodeType::Map);
    node["key"] = QuotedScalar(descriptor.key());
    if (!descriptor.value().empty()) node["value"] = QuotedScalar(descriptor.value());
    if (descriptor.has_rate_limit()) node["rate_limit"] = PolicyToYaml(descriptor.rate_limit());
    if (descriptor.shadow_mode()) node["shadow_mode"] = "true";
    if (descriptor.quota_mode()) node["quota_mode"] = "true";
    if (descriptor.detailed_metric()) node["detailed_metric"] = "true";
    if (descriptor.metadata().fields_size() > 0) {
      node["metadata"] = StructToYaml(descriptor.metadata());
    }
    if (descriptor.descriptors_size() > 0) {
      node["descriptors"] = DescriptorsToYaml(descriptor.descriptors());
    }
    list.push_back(node);
  }
  return list;
}

}  // namespace

YAML::Node RateLimitConfigToYaml(const RateLimitConfig& config) {
  YAML::Node root(YAML::NodeType::Map);
  if (!config.name().empty()) root["name"] = QuotedScalar(config.name());
  root["domain"] = QuotedScalar(config.domain());
  if (config.descriptors_size() > 0) root["descriptors"] = DescriptorsToYaml(config.descriptors());
  return root;
}

std::string ResourceLabel(const RateLimitConfig& config) {
  return absl::StrCat("resource '", config.name(), "' (domain '", config.domain(), "')");
}

absl::StatusOr<EnvoyDomainConfig> ConvertRateLimitConfig(const RateLimitConfig& config) {
  absl::StatusOr<EnvoyDomainConfig> domain =
      ParseEnvoyConfigTree(RateLimitConfigToYaml(config), ResourceLabel(config));
  if (!domain.ok()) return domain.status();
  domain->file_name = absl::StrCat("xDS resource '", config.name(), "'");
  return domain;
}

absl::StatusOr<std::vector<EnvoyDomainConfig>> ConvertRateLimitConfigs(
    const google::protobuf::RepeatedPtrField<google::protobuf::Any>& resources) {
  std::vector<EnvoyDomainConfig> domains;
  std::vector<std::string> errors;
  // The resource that gave each domain first.
  absl::flat_hash_map<std::string, std::string> resource_of_domain;
  for (int i = 0; i < resources.size(); ++i) {
    const google::protobuf::Any& resource = resources.Get(i);
    if (resource.type_url() != kRateLimitConfigTypeUrl) {
      errors.push_back(absl::StrCat("resource #", i, ": expected type ", kRateLimitConfigTypeUrl,
                                    ", got '", resource.type_url(), "'"));
      continue;
    }
    RateLimitConfig config;
    if (!resource.UnpackTo(&config)) {
      errors.push_back(
          absl::StrCat("resource #", i, ": not a valid RateLimitConfig message (cannot decode)"));
      continue;
    }
    absl::StatusOr<EnvoyDomainConfig> domain = ConvertRateLimitConfig(config);
    if (!domain.ok()) {
      errors.push_back(std::string(domain.status().message()));
      continue;
    }
    auto [first, inserted] = resource_of_domain.emplace(domain->domain, config.name());
    if (!inserted) {
      errors.push_back(absl::StrCat(ResourceLabel(config), ": domain: also given by resource '",
                                    first->second, "'"));
      continue;
    }
    domains.push_back(*std::move(domain));
  }
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  return domains;
}

}  // namespace tollgate::xds
