// Copyright tollgate authors.
#include "src/server/rls_render.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "src/server/ratelimit_headers.h"

namespace tollgate::server {
namespace {

using DescriptorStatus = RateLimitResponse::DescriptorStatus;

constexpr std::string_view kLimitHeader = "RateLimit-Limit";
constexpr std::string_view kRemainingHeader = "RateLimit-Remaining";
constexpr std::string_view kResetHeader = "RateLimit-Reset";

// The wire enums of both protos number the units alike (SECOND = 1 ... YEAR = 6, WEEK = 7).
RateLimitResponse::RateLimit::Unit WireUnit(EnvoyUnit unit) {
  switch (unit) {
    case EnvoyUnit::kSecond:
      return RateLimitResponse::RateLimit::SECOND;
    case EnvoyUnit::kMinute:
      return RateLimitResponse::RateLimit::MINUTE;
    case EnvoyUnit::kHour:
      return RateLimitResponse::RateLimit::HOUR;
    case EnvoyUnit::kDay:
      return RateLimitResponse::RateLimit::DAY;
    case EnvoyUnit::kWeek:
      return RateLimitResponse::RateLimit::WEEK;
    case EnvoyUnit::kMonth:
      return RateLimitResponse::RateLimit::MONTH;
    case EnvoyUnit::kYear:
      return RateLimitResponse::RateLimit::YEAR;
  }
  return RateLimitResponse::RateLimit::UNKNOWN;
}

uint32_t ClampUint32(int64_t value) {
  return static_cast<uint32_t>(std::clamp<int64_t>(value, 0, UINT32_MAX));
}

// Adds `from` into `into`: a key only in `from` is added; when both hold a map the maps
// merge the same way; otherwise `into`'s value stays (as envoyproxy/ratelimit).
void MergeMetadata(google::protobuf::Struct& from, google::protobuf::Struct& into) {
  auto& into_fields = *into.mutable_fields();
  for (auto& [key, value] : *from.mutable_fields()) {
    auto existing = into_fields.find(key);
    if (existing == into_fields.end()) {
      into_fields[key] = std::move(value);
    } else if (existing->second.has_struct_value() && value.has_struct_value()) {
      MergeMetadata(*value.mutable_struct_value(), *existing->second.mutable_struct_value());
    }
  }
}

// One descriptor's status in the answer, as plain values.
struct StatusAnswer {
  RateLimitResponse::Code code = RateLimitResponse::OK;
  bool has_current_limit = false;
  uint32_t requests_per_unit = 0;
  RateLimitResponse::RateLimit::Unit unit = RateLimitResponse::RateLimit::UNKNOWN;
  std::string_view name;  // the rule's, lives as long as the matcher
  uint32_t limit_remaining = 0;
  bool has_duration = false;
  int64_t reset_seconds = 0;
};

// The answer to a plan, decided once for the message and for the span's outcome.
struct Answer {
  RateLimitResponse::Code overall_code = RateLimitResponse::OK;
  absl::InlinedVector<StatusAnswer, 4> statuses;
  // The status with the least remaining among those with a current limit (the first of
  // equals): it gives the RateLimit-* headers. -1 for none.
  int least_remaining = -1;
  // A fail_closed limit refused because the store is unreachable (dynamic metadata).
  const Limit* unavailable_limit = nullptr;
};

// Whole seconds, rounded up, as envoyproxy/ratelimit sends (Envoy's X-RateLimit-Reset reads
// only .seconds()).
int64_t DurationSeconds(int64_t micros) { return CeilSeconds(std::max<int64_t>(micros, 0)); }

Answer Decide(const RlsPlan& plan, int64_t now_micros) {
  Answer answer;
  bool over_limit = false;  // a descriptor not in quota mode is over its limit
  int quota_descriptors = 0;
  int quota_over_limit = 0;
  answer.statuses.resize(plan.descriptors.size());
  for (size_t i = 0; i < plan.descriptors.size(); ++i) {
    const PlannedDescriptor& item = plan.descriptors[i];
    StatusAnswer& status = answer.statuses[i];
    switch (item.plan) {
      case DescriptorPlan::kNoRule:
      case DescriptorPlan::kReplaced:
        // In global quota mode a descriptor without a rule is a quota descriptor that passes.
        quota_descriptors += item.quota ? 1 : 0;
        continue;
      case DescriptorPlan::kUnlimited:
        status.limit_remaining = UINT32_MAX;
        continue;
      case DescriptorPlan::kBlocked: {
        const int64_t window_micros =
            EnvoyUnitSeconds(item.unit) * int64_t{item.unit_multiplier} * 1'000'000;
        status.has_duration = true;
        status.reset_seconds = DurationSeconds(
            window_micros - (now_micros % window_micros + window_micros) % window_micros);
        if (!item.rule_shadow) status.code = RateLimitResponse::OVER_LIMIT;
        break;
      }
      case DescriptorPlan::kCounted:
        if (!item.decision.has_value()) continue;  // store failed: fail open
        status.has_duration = true;
        if (item.decision->reason == DenyReason::kStoreUnavailable) {
          // Refused because the store is unreachable and the limit fails closed: the wait
          // is the outage's (when the store may answer again), not the window's.
          status.reset_seconds = DurationSeconds(item.decision->retry_after_micros);
          if (!item.rule_shadow && answer.unavailable_limit == nullptr) {
            answer.unavailable_limit = item.limit;
          }
        } else {
          status.reset_seconds = DurationSeconds(item.decision->reset_after_micros);
        }
        // A report (a charge, always applied) is over the limit when it left a debt.
        if ((!item.decision->allowed || (item.report && item.decision->debt > 0)) &&
            !item.rule_shadow) {
          // As envoyproxy/ratelimit: an over-limit descriptor has nothing left for this
          // request, whatever a smaller one could still take.
          status.code = RateLimitResponse::OVER_LIMIT;
          status.limit_remaining = 0;
        } else {
          status.limit_remaining = ClampUint32(item.decision->remaining);
        }
        break;
    }
    status.has_current_limit = true;
    status.requests_per_unit = item.requests_per_unit;
    status.unit = WireUnit(item.unit);
    if (item.rule != nullptr) status.name = item.rule->rate_limit.name;
    const bool refused = status.code == RateLimitResponse::OVER_LIMIT;
    if (item.quota) {
      ++quota_descriptors;
      quota_over_limit += refused ? 1 : 0;
    } else {
      over_limit |= refused;
    }
    if (answer.least_remaining < 0 ||
        status.limit_remaining < answer.statuses[answer.least_remaining].limit_remaining) {
      answer.least_remaining = static_cast<int>(i);
    }
  }
  // As envoyproxy/ratelimit: quota-mode descriptors refuse the request only all together.
  over_limit |= quota_descriptors > 0 && quota_over_limit == quota_descriptors;
  answer.overall_code =
      over_limit && !plan.global_shadow ? RateLimitResponse::OVER_LIMIT : RateLimitResponse::OK;
  return answer;
}

// The RateLimit-* headers of the status that speaks for the request: (name, value).
template <typename Each>
void ForEachHeader(const Answer& answer, Each each) {
  if (answer.least_remaining < 0) return;
  const StatusAnswer& status = answer.statuses[answer.least_remaining];
  auto view = [](const absl::AlphaNum& number) {
    return std::string_view(number.data(), number.size());
  };
  each(kLimitHeader, view(absl::AlphaNum(status.requests_per_unit)));
  each(kRemainingHeader, view(absl::AlphaNum(status.limit_remaining)));
  each(kResetHeader, view(absl::AlphaNum(status.reset_seconds)));
}

}  // namespace

void RenderRateLimitResponse(const RlsPlan& plan, int64_t now_micros, bool headers,
                             RateLimitResponse* response) {
  const Answer answer = Decide(plan, now_micros);
  for (const StatusAnswer& decided : answer.statuses) {
    DescriptorStatus* status = response->add_statuses();
    status->set_code(decided.code);
    if (decided.has_current_limit) {
      RateLimitResponse::RateLimit* limit = status->mutable_current_limit();
      limit->set_requests_per_unit(decided.requests_per_unit);
      limit->set_unit(decided.unit);
      limit->set_name(std::string(decided.name));
    }
    status->set_limit_remaining(decided.limit_remaining);
    if (decided.has_duration) {
      status->mutable_duration_until_reset()->set_seconds(decided.reset_seconds);
    }
  }
  response->set_overall_code(answer.overall_code);
  if (plan.dynamic_metadata.has_value()) {
    google::protobuf::Struct* metadata = response->mutable_dynamic_metadata();
    *metadata = *plan.dynamic_metadata;
    google::protobuf::Struct passed;
    for (size_t i = 0; i < plan.descriptors.size(); ++i) {
      const PlannedDescriptor& item = plan.descriptors[i];
      if (item.rule == nullptr || item.rule->metadata_json.empty() ||
          item.plan == DescriptorPlan::kUnlimited || item.plan == DescriptorPlan::kReplaced ||
          answer.statuses[i].code != RateLimitResponse::OK) {
        continue;
      }
      google::protobuf::Struct rule_metadata;
      if (!google::protobuf::util::JsonStringToMessage(item.rule->metadata_json, &rule_metadata)
               .ok()) {
        continue;  // the config layer wrote it: cannot happen
      }
      MergeMetadata(rule_metadata, passed);
    }
    if (passed.fields_size() > 0) {
      *(*metadata->mutable_fields())["metadata"].mutable_struct_value() = std::move(passed);
    }
  }
  if (answer.unavailable_limit != nullptr) {
    // The reason travels in the response's dynamic metadata (Envoy adds it to the request's
    // metadata, for logs); POST /json answers 503 for it.
    auto& fields = *response->mutable_dynamic_metadata()->mutable_fields();
    fields[std::string(kReasonMetadataKey)].set_string_value(std::string(kStoreUnavailableReason));
    fields[std::string(kLimitMetadataKey)].set_string_value(answer.unavailable_limit->name);
  }
  if (headers) {
    ForEachHeader(answer, [response](std::string_view name, std::string_view value) {
      auto* header = response->add_response_headers_to_add();
      header->set_key(std::string(name));
      header->set_value(std::string(value));
    });
  }
}

RlsOutcome DecideOutcome(const RlsPlan& plan, int64_t now_micros) {
  const Answer answer = Decide(plan, now_micros);
  RlsOutcome outcome;
  outcome.overall_code = answer.overall_code;
  for (const StatusAnswer& status : answer.statuses) {
    outcome.over_limit_descriptors += status.code == RateLimitResponse::OVER_LIMIT ? 1 : 0;
  }
  return outcome;
}

bool RefusedForStoreUnavailable(const RateLimitResponse& response) {
  if (response.overall_code() != RateLimitResponse::OVER_LIMIT) return false;
  const auto& fields = response.dynamic_metadata().fields();
  const auto reason = fields.find(std::string(kReasonMetadataKey));
  return reason != fields.end() && reason->second.string_value() == kStoreUnavailableReason;
}

}  // namespace tollgate::server
