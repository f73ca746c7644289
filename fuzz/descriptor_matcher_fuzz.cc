// Copyright tollgate authors. Fuzz target: the descriptor matcher. The input is an Envoy
// config, a line "---", then one descriptor per line, "domain|key=value|key=value...".
// When the config part does not parse, a fixed config with wildcards, nesting and
// `replaces` is used, so most inputs reach Match. A match is a rule of the asked domain
// whose depth is the number of entries.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "src/config/envoy_config.h"
#include "src/server/descriptor_matcher.h"

namespace {

constexpr char kFixedConfig[] = R"(domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: user
    value: "vip*"
    rate_limit: {unlimited: true}
  - key: path
    value: "/a*"
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 3, name: a}
      - key: user
        value: bob
        rate_limit: {unit: hour, requests_per_unit: 1, replaces: [{name: a}]}
  - key: path
    descriptors:
      - key: m
        value: GET
        descriptors:
          - key: user
            rate_limit: {unit: day, requests_per_unit: 0}
)";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find("\n---\n");
  const absl::string_view config_text =
      split == absl::string_view::npos ? "" : input.substr(0, split);
  const absl::string_view requests =
      split == absl::string_view::npos ? input : input.substr(split + 5);

  absl::StatusOr<tollgate::EnvoyDomainConfig> config = tollgate::ParseEnvoyConfig(
      std::string_view(config_text.data(), config_text.size()), "fuzz.yaml");
  if (!config.ok()) config = tollgate::ParseEnvoyConfig(kFixedConfig, "fixed.yaml");
  if (!config.ok()) std::abort();
  std::vector<tollgate::EnvoyDomainConfig> domains;
  domains.push_back(*std::move(config));
  absl::StatusOr<std::unique_ptr<tollgate::DescriptorMatcher>> matcher =
      tollgate::DescriptorMatcher::Create(std::move(domains));
  if (!matcher.ok()) return 0;

  for (absl::string_view line : absl::StrSplit(requests, '\n')) {
    std::vector<absl::string_view> parts = absl::StrSplit(line, '|');
    const absl::string_view domain = parts.front();
    std::vector<tollgate::DescriptorEntry> entries;
    for (size_t i = 1; i < parts.size(); ++i) {
      const size_t equals = parts[i].find('=');
      const absl::string_view key = parts[i].substr(0, equals);
      const absl::string_view value =
          equals == absl::string_view::npos ? absl::string_view() : parts[i].substr(equals + 1);
      entries.push_back(
          {std::string_view(key.data(), key.size()), std::string_view(value.data(), value.size())});
    }
    const std::string_view domain_view(domain.data(), domain.size());
    const tollgate::EnvoyRule* rule = (*matcher)->Match(domain_view, entries);
    if (rule != nullptr && (rule->domain != domain_view || !(*matcher)->HasDomain(domain_view))) {
      std::abort();
    }
    if (rule != nullptr && entries.empty()) std::abort();
  }
  return 0;
}
