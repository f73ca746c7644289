// Copyright tollgate authors. A `descriptors:` list (EnvoyParser::ParseDescriptors).
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/config/envoy_parser.h"
#include "src/config/yaml_json.h"
#include "src/config/yaml_node.h"

namespace tollgate::config {
namespace {

constexpr absl::string_view kDescriptorKeys[] = {
    "key",        "value",           "rate_limit",      "descriptors",     "shadow_mode",
    "quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata"};

bool IsWildcard(const std::string& value) { return value.find('*') != std::string::npos; }

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

// The parts of ParseDescriptors. One entry's key.
absl::Status ReadKey(EnvoyParser& parser, const YAML::Node& item, const std::string& field,
                     EnvoyDescriptor& descriptor) {
  const YAML::Node key = item["key"];
  if (!key) return parser.Fail(item, field + ".key", "missing");
  absl::StatusOr<std::string> text = parser.Scalar(key, field + ".key");
  if (!text.ok()) return text.status();
  descriptor.key = *std::move(text);
  if (descriptor.key.empty()) return parser.Fail(key, field + ".key", "must not be empty");
  return absl::OkStatus();
}
// An error when the entry is not the `first` of its (key, value) in its list, or is a
// wildcard that can never match after the `earlier` entries (`written_at`: where each was).
absl::Status CheckUnique(EnvoyParser& parser, const YAML::Node& item, const std::string& field,
                         const EnvoyDescriptor& descriptor,
                         const std::vector<EnvoyDescriptor>& earlier,
                         const std::vector<std::string>& written_at, bool first) {
  if (!first) {
    return parser.Fail(
        item, field,
        absl::StrCat(
            "duplicate descriptor key '", descriptor.key, "'",
            descriptor.value.empty() ? "" : absl::StrCat(" value '", descriptor.value, "'"),
            " in the same list"));
  }
  if (!IsWildcard(descriptor.value)) return absl::OkStatus();
  // As envoyproxy/ratelimit, the first wildcard of a key that matches (in file order) wins;
  // one that an earlier one always beats could never match, so it is refused.
  for (size_t j = 0; j < earlier.size(); ++j) {
    if (earlier[j].key == descriptor.key && IsWildcard(earlier[j].value) &&
        Covers(earlier[j].value, descriptor.value)) {
      return parser.Fail(
          item["value"], field + ".value",
          absl::StrCat("wildcard '", descriptor.value, "' can never match: '", earlier[j].value,
                       "' (", written_at[j], ") comes first and matches every value it would"));
    }
  }
  return absl::OkStatus();
}
// An entry's rate limit, flags, metadata and nested list.
void ReadEntryExtras(EnvoyParser& parser, const YAML::Node& item, const std::string& field,
                     bool value_known, EnvoyDescriptor& descriptor) {
  if (YAML::Node rate_limit = item["rate_limit"]) {
    absl::StatusOr<EnvoyRateLimit> parsed =
        parser.ParseRateLimit(rate_limit, field + ".rate_limit");
    if (parsed.ok()) descriptor.rate_limit = *std::move(parsed);
  }
  // A boolean flag into `*out` (nullptr: only checked).
  const auto flag = [&](const char* name, bool* out) {
    if (YAML::Node node = item[name]) {
      absl::StatusOr<bool> value = parser.Bool(node, absl::StrCat(field, ".", name));
      if (value.ok() && out != nullptr) *out = *value;
    }
  };
  flag("shadow_mode", &descriptor.shadow_mode);
  flag("quota_mode", &descriptor.quota_mode);
  // Accepted and checked; they name envoyproxy/ratelimit's statistics, which tollgate does
  // not keep per descriptor value (docs/envoy.md).
  flag("detailed_metric", nullptr);
  flag("value_to_metric", nullptr);
  if (YAML::Node metadata = item["metadata"]) {
    // Any map, as envoyproxy/ratelimit (which sends it as response dynamic metadata).
    if (!metadata.IsMap() && !metadata.IsNull()) {
      parser.Report(metadata, field + ".metadata",
                    absl::StrCat("expected a map, got ", Describe(metadata)));
    } else if (metadata.IsMap() && metadata.size() > 0) {
      AppendYamlAsJson(metadata, descriptor.metadata_json);
    }
  }
  if (YAML::Node share = item["share_threshold"]) {
    absl::StatusOr<bool> value = parser.Bool(share, field + ".share_threshold");
    if (value.ok()) descriptor.share_threshold = *value;
    if (value.ok() && *value && value_known && !IsWildcard(descriptor.value)) {
      parser.Report(
          share, field + ".share_threshold",
          absl::StrCat("only applies to a wildcard value (one containing '*'), got value '",
                       descriptor.value, "'"));
    }
  }
  if (YAML::Node nested = item["descriptors"]) {
    absl::StatusOr<std::vector<EnvoyDescriptor>> parsed =
        parser.ParseDescriptors(nested, field + ".descriptors");
    if (parsed.ok()) descriptor.descriptors = *std::move(parsed);
  }
}

}  // namespace

absl::StatusOr<std::vector<EnvoyDescriptor>> EnvoyParser::ParseDescriptors(
    const YAML::Node& node, const std::string& field) {
  if (node.IsNull()) return std::vector<EnvoyDescriptor>();
  if (!node.IsSequence()) {
    return Fail(node, field, absl::StrCat("expected a list of descriptors, got ", Describe(node)));
  }
  std::vector<EnvoyDescriptor> descriptors;
  // Where each of `descriptors` was written ("line 3", or its field without positions).
  std::vector<std::string> written_at;
  // As envoyproxy/ratelimit: within one list, a (key, value) pair appears once.
  absl::flat_hash_set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string item_field = absl::StrCat(field, "[", i, "]");
    const YAML::Node item = node[i];
    if (!CheckMap(item, item_field, kDescriptorKeys).ok()) continue;
    EnvoyDescriptor descriptor;
    if (positions()) descriptor.line = item.Mark().line + 1;
    const bool key_known = ReadKey(*this, item, item_field, descriptor).ok();
    bool value_known = true;
    if (YAML::Node value = item["value"]) {
      absl::StatusOr<std::string> text = Scalar(value, item_field + ".value");
      value_known = text.ok();
      if (text.ok()) descriptor.value = *std::move(text);
    }
    if (key_known && value_known) {
      const bool first = seen.emplace(descriptor.key, descriptor.value).second;
      CheckUnique(*this, item, item_field, descriptor, descriptors, written_at, first)
          .IgnoreError();
    }
    ReadEntryExtras(*this, item, item_field, value_known, descriptor);
    written_at.push_back(positions() ? absl::StrCat("line ", descriptor.line) : item_field);
    descriptors.push_back(std::move(descriptor));
  }
  return descriptors;
}

}  // namespace tollgate::config
