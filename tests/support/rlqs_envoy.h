// Copyright tollgate authors. A simulated Envoy for the Rate Limit Quota Service: what Envoy's
// rate_limit_quota HTTP filter does on the wire (source/extensions/filters/http/
// rate_limit_quota/ in Envoy), over real gRPC (grpc++'s generated stub), with its local
// decisions made here:
//
// - The first request of a bucket creates it, is decided by `no_assignment` (ALLOW_ALL unless
//   set to DENY_ALL), and is reported at once, alone, with time_elapsed 0; the stream opens
//   with the first bucket.
// - Every `reporting_interval`, every bucket is reported: requests allowed and denied since its
//   last report, time_elapsed in whole seconds (truncated), the domain in every message.
// - An assignment replaces the bucket's active one; a token_bucket that is equal (max_tokens,
//   tokens_per_fill, fill_interval) keeps the bucket Envoy holds, else a new bucket starts full
//   with max_tokens and refills tokens_per_fill per fill_interval read in whole seconds;
//   requests_per_time_unit is ignored (Envoy applies none). The time to live is read in whole
//   seconds; once it passes, the bucket goes back to `no_assignment`. AbandonAction forgets the
//   bucket (its next request starts it again).
// - When the stream ends, the next report opens a new one and reports every bucket on it.
//
// Thread-safe: Request may be called from any thread.
#ifndef TOLLGATE_TESTS_SUPPORT_RLQS_ENVOY_H_
#define TOLLGATE_TESTS_SUPPORT_RLQS_ENVOY_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "envoy/service/rate_limit_quota/v3/rlqs.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace tollgate::testing {

using RlqsBucket = std::map<std::string, std::string>;
using RlqsClientStream =
    grpc::ClientReaderWriter<envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports,
                             envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse>;

struct SimulatedEnvoyOptions {
  std::string domain = "tiffin";
  std::chrono::milliseconds reporting_interval{1000};
  // What a bucket without an active assignment decides.
  bool no_assignment_allows = true;
};

// A new assignment of a bucket: a token_bucket that replaced the one Envoy held (`tokens`, its
// max_tokens), or DENY_ALL (`tokens` 0); `at` is when it arrived, on the wall clock (the
// limits' windows are Redis', this host's).
struct RlqsGrant {
  std::chrono::system_clock::time_point at;
  int64_t tokens = 0;
};

// What one bucket has seen.
struct RlqsBucketCounts {
  int64_t allowed = 0;
  int64_t denied = 0;
  int64_t assignments = 0;  // quota assignments received
  int64_t abandons = 0;
  // The strategy of the last assignment: "token_bucket", "allow_all", "deny_all", "rptu".
  std::string last_strategy;
  int64_t last_max_tokens = 0;
  int64_t last_ttl_seconds = 0;
  int64_t max_tokens_seen = 0;    // the largest token bucket ever assigned
  std::vector<RlqsGrant> grants;  // oldest first
};

class SimulatedEnvoy {
 public:
  // Connects to 127.0.0.1:`port` (plaintext). The stream opens with the first bucket.
  SimulatedEnvoy(int port, SimulatedEnvoyOptions options);
  // Stops reporting and ends the stream (as an Envoy that goes away).
  ~SimulatedEnvoy();
  SimulatedEnvoy(const SimulatedEnvoy&) = delete;
  SimulatedEnvoy& operator=(const SimulatedEnvoy&) = delete;

  // One request matched into `bucket`: true when Envoy lets it through.
  bool Request(const RlqsBucket& bucket);

  // Ends the stream now, without ending the process (Envoy sees the stream closed and opens a
  // new one at its next report).
  void DropStream();
  // Stops everything: no more reports or reads; the stream is cancelled (an Envoy killed).
  void Stop();
  // Stops reporting and taking requests, with the stream left open and read (an Envoy that
  // hangs, or loses its route to the server but not the connection).
  void StopReporting();

  RlqsBucketCounts counts(const RlqsBucket& bucket) const;
  // Whether `bucket` is in the cache (not abandoned).
  bool HasBucket(const RlqsBucket& bucket) const;
  // Streams opened, and how the last one ended ("" while it is open).
  int64_t streams_opened() const;
  std::string last_stream_status() const;
  int64_t responses() const;

 private:
  struct Bucket;
  using Clock = std::chrono::steady_clock;

  void ReportLoop();
  void SendReport(const std::map<RlqsBucket, bool>& only) ABSL_LOCKS_EXCLUDED(mu_);
  bool EnsureStream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  void ReadLoop(const std::shared_ptr<grpc::ClientContext>& context,
                const std::shared_ptr<RlqsClientStream>& stream);
  void Apply(const envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse& response);
  bool Decide(Bucket& bucket, Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SimulatedEnvoyOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<envoy::service::rate_limit_quota::v3::RateLimitQuotaService::Stub> stub_;

  mutable absl::Mutex mu_;
  std::map<RlqsBucket, std::unique_ptr<Bucket>> buckets_ ABSL_GUARDED_BY(mu_);
  std::map<RlqsBucket, RlqsBucketCounts> counts_ ABSL_GUARDED_BY(mu_);
  int64_t streams_opened_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_stream_status_ ABSL_GUARDED_BY(mu_);
  int64_t responses_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool silent_ ABSL_GUARDED_BY(mu_) = false;  // StopReporting

  // The stream: written under write_mu_, read by its reader thread.
  // Taken before mu_ when both are held.
  absl::Mutex write_mu_;
  std::shared_ptr<grpc::ClientContext> context_ ABSL_GUARDED_BY(write_mu_);
  std::shared_ptr<
      grpc::ClientReaderWriter<envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports,
                               envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse>>
      stream_ ABSL_GUARDED_BY(write_mu_);
  bool stream_open_ ABSL_GUARDED_BY(write_mu_) = false;
  std::vector<std::thread> readers_ ABSL_GUARDED_BY(write_mu_);

  absl::Notification stop_;
  std::thread reporter_;
};

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_RLQS_ENVOY_H_
