// Copyright tollgate authors.
#include "src/server/rls_plan.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/core/absl_view.h"
#include "src/server/metrics.h"

namespace tollgate::server {
namespace {

using RateLimitDescriptor = envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;

std::optional<EnvoyUnit> UnitOfOverride(int wire_unit) {
  switch (wire_unit) {
    case 1:
      return EnvoyUnit::kSecond;
    case 2:
      return EnvoyUnit::kMinute;
    case 3:
      return EnvoyUnit::kHour;
    case 4:
      return EnvoyUnit::kDay;
    case 5:
      return EnvoyUnit::kMonth;
    case 6:
      return EnvoyUnit::kYear;
    case 7:
      return EnvoyUnit::kWeek;
    default:
      return std::nullopt;
  }
}

void AppendEscaped(std::string& out, std::string_view text) {
  for (char c : text) {
    switch (c) {
      case '%':
        out += "%25";
        break;
      case ',':
        out += "%2C";
        break;
      case '=':
        out += "%3D";
        break;
      default:
        out += c;
    }
  }
}

// envoyproxy/ratelimit's request part of the dynamic metadata (rls_plan.h).
google::protobuf::Struct RequestMetadata(const RateLimitRequest& request) {
  google::protobuf::Struct metadata;
  auto& fields = *metadata.mutable_fields();
  fields["domain"].set_string_value(request.domain());
  google::protobuf::ListValue* descriptors = fields["descriptors"].mutable_list_value();
  for (const RateLimitDescriptor& descriptor : request.descriptors()) {
    auto& described = *descriptors->add_values()->mutable_struct_value()->mutable_fields();
    google::protobuf::ListValue* entries = described["entries"].mutable_list_value();
    for (const auto& entry : descriptor.entries()) {
      entries->add_values()->set_string_value(absl::StrCat(entry.key(), "=", entry.value()));
    }
    if (descriptor.has_limit()) {
      // The override in protobuf's text form, as the peer prints it.
      described["limit"].set_string_value(descriptor.limit().ShortDebugString());
    }
    if (descriptor.has_hits_addend()) {
      described["hitsAddend"].set_number_value(
          static_cast<double>(descriptor.hits_addend().value()));
    }
  }
  if (request.hits_addend() != 0) {
    fields["hitsAddend"].set_number_value(static_cast<double>(request.hits_addend()));
  }
  return metadata;
}

}  // namespace

const Limit* OverrideLimits::Find(uint32_t requests_per_unit, EnvoyUnit unit) {
  const std::pair<uint32_t, int> shape(requests_per_unit, static_cast<int>(unit));
  absl::MutexLock lock(&mu_);
  if (auto it = by_shape_.find(shape); it != by_shape_.end()) return it->second;
  if (static_cast<int>(limits_.size()) >= max_limits_) return nullptr;
  Limit& limit = limits_.emplace_back();
  limit.name = absl::StrCat("override:", requests_per_unit, "/", AbslView(EnvoyUnitName(unit)));
  limit.numbers = EnvoyLimitNumbers(Algorithm::kFixedWindow, requests_per_unit, unit);
  by_shape_.emplace(shape, &limit);
  if (metrics_ != nullptr) metrics_->RegisterLimitNames({limit.name});
  return &limit;
}

int OverrideLimits::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(limits_.size());
}

std::string DescriptorKey(absl::Span<const DescriptorEntry> entries,
                          absl::Span<const std::string_view> values) {
  std::string key;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!key.empty()) key += ',';
    AppendEscaped(key, entries[i].key);
    key += '=';
    AppendEscaped(key, i < values.size() ? values[i] : entries[i].value);
  }
  return key;
}

absl::StatusOr<RlsPlan> PlanRateLimit(const RateLimitRequest& request,
                                      const DescriptorMatcher& matcher, const Limiter& limiter,
                                      OverrideLimits* overrides, const RlsPlanOptions& options) {
  if (request.domain().empty()) {
    return absl::InvalidArgumentError("rate limit domain must not be empty");
  }
  if (request.descriptors().empty()) {
    return absl::InvalidArgumentError("rate limit descriptor list must not be empty");
  }
  if (request.descriptors_size() > options.max_descriptors) {
    return absl::InvalidArgumentError(
        absl::StrCat("rate limit request has ", request.descriptors_size(),
                     " descriptors, at most ", options.max_descriptors, " are accepted"));
  }
  RlsPlan plan;
  plan.global_shadow = options.global_shadow;
  if (options.dynamic_metadata) plan.dynamic_metadata = RequestMetadata(request);
  const std::string_view domain = request.domain();
  plan.known_domain = matcher.HasDomain(domain);
  // As envoyproxy/ratelimit: an unknown domain limits nothing.
  if (!plan.known_domain) return plan;

  const int64_t request_hits = request.hits_addend() == 0 ? 1 : request.hits_addend();
  // A descriptor's entries as the matcher reads them, without an allocation for the usual few.
  absl::InlinedVector<DescriptorEntry, 4> entries;
  std::vector<std::string_view> counted_values;
  plan.descriptors.resize(request.descriptors_size());
  absl::flat_hash_set<std::string_view> replaced;
  for (int i = 0; i < request.descriptors_size(); ++i) {
    const RateLimitDescriptor& descriptor = request.descriptors(i);
    PlannedDescriptor& item = plan.descriptors[i];
    entries.clear();
    for (const auto& entry : descriptor.entries()) {
      if (entry.key().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("descriptor ", i, ": an entry has an empty key"));
      }
      entries.push_back(DescriptorEntry{entry.key(), entry.value()});
    }
    item.cost =
        descriptor.has_hits_addend()
            ? static_cast<int64_t>(std::min<uint64_t>(descriptor.hits_addend().value(), INT64_MAX))
            : request_hits;
    item.report =
        options.descriptor_hits_are_reports && descriptor.has_hits_addend() && item.cost > 0;

    std::optional<EnvoyUnit> override_unit;
    if (descriptor.has_limit()) override_unit = UnitOfOverride(descriptor.limit().unit());
    if (override_unit.has_value()) {
      item.requests_per_unit = descriptor.limit().requests_per_unit();
      item.unit = *override_unit;
      if (item.requests_per_unit == 0) {
        item.plan = DescriptorPlan::kBlocked;
        continue;
      }
      const Limit* limit =
          overrides != nullptr ? overrides->Find(item.requests_per_unit, item.unit) : nullptr;
      if (limit != nullptr) {
        item.plan = DescriptorPlan::kCounted;
        item.limit = limit;
        item.key = absl::StrCat(AbslView(domain), "|", DescriptorKey(entries));
        continue;
      }
      spdlog::warn("rls: too many distinct limit overrides; ignoring {}/{}", item.requests_per_unit,
                   EnvoyUnitName(item.unit));
    }

    const EnvoyRule* rule = matcher.Match(domain, entries, &counted_values);
    if (rule == nullptr) continue;  // kNoRule
    item.rule = rule;
    item.rule_shadow = rule->shadow_mode;
    item.quota = rule->quota_mode;
    item.requests_per_unit = rule->rate_limit.requests_per_unit;
    item.unit = rule->rate_limit.unit;
    item.unit_multiplier = rule->rate_limit.unit_multiplier;
    for (const std::string& name : rule->rate_limit.replaces) replaced.insert(name);
    if (rule->rate_limit.unlimited) {
      item.plan = DescriptorPlan::kUnlimited;
    } else if (rule->limit_name.empty()) {
      item.plan = DescriptorPlan::kBlocked;
    } else {
      item.limit = limiter.FindLimit(rule->limit_name);
      if (item.limit == nullptr) {
        return absl::InternalError(
            absl::StrCat("rule ", rule->full_key, " has no limit in the limiter"));
      }
      item.plan = DescriptorPlan::kCounted;
      // share_threshold: the wildcard in place of the values it matched (one counter).
      item.key = DescriptorKey(entries, counted_values);
    }
  }

  for (size_t i = 0; i < plan.descriptors.size(); ++i) {
    PlannedDescriptor& item = plan.descriptors[i];
    if (item.rule != nullptr && !item.rule->rate_limit.name.empty() &&
        replaced.contains(item.rule->rate_limit.name)) {
      item.plan = DescriptorPlan::kReplaced;
    }
    if (options.global_quota && item.plan != DescriptorPlan::kUnlimited) item.quota = true;
    // A quota-mode descriptor never refuses the batch on its own (RenderRateLimitResponse
    // refuses the request when all of them are refused).
    item.enforced = !item.rule_shadow && !plan.global_shadow && !item.quota;
    if (item.plan == DescriptorPlan::kCounted) {
      if (item.key.size() > kMaxKeyBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a descriptor's entries are ", item.key.size(), " bytes, more than ", kMaxKeyBytes));
      }
      plan.counted.push_back(i);
    }
    plan.blocked |= item.plan == DescriptorPlan::kBlocked && item.enforced;
  }
  // A block-list rule refuses the request: nothing is counted (all or nothing); the others
  // are only looked at, for their statuses.
  if (plan.blocked) {
    for (size_t i : plan.counted) {
      if (!plan.descriptors[i].report) plan.descriptors[i].cost = 0;
    }
  }
  return plan;
}

std::vector<CheckRequest> TakeCheckRequests(RlsPlan& plan) {
  std::vector<CheckRequest> requests;
  requests.reserve(plan.counted.size());
  for (size_t i : plan.counted) {
    PlannedDescriptor& item = plan.descriptors[i];
    CheckRequest& check = requests.emplace_back();
    check.limit = *item.limit;
    check.key = std::move(item.key);
    check.cost = item.cost;
    check.shadow = !item.enforced && !item.report;  // a charge never refuses
    if (item.report) check.op = ItemOp::kCharge;
  }
  return requests;
}

}  // namespace tollgate::server
