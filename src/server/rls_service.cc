// Copyright tollgate authors.
#include "src/server/rls_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "google/protobuf/arena.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/message_allocator.h"
#include "src/config/descriptor_matcher.h"
#include "src/server/json_errors.h"
#include "src/server/metrics.h"
#include "src/server/ratelimit_headers.h"
#include "tollgate/limiter.h"
#include "tollgate/memory_store.h"

namespace tollgate::server {
namespace {

using Code = RateLimitResponse::Code;
using DescriptorStatus = RateLimitResponse::DescriptorStatus;
using RateLimitDescriptor = envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;

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

// The store key of a descriptor: "k=v,k=v" with '%', ',' and '=' percent-encoded, so two
// different entry lists never give the same key.
void AppendEscaped(std::string& out, const std::string& text) {
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

std::string DescriptorKey(const RateLimitDescriptor& descriptor) {
  std::string key;
  for (const auto& entry : descriptor.entries()) {
    if (!key.empty()) key += ',';
    AppendEscaped(key, entry.key());
    key += '=';
    AppendEscaped(key, entry.value());
  }
  return key;
}

void SetDuration(int64_t micros, google::protobuf::Duration* duration) {
  micros = std::max<int64_t>(micros, 0);
  duration->set_seconds(micros / 1'000'000);
  duration->set_nanos(static_cast<int32_t>(micros % 1'000'000) * 1000);
}

uint32_t ClampUint32(int64_t value) {
  return static_cast<uint32_t>(std::clamp<int64_t>(value, 0, UINT32_MAX));
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  // absl::StatusCode numbers the codes as gRPC does.
  const absl::string_view message = status.message();
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(message.data(), message.size()));
}

}  // namespace

struct RlsService::Snapshot {
  std::shared_ptr<const DescriptorMatcher> matcher;
  std::shared_ptr<Limiter> limiter;
  // Limits made for per-descriptor overrides, by (requests_per_unit, unit).
  absl::flat_hash_map<std::pair<uint32_t, int>, std::string> override_names;
  std::vector<Limit> override_limits;
};

// What one descriptor of a request turned into.
enum class Plan {
  kNoRule,     // OK, nothing counted
  kUnlimited,  // OK, nothing counted, remaining = max
  kReplaced,   // another matched rule replaces it: OK, nothing counted
  kBlocked,    // requests_per_unit 0: always over the limit
  kCounted,    // checked against the limiter
};

// One request in flight. Shared by the callbacks of its (at most two) limiter calls.
struct RlsService::Call {
  struct Item {
    Plan plan = Plan::kNoRule;
    const EnvoyRule* rule = nullptr;  // null for an override
    uint32_t requests_per_unit = 0;
    EnvoyUnit unit = EnvoyUnit::kSecond;
    bool rule_shadow = false;
    // A refusal refuses the request (not shadow, neither the rule's nor the global one).
    bool enforced = true;
    CheckRequest check;
    std::optional<Decision> decision;
  };

  std::shared_ptr<const Snapshot> snapshot;
  // The matcher the rules of `items` point into; a reload may give `snapshot` a newer one.
  std::shared_ptr<const DescriptorMatcher> matcher;
  std::vector<Item> items;
  bool global_shadow = false;
  bool headers = true;
  Clock* clock = nullptr;
  Metrics* metrics = nullptr;
  // When the call began, for the duration metric (set when `metrics` is).
  std::chrono::steady_clock::time_point start;
  // Where Finish writes the answer; owned by the caller.
  RateLimitResponse* response = nullptr;
  absl::AnyInvocable<void(absl::Status) &&> done;

  // Records the call's duration and hands `status` to `done`.
  void Complete(absl::Status status) {
    if (metrics != nullptr) {
      metrics->ObserveCheckDuration(CheckApi::kEnvoy,
                                    std::chrono::duration_cast<std::chrono::microseconds>(
                                        std::chrono::steady_clock::now() - start)
                                        .count());
    }
    std::move(done)(std::move(status));
  }

  // Indices of kCounted items in the batch sent to the limiter.
  std::vector<size_t> Counted() const {
    std::vector<size_t> counted;
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].plan == Plan::kCounted) counted.push_back(i);
    }
    return counted;
  }

  void Check(std::shared_ptr<Call> self, std::vector<size_t> batch, bool peek, bool first) {
    std::vector<CheckRequest> requests;
    requests.reserve(batch.size());
    for (size_t i : batch) {
      requests.push_back(items[i].check);
      if (peek) requests.back().cost = 0;
    }
    // Held here: the callback may drop the last reference to the Call (and its snapshot)
    // before CheckAllAsync returns.
    const std::shared_ptr<Limiter> limiter = snapshot->limiter;
    limiter->CheckAllAsync(
        std::move(requests), [self = std::move(self), batch = std::move(batch), first,
                              peek](absl::StatusOr<MultiDecision> result) mutable {
          Call& call = *self;
          if (!result.ok()) {
            if (call.metrics != nullptr && !peek) {
              for (size_t i : batch) call.metrics->RecordCheckError(call.items[i].check.limit);
            }
            // Fail open for now; the resilience issue adds per-rule policies.
            spdlog::warn("rls: store failed, answering OK for {} descriptor(s): {}", batch.size(),
                         std::string(result.status().message()));
            for (size_t i : batch) call.items[i].decision.reset();
            call.Finish();
            return;
          }
          bool enforced_refusal = false;
          std::vector<size_t> passing;
          for (size_t j = 0; j < batch.size(); ++j) {
            Item& item = call.items[batch[j]];
            item.decision = result->decisions[j];
            if (item.decision->allowed) {
              passing.push_back(batch[j]);
            } else {
              enforced_refusal |= item.enforced;
            }
          }
          // A batch refused only by shadow rules: count what passes on its own, so shadow
          // rules never change what is counted for the others.
          const bool recheck = first && !result->allowed && !enforced_refusal && !passing.empty();
          // Peeks count nothing; a recheck records the passing items when it answers.
          if (call.metrics != nullptr && !peek) {
            for (size_t i : batch) {
              const Item& item = call.items[i];
              if (recheck && item.decision->allowed) continue;
              call.metrics->RecordDecision(item.check.limit, *item.decision, !item.enforced);
            }
          }
          if (recheck) {
            call.Check(std::move(self), std::move(passing), /*peek=*/false, /*first=*/false);
            return;
          }
          call.Finish();
        });
  }

  void Finish() {
    RateLimitResponse& response = *this->response;
    bool over_limit = false;
    const DescriptorStatus* least_remaining = nullptr;
    for (Item& item : items) {
      DescriptorStatus* status = response.add_statuses();
      status->set_code(RateLimitResponse::OK);
      switch (item.plan) {
        case Plan::kNoRule:
        case Plan::kReplaced:
          continue;
        case Plan::kUnlimited:
          status->set_limit_remaining(UINT32_MAX);
          continue;
        case Plan::kBlocked: {
          const int64_t window_micros = EnvoyUnitSeconds(item.unit) * 1'000'000;
          const int64_t now_micros = clock->NowMicros();
          SetDuration(window_micros - (now_micros % window_micros + window_micros) % window_micros,
                      status->mutable_duration_until_reset());
          if (!item.rule_shadow) status->set_code(RateLimitResponse::OVER_LIMIT);
          break;
        }
        case Plan::kCounted:
          if (!item.decision.has_value()) continue;  // store failed: fail open
          status->set_limit_remaining(ClampUint32(item.decision->remaining));
          SetDuration(item.decision->reset_after_micros, status->mutable_duration_until_reset());
          if (!item.decision->allowed && !item.rule_shadow) {
            status->set_code(RateLimitResponse::OVER_LIMIT);
          }
          break;
      }
      RateLimitResponse::RateLimit* limit = status->mutable_current_limit();
      limit->set_requests_per_unit(item.requests_per_unit);
      limit->set_unit(WireUnit(item.unit));
      if (item.rule != nullptr) limit->set_name(item.rule->rate_limit.name);
      over_limit |= status->code() == RateLimitResponse::OVER_LIMIT;
      if (least_remaining == nullptr ||
          status->limit_remaining() < least_remaining->limit_remaining()) {
        least_remaining = status;
      }
    }
    response.set_overall_code(over_limit && !global_shadow ? RateLimitResponse::OVER_LIMIT
                                                           : RateLimitResponse::OK);
    if (headers && least_remaining != nullptr) {
      auto add = [&](std::string_view name, int64_t value) {
        auto* header = response.add_response_headers_to_add();
        header->set_key(std::string(name));
        header->set_value(absl::StrCat(value));
      };
      const int64_t reset_micros = least_remaining->duration_until_reset().seconds() * 1'000'000 +
                                   least_remaining->duration_until_reset().nanos() / 1000;
      add(kLimitHeader, least_remaining->current_limit().requests_per_unit());
      add(kRemainingHeader, least_remaining->limit_remaining());
      add(kResetHeader, CeilSeconds(reset_micros));
    }
    Complete(absl::OkStatus());
  }
};

RlsService::RlsService(RlsServiceOptions options, std::shared_ptr<Store> store)
    : options_(std::move(options)), store_(std::move(store)) {}

RlsService::~RlsService() = default;

absl::StatusOr<std::unique_ptr<RlsService>> RlsService::Create(RlsServiceOptions options) {
  if (options.max_descriptors < 1) {
    return absl::InvalidArgumentError("max_descriptors must be >= 1");
  }
  std::shared_ptr<Store> store = options.store;
  if (store == nullptr) {
    MemoryStoreOptions memory_options;
    memory_options.clock = options.clock;
    absl::StatusOr<std::unique_ptr<MemoryStore>> memory = MemoryStore::Create(memory_options);
    if (!memory.ok()) return memory.status();
    store = std::move(*memory);
  }
  std::vector<EnvoyDomainConfig> domains = std::move(options.domains);
  options.domains.clear();
  std::unique_ptr<RlsService> service(new RlsService(std::move(options), std::move(store)));
  if (absl::Status status = service->UpdateDomains(std::move(domains)); !status.ok()) {
    return status;
  }
  return service;
}

absl::Status RlsService::UpdateDomains(std::vector<EnvoyDomainConfig> domains) {
  absl::StatusOr<std::unique_ptr<DescriptorMatcher>> matcher =
      DescriptorMatcher::Create(std::move(domains));
  if (!matcher.ok()) return matcher.status();
  LimiterOptions limiter_options;
  limiter_options.limits = (*matcher)->limits();
  limiter_options.store = store_;
  limiter_options.clock = options_.clock;
  absl::StatusOr<std::unique_ptr<Limiter>> limiter = Limiter::Create(std::move(limiter_options));
  if (!limiter.ok()) return limiter.status();
  if (options_.metrics != nullptr) options_.metrics->RegisterLimits((*matcher)->limits());
  auto snapshot = std::make_shared<Snapshot>();
  snapshot->matcher = std::move(*matcher);
  snapshot->limiter = std::move(*limiter);
  absl::MutexLock lock(&mu_);
  snapshot_ = std::move(snapshot);
  return absl::OkStatus();
}

std::shared_ptr<const RlsService::Snapshot> RlsService::snapshot() const {
  absl::MutexLock lock(&mu_);
  return snapshot_;
}

std::shared_ptr<const RlsService::Snapshot> RlsService::WithOverride(uint32_t requests_per_unit,
                                                                     EnvoyUnit unit,
                                                                     std::string* limit_name) {
  const std::pair<uint32_t, int> shape(requests_per_unit, static_cast<int>(unit));
  absl::MutexLock lock(&mu_);
  if (auto it = snapshot_->override_names.find(shape); it != snapshot_->override_names.end()) {
    *limit_name = it->second;
    return snapshot_;
  }
  if (static_cast<int>(snapshot_->override_limits.size()) >= options_.max_override_limits) {
    return nullptr;
  }
  // One limit per shape, shared by all domains (the key carries the domain). The Limiter is
  // rebuilt with it; counters live in the store, so nothing is lost.
  Limit limit;
  const std::string_view unit_name = EnvoyUnitName(unit);
  limit.name = absl::StrCat("override:", requests_per_unit, "/",
                            absl::string_view(unit_name.data(), unit_name.size()));
  limit.numbers = EnvoyLimitNumbers(Algorithm::kFixedWindow, requests_per_unit, unit);
  if (snapshot_->limiter->FindLimit(limit.name) != nullptr) return nullptr;
  auto next = std::make_shared<Snapshot>(*snapshot_);
  next->override_limits.push_back(limit);
  next->override_names.emplace(shape, limit.name);
  LimiterOptions limiter_options;
  limiter_options.limits = next->matcher->limits();
  limiter_options.limits.insert(limiter_options.limits.end(), next->override_limits.begin(),
                                next->override_limits.end());
  limiter_options.store = store_;
  limiter_options.clock = options_.clock;
  absl::StatusOr<std::unique_ptr<Limiter>> limiter = Limiter::Create(std::move(limiter_options));
  if (!limiter.ok()) return nullptr;
  if (options_.metrics != nullptr) options_.metrics->RegisterLimitNames({limit.name});
  next->limiter = std::move(*limiter);
  snapshot_ = std::move(next);
  *limit_name = limit.name;
  return snapshot_;
}

void RlsService::ShouldRateLimit(const RateLimitRequest& request, RlsCallback done) {
  auto response = std::make_unique<RateLimitResponse>();
  RateLimitResponse* out = response.get();
  ShouldRateLimit(
      request, out,
      [response = std::move(response), done = std::move(done)](absl::Status status) mutable {
        if (!status.ok()) {
          std::move(done)(std::move(status));
          return;
        }
        std::move(done)(std::move(*response));
      });
}

void RlsService::ShouldRateLimit(const RateLimitRequest& request, RateLimitResponse* response,
                                 absl::AnyInvocable<void(absl::Status) &&> done) {
  if (request.domain().empty()) {
    std::move(done)(absl::InvalidArgumentError("rate limit domain must not be empty"));
    return;
  }
  if (request.descriptors().empty()) {
    std::move(done)(absl::InvalidArgumentError("rate limit descriptor list must not be empty"));
    return;
  }
  if (request.descriptors_size() > options_.max_descriptors) {
    std::move(done)(absl::InvalidArgumentError(
        absl::StrCat("rate limit request has ", request.descriptors_size(),
                     " descriptors, at most ", options_.max_descriptors, " are accepted")));
    return;
  }
  auto call = std::make_shared<Call>();
  call->metrics = options_.metrics;
  if (call->metrics != nullptr) call->start = std::chrono::steady_clock::now();
  call->response = response;
  call->snapshot = snapshot();
  call->global_shadow = options_.shadow_mode;
  call->headers = options_.response_headers;
  call->clock = options_.clock != nullptr ? options_.clock : &SystemClock();
  call->done = std::move(done);
  call->matcher = call->snapshot->matcher;
  const DescriptorMatcher& matcher = *call->matcher;
  if (!matcher.HasDomain(request.domain())) {
    call->Finish();  // as envoyproxy/ratelimit: an unknown domain limits nothing
    return;
  }

  const int64_t request_hits = request.hits_addend() == 0 ? 1 : request.hits_addend();
  std::vector<DescriptorEntry> entries;
  call->items.resize(request.descriptors_size());
  absl::flat_hash_set<std::string> replaced;
  for (int i = 0; i < request.descriptors_size(); ++i) {
    const RateLimitDescriptor& descriptor = request.descriptors(i);
    Call::Item& item = call->items[i];
    entries.clear();
    for (const auto& entry : descriptor.entries()) {
      if (entry.key().empty()) {
        call->Complete(absl::InvalidArgumentError(
            absl::StrCat("descriptor ", i, ": an entry has an empty key")));
        return;
      }
      entries.push_back(DescriptorEntry{entry.key(), entry.value()});
    }
    item.check.cost =
        descriptor.has_hits_addend()
            ? static_cast<int64_t>(std::min<uint64_t>(descriptor.hits_addend().value(), INT64_MAX))
            : request_hits;
    item.check.key = DescriptorKey(descriptor);

    std::optional<EnvoyUnit> override_unit;
    if (descriptor.has_limit()) override_unit = UnitOfOverride(descriptor.limit().unit());
    if (override_unit.has_value()) {
      // As envoyproxy/ratelimit: an override applies whether or not a rule matches, is never
      // in shadow mode and takes no part in `replaces`.
      item.requests_per_unit = descriptor.limit().requests_per_unit();
      item.unit = *override_unit;
      if (item.requests_per_unit == 0) {
        item.plan = Plan::kBlocked;
        continue;
      }
      std::string limit_name;
      std::shared_ptr<const Snapshot> with_override =
          WithOverride(item.requests_per_unit, item.unit, &limit_name);
      if (with_override != nullptr) {
        call->snapshot = std::move(with_override);
        item.plan = Plan::kCounted;
        item.check.limit = std::move(limit_name);
        item.check.key = absl::StrCat(request.domain(), "|", item.check.key);
        continue;
      }
      spdlog::warn("rls: too many distinct limit overrides; ignoring {}/{}", item.requests_per_unit,
                   EnvoyUnitName(item.unit));
    }

    const EnvoyRule* rule = matcher.Match(request.domain(), entries);
    if (rule == nullptr) continue;  // kNoRule
    item.rule = rule;
    item.rule_shadow = rule->shadow_mode;
    item.requests_per_unit = rule->rate_limit.requests_per_unit;
    item.unit = rule->rate_limit.unit;
    for (const std::string& name : rule->rate_limit.replaces) replaced.insert(name);
    if (rule->rate_limit.unlimited) {
      item.plan = Plan::kUnlimited;
    } else if (rule->limit_name.empty()) {
      item.plan = Plan::kBlocked;
    } else {
      item.plan = Plan::kCounted;
      item.check.limit = rule->limit_name;
    }
  }

  bool blocked = false;
  for (Call::Item& item : call->items) {
    if (item.rule != nullptr && !item.rule->rate_limit.name.empty() &&
        replaced.contains(item.rule->rate_limit.name)) {
      item.plan = Plan::kReplaced;
    }
    item.enforced = !item.rule_shadow && !call->global_shadow;
    if (item.plan == Plan::kCounted && item.check.key.size() > kMaxKeyBytes) {
      call->Complete(absl::InvalidArgumentError(absl::StrCat("a descriptor's entries are ",
                                                             item.check.key.size(),
                                                             " bytes, more than ", kMaxKeyBytes)));
      return;
    }
    blocked |= item.plan == Plan::kBlocked && item.enforced;
  }

  std::vector<size_t> counted = call->Counted();
  if (counted.empty()) {
    call->Finish();
    return;
  }
  // When a block-list rule refuses the request, nothing is counted (all or nothing); the
  // others are only looked at, for their statuses.
  call->Check(call, std::move(counted), /*peek=*/blocked, /*first=*/!blocked);
}

absl::StatusOr<RateLimitResponse> RlsService::ShouldRateLimitSync(const RateLimitRequest& request) {
  absl::Notification answered;
  absl::StatusOr<RateLimitResponse> result;
  ShouldRateLimit(request, [&](absl::StatusOr<RateLimitResponse> response) {
    result = std::move(response);
    answered.Notify();
  });
  answered.WaitForNotification();
  return result;
}

void HandleRlsJson(RlsService& service, std::string_view json_body,
                   absl::AnyInvocable<void(RlsJsonReply) &&> done) {
  auto error_reply = [](int http_status, std::string_view message) {
    // Built by protobuf's JSON printer, so the message is escaped correctly.
    google::protobuf::Struct error;
    (*error.mutable_fields())["error"].set_string_value(std::string(message));
    RlsJsonReply reply{http_status, ""};
    if (!google::protobuf::util::MessageToJsonString(error, &reply.body).ok()) {
      reply.body = R"({"error":"invalid request"})";
    }
    return reply;
  };
  RateLimitRequest request;
  google::protobuf::util::JsonParseOptions parse_options;
  parse_options.ignore_unknown_fields = false;
  const auto parsed =
      google::protobuf::util::JsonStringToMessage(std::string(json_body), &request, parse_options);
  if (!parsed.ok()) {
    std::move(done)(
        error_reply(400, RlsJsonParseErrorMessage(json_body, std::string(parsed.message()))));
    return;
  }
  service.ShouldRateLimit(request, [done = std::move(done), error_reply](
                                       absl::StatusOr<RateLimitResponse> response) mutable {
    if (!response.ok()) {
      const absl::string_view message = response.status().message();
      std::move(done)(
          error_reply(response.status().code() == absl::StatusCode::kInvalidArgument ? 400 : 500,
                      std::string_view(message.data(), message.size())));
      return;
    }
    RlsJsonReply reply;
    reply.http_status = response->overall_code() == RateLimitResponse::OVER_LIMIT ? 429 : 200;
    if (!google::protobuf::util::MessageToJsonString(*response, &reply.body).ok()) {
      std::move(done)(error_reply(500, "cannot print the response"));
      return;
    }
    std::move(done)(std::move(reply));
  });
}

// ---- gRPC ----------------------------------------------------------------------------------

namespace {

// The request and response of one call on a protobuf arena whose first block is part of this
// object, so that parsing an Envoy request and building its answer take one allocation (this
// object) instead of one per message and string.
class ArenaMessages final : public grpc::MessageHolder<RateLimitRequest, RateLimitResponse> {
 public:
  ArenaMessages() : arena_(Options(block_, sizeof(block_))) {
    set_request(google::protobuf::Arena::CreateMessage<RateLimitRequest>(&arena_));
    set_response(google::protobuf::Arena::CreateMessage<RateLimitResponse>(&arena_));
  }
  void Release() override { delete this; }

 private:
  static google::protobuf::ArenaOptions Options(char* block, size_t size) {
    google::protobuf::ArenaOptions options;
    options.initial_block = block;
    options.initial_block_size = size;
    return options;
  }

  // A one-descriptor request and its answer (with the RateLimit-* headers) need about 1 KiB;
  // a larger call gets further blocks from the heap.
  alignas(std::max_align_t) char block_[2048];
  google::protobuf::Arena arena_;
};

class ArenaMessageAllocator final
    : public grpc::MessageAllocator<RateLimitRequest, RateLimitResponse> {
 public:
  grpc::MessageHolder<RateLimitRequest, RateLimitResponse>* AllocateMessages() override {
    return new ArenaMessages();
  }
};

}  // namespace

class RlsServer::GrpcService final
    : public envoy::service::ratelimit::v3::RateLimitService::CallbackService {
 public:
  explicit GrpcService(RlsService* service) : service_(service) {
    SetMessageAllocatorFor_ShouldRateLimit(&allocator_);
  }

  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* context,
                                            const RateLimitRequest* request,
                                            RateLimitResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    // The answer is written into `response` (on this call's arena) in place; the callback may
    // run before we return.
    service_->ShouldRateLimit(*request, response, [reactor](const absl::Status& status) {
      reactor->Finish(status.ok() ? grpc::Status::OK : ToGrpcStatus(status));
    });
    return reactor;
  }

 private:
  RlsService* const service_;
  ArenaMessageAllocator allocator_;
};

absl::StatusOr<std::unique_ptr<RlsServer>> RlsServer::Start(RlsServerOptions options) {
  absl::StatusOr<std::unique_ptr<RlsService>> service =
      RlsService::Create(std::move(options.service));
  if (!service.ok()) return service.status();
  std::unique_ptr<RlsServer> server(new RlsServer());
  server->service_ = std::move(*service);
  server->grpc_service_ = std::make_unique<GrpcService>(server->service_.get());

  // A process-wide switch, read by every ServerBuilder built after it.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(), &server->port_);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  builder.RegisterService(server->grpc_service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("gRPC: cannot listen on ", options.address));
  }
  if (grpc::HealthCheckServiceInterface* health = server->server_->GetHealthCheckService()) {
    health->SetServingStatus(true);
  }
  spdlog::info("rls: listening for gRPC on {} (port {})", options.address, server->port_);
  return server;
}

RlsServer::~RlsServer() { Shutdown(); }

void RlsServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  if (server_ == nullptr) return;
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(false);
  }
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server_->Wait();
}

}  // namespace tollgate::server
