// Copyright tollgate authors.
#include "src/server/descriptor_matcher.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/core/absl_view.h"

namespace tollgate {

// The descriptors of one list that share a key.
struct DescriptorMatcher::Node {
  const EnvoyRule* rule = nullptr;
  std::unique_ptr<Level> children;
};

struct DescriptorMatcher::Level {
  struct SameKey {
    absl::flat_hash_map<std::string, std::unique_ptr<Node>> exact;
    struct Wildcard {
      std::string pattern;
      std::vector<std::string> parts;  // SplitWildcard(pattern)
      bool share_threshold = false;
      std::unique_ptr<Node> node;
    };
    // In file order: the first match wins.
    std::vector<Wildcard> wildcards;
    std::unique_ptr<Node> any_value;
  };
  absl::flat_hash_map<std::string, SameKey> by_key;
};

LimitNumbers EnvoyLimitNumbers(Algorithm algorithm, uint32_t requests_per_unit, EnvoyUnit unit,
                               uint32_t unit_multiplier) {
  const int64_t seconds = EnvoyUnitSeconds(unit) * std::max<int64_t>(unit_multiplier, 1);
  LimitNumbers numbers;
  numbers.algorithm = algorithm;
  if (algorithm == Algorithm::kTokenBucket) {
    numbers.capacity = requests_per_unit;
    numbers.refill_per_second = static_cast<double>(requests_per_unit) / seconds;
  } else {
    numbers.limit = requests_per_unit;
    numbers.window_micros = seconds * 1'000'000;
  }
  return numbers;
}

DescriptorMatcher::DescriptorMatcher() = default;
DescriptorMatcher::~DescriptorMatcher() = default;

absl::StatusOr<std::unique_ptr<DescriptorMatcher>> DescriptorMatcher::Create(
    std::vector<EnvoyDomainConfig> domains) {
  std::unique_ptr<DescriptorMatcher> matcher(new DescriptorMatcher());
  absl::flat_hash_map<std::string, std::string> file_of_domain;
  for (EnvoyDomainConfig& config : domains) {
    auto [it, inserted] = file_of_domain.emplace(config.domain, config.file_name);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("domain '", config.domain, "' is in both ",
                                                     it->second, " and ", config.file_name));
    }
    auto level = std::make_unique<Level>();
    matcher->AddLevel(config.domain, config.domain, config.descriptors, *level);
    matcher->domains_.emplace(config.domain, std::move(level));
  }
  // Limit names: the rule's full key; a clash (possible when a key holds '_' or '.', or
  // across domains) gets "#2", "#3"... in load order, so names are stable across reloads of
  // the same files.
  absl::flat_hash_set<std::string> taken;
  for (EnvoyRule& rule : matcher->rules_) {
    const EnvoyRateLimit& rate_limit = rule.rate_limit;
    if (rate_limit.unlimited || rate_limit.requests_per_unit == 0) continue;
    std::string name = rule.full_key;
    for (int suffix = 2; taken.contains(name); ++suffix) {
      name = absl::StrCat(rule.full_key, "#", suffix);
    }
    taken.insert(name);
    rule.limit_name = name;
    Limit limit;
    limit.name = name;
    limit.numbers = EnvoyLimitNumbers(rate_limit.algorithm, rate_limit.requests_per_unit,
                                      rate_limit.unit, rate_limit.unit_multiplier);
    limit.on_store_failure = rate_limit.on_store_failure;
    limit.timeout_micros = rate_limit.timeout_micros;
    limit.durable = rate_limit.durable;
    matcher->limits_.push_back(std::move(limit));
  }
  return matcher;
}

void DescriptorMatcher::AddLevel(const std::string& domain, const std::string& parent_key,
                                 std::vector<EnvoyDescriptor>& descriptors, Level& level) {
  for (EnvoyDescriptor& descriptor : descriptors) {
    auto node = std::make_unique<Node>();
    std::string full_key = absl::StrCat(parent_key, ".", descriptor.key);
    if (!descriptor.value.empty()) absl::StrAppend(&full_key, "_", descriptor.value);
    if (descriptor.rate_limit.has_value()) {
      EnvoyRule& rule = rules_.emplace_back();
      rule.domain = domain;
      rule.full_key = full_key;
      rule.rate_limit = std::move(*descriptor.rate_limit);
      rule.shadow_mode = descriptor.shadow_mode;
      rule.quota_mode = descriptor.quota_mode;
      rule.metadata_json = std::move(descriptor.metadata_json);
      node->rule = &rule;
    }
    if (!descriptor.descriptors.empty()) {
      node->children = std::make_unique<Level>();
      AddLevel(domain, full_key, descriptor.descriptors, *node->children);
    }
    Level::SameKey& same_key = level.by_key[descriptor.key];
    const std::string& value = descriptor.value;
    // The parser rejects a (key, value) twice in one list, so no slot is taken twice.
    if (value.empty()) {
      same_key.any_value = std::move(node);
    } else if (value.find('*') != std::string::npos) {
      same_key.wildcards.push_back(
          {value, SplitWildcard(value), descriptor.share_threshold, std::move(node)});
    } else {
      same_key.exact.emplace(value, std::move(node));
    }
  }
}

bool DescriptorMatcher::HasDomain(std::string_view domain) const {
  return domains_.contains(AbslView(domain));
}

const EnvoyRule* DescriptorMatcher::Match(std::string_view domain,
                                          absl::Span<const DescriptorEntry> entries) const {
  return Match(domain, entries, nullptr);
}

const EnvoyRule* DescriptorMatcher::Match(std::string_view domain,
                                          absl::Span<const DescriptorEntry> entries,
                                          std::vector<std::string_view>* counted_values) const {
  if (counted_values != nullptr) counted_values->clear();
  auto domain_it = domains_.find(AbslView(domain));
  if (domain_it == domains_.end()) return nullptr;
  const Level* level = domain_it->second.get();
  for (size_t i = 0; i < entries.size(); ++i) {
    auto key_it = level->by_key.find(AbslView(entries[i].key));
    if (key_it == level->by_key.end()) return nullptr;
    const Level::SameKey& same_key = key_it->second;
    const absl::string_view value = AbslView(entries[i].value);
    const Node* next = nullptr;
    std::string_view counted_value = entries[i].value;
    if (auto exact = same_key.exact.find(value); exact != same_key.exact.end()) {
      next = exact->second.get();
    } else {
      for (const Level::SameKey::Wildcard& wildcard : same_key.wildcards) {
        if (WildcardMatches(wildcard.parts, entries[i].value)) {
          next = wildcard.node.get();
          if (wildcard.share_threshold) counted_value = wildcard.pattern;
          break;
        }
      }
      if (next == nullptr) next = same_key.any_value.get();
    }
    if (next == nullptr) return nullptr;
    if (counted_values != nullptr) counted_values->push_back(counted_value);
    if (i + 1 == entries.size()) return next->rule;
    if (next->children == nullptr) return nullptr;
    level = next->children.get();
  }
  return nullptr;
}

}  // namespace tollgate
