// Copyright tollgate authors.
#include "tests/support/rlqs_envoy.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace tollgate::testing {

namespace rlqs = envoy::service::rate_limit_quota::v3;
using envoy::type::v3::RateLimitStrategy;

struct SimulatedEnvoy::Bucket {
  int64_t allowed = 0;  // since its last report
  int64_t denied = 0;
  Clock::time_point last_report;
  // The active assignment.
  bool has_action = false;
  std::string strategy;
  bool expires = false;
  Clock::time_point expires_at;
  // Its token bucket (strategy "token_bucket"), as Envoy's AtomicTokenBucketImpl: starts full,
  // refills continuously at tokens_per_fill / whole seconds of fill_interval.
  uint32_t max_tokens = 0;
  uint32_t tokens_per_fill = 0;
  int64_t fill_seconds = 0;
  int32_t fill_nanos = 0;
  double tokens = 0;
  Clock::time_point refilled;
};

SimulatedEnvoy::SimulatedEnvoy(int port, SimulatedEnvoyOptions options)
    : options_(std::move(options)) {
  grpc::ChannelArguments arguments;
  arguments.SetInt("grpc.use_local_subchannel_pool", 1);  // a connection of its own
  channel_ = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                       grpc::InsecureChannelCredentials(), arguments);
  stub_ = rlqs::RateLimitQuotaService::NewStub(channel_);
  reporter_ = std::thread([this] { ReportLoop(); });
}

SimulatedEnvoy::~SimulatedEnvoy() { Stop(); }

void SimulatedEnvoy::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  stop_.Notify();
  if (reporter_.joinable()) reporter_.join();
  std::vector<std::thread> readers;
  {
    absl::MutexLock lock(&write_mu_);
    if (context_ != nullptr) context_->TryCancel();
    readers.swap(readers_);
  }
  for (std::thread& reader : readers) reader.join();
}

void SimulatedEnvoy::StopReporting() {
  absl::MutexLock lock(&mu_);
  silent_ = true;
}

void SimulatedEnvoy::DropStream() {
  absl::MutexLock lock(&write_mu_);
  if (context_ != nullptr) context_->TryCancel();
}

bool SimulatedEnvoy::Decide(Bucket& bucket, Clock::time_point now) {
  if (bucket.has_action && bucket.expires && now >= bucket.expires_at) bucket.has_action = false;
  if (!bucket.has_action) return options_.no_assignment_allows;
  if (bucket.strategy == "deny_all") return false;
  if (bucket.strategy != "token_bucket") return true;  // allow_all; requests_per_time_unit
  const double rate = bucket.fill_seconds > 0 ? static_cast<double>(bucket.tokens_per_fill) /
                                                    static_cast<double>(bucket.fill_seconds)
                                              : 0.0;
  const double elapsed = std::chrono::duration<double>(now - bucket.refilled).count();
  bucket.tokens = std::min<double>(bucket.max_tokens, bucket.tokens + elapsed * rate);
  bucket.refilled = now;
  if (bucket.tokens < 1) return false;
  bucket.tokens -= 1;
  return true;
}

bool SimulatedEnvoy::Request(const RlqsBucket& id) {
  const Clock::time_point now = Clock::now();
  bool created = false;
  bool allowed = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = buckets_.find(id);
    if (it == buckets_.end()) {
      it = buckets_.emplace(id, std::make_unique<Bucket>()).first;
      it->second->last_report = now;
      created = true;
    }
    Bucket& bucket = *it->second;
    allowed = Decide(bucket, now);
    (allowed ? bucket.allowed : bucket.denied) += 1;
    RlqsBucketCounts& counts = counts_[id];
    (allowed ? counts.allowed : counts.denied) += 1;
  }
  if (created) SendReport({{id, true}});  // the first report of a bucket subscribes to it
  return allowed;
}

void SimulatedEnvoy::ReportLoop() {
  while (!stop_.WaitForNotificationWithTimeout(absl::FromChrono(options_.reporting_interval))) {
    SendReport({});
  }
}

void SimulatedEnvoy::SendReport(const std::map<RlqsBucket, bool>& only) {
  rlqs::RateLimitQuotaUsageReports reports;
  reports.set_domain(options_.domain);
  {
    absl::MutexLock lock(&mu_);
    if (stop_.HasBeenNotified() || silent_) return;
    const Clock::time_point now = Clock::now();
    for (auto& [id, bucket] : buckets_) {
      if (!only.empty() && !only.contains(id)) continue;
      auto* usage = reports.add_bucket_quota_usages();
      for (const auto& [key, value] : id)
        (*usage->mutable_bucket_id()->mutable_bucket())[key] = value;
      usage->set_num_requests_allowed(static_cast<uint64_t>(bucket->allowed));
      usage->set_num_requests_denied(static_cast<uint64_t>(bucket->denied));
      usage->mutable_time_elapsed()->set_seconds(
          std::chrono::duration_cast<std::chrono::seconds>(now - bucket->last_report).count());
      bucket->allowed = bucket->denied = 0;
      bucket->last_report = now;
    }
  }
  if (reports.bucket_quota_usages_size() == 0) return;
  absl::MutexLock lock(&write_mu_);
  if (!EnsureStream()) return;
  stream_->Write(reports);
}

bool SimulatedEnvoy::EnsureStream() {
  if (stream_open_) return true;
  if (stop_.HasBeenNotified()) return false;
  context_ = std::make_shared<grpc::ClientContext>();
  stream_ = stub_->StreamRateLimitQuotas(context_.get());
  if (stream_ == nullptr) return false;
  stream_open_ = true;
  {
    absl::MutexLock lock(&mu_);
    ++streams_opened_;
    last_stream_status_.clear();
  }
  readers_.emplace_back(
      [this, context = context_, stream = stream_] { ReadLoop(context, stream); });
  return true;
}

// `context` is the call's: held here as long as its stream is read.
void SimulatedEnvoy::ReadLoop(const std::shared_ptr<grpc::ClientContext>& context,
                              const std::shared_ptr<RlqsClientStream>& stream) {
  rlqs::RateLimitQuotaResponse response;
  while (stream->Read(&response)) Apply(response);
  absl::MutexLock lock(&write_mu_);
  const grpc::Status status = stream->Finish();
  if (stream_ == stream) stream_open_ = false;
  absl::MutexLock counts(&mu_);
  last_stream_status_ =
      status.ok() ? "OK" : absl::StrCat(status.error_code(), ": ", status.error_message());
}

void SimulatedEnvoy::Apply(const rlqs::RateLimitQuotaResponse& response) {
  const Clock::time_point now = Clock::now();
  absl::MutexLock lock(&mu_);
  ++responses_;
  for (const auto& action : response.bucket_action()) {
    RlqsBucket id(action.bucket_id().bucket().begin(), action.bucket_id().bucket().end());
    auto it = buckets_.find(id);
    if (it == buckets_.end()) continue;  // Envoy logs an unexpected bucket and goes on
    RlqsBucketCounts& counts = counts_[id];
    if (action.has_abandon_action()) {
      ++counts.abandons;
      buckets_.erase(it);
      continue;
    }
    if (!action.has_quota_assignment_action()) continue;
    const auto& assignment = action.quota_assignment_action();
    const RateLimitStrategy& strategy = assignment.rate_limit_strategy();
    Bucket& bucket = *it->second;
    ++counts.assignments;
    counts.last_ttl_seconds = assignment.assignment_time_to_live().seconds();
    switch (strategy.strategy_case()) {
      case RateLimitStrategy::kBlanketRule:
        bucket.strategy =
            strategy.blanket_rule() == RateLimitStrategy::DENY_ALL ? "deny_all" : "allow_all";
        if (bucket.strategy == "deny_all") {
          counts.grants.push_back({std::chrono::system_clock::now(), 0});
        }
        break;
      case RateLimitStrategy::kTokenBucket: {
        const auto& token_bucket = strategy.token_bucket();
        const bool same = bucket.has_action && bucket.strategy == "token_bucket" &&
                          bucket.max_tokens == token_bucket.max_tokens() &&
                          bucket.tokens_per_fill == token_bucket.tokens_per_fill().value() &&
                          bucket.fill_nanos == token_bucket.fill_interval().nanos();
        bucket.strategy = "token_bucket";
        if (!same) {
          bucket.max_tokens = token_bucket.max_tokens();
          bucket.tokens_per_fill = token_bucket.tokens_per_fill().value();
          bucket.fill_seconds = token_bucket.fill_interval().seconds();
          bucket.fill_nanos = token_bucket.fill_interval().nanos();
          bucket.tokens = bucket.max_tokens;
          bucket.refilled = now;
          counts.grants.push_back({std::chrono::system_clock::now(), token_bucket.max_tokens()});
        }
        counts.last_max_tokens = token_bucket.max_tokens();
        counts.max_tokens_seen =
            std::max<int64_t>(counts.max_tokens_seen, token_bucket.max_tokens());
        break;
      }
      case RateLimitStrategy::kRequestsPerTimeUnit:
        bucket.strategy = "rptu";
        break;
      default:
        continue;
    }
    counts.last_strategy = bucket.strategy;
    bucket.has_action = true;
    bucket.expires = assignment.has_assignment_time_to_live();
    bucket.expires_at = now + std::chrono::seconds(assignment.assignment_time_to_live().seconds());
  }
}

RlqsBucketCounts SimulatedEnvoy::counts(const RlqsBucket& bucket) const {
  absl::MutexLock lock(&mu_);
  auto it = counts_.find(bucket);
  return it == counts_.end() ? RlqsBucketCounts{} : it->second;
}

bool SimulatedEnvoy::HasBucket(const RlqsBucket& bucket) const {
  absl::MutexLock lock(&mu_);
  return buckets_.contains(bucket);
}

int64_t SimulatedEnvoy::streams_opened() const {
  absl::MutexLock lock(&mu_);
  return streams_opened_;
}

std::string SimulatedEnvoy::last_stream_status() const {
  absl::MutexLock lock(&mu_);
  return last_stream_status_;
}

int64_t SimulatedEnvoy::responses() const {
  absl::MutexLock lock(&mu_);
  return responses_;
}

}  // namespace tollgate::testing
