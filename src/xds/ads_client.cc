// Copyright tollgate authors.
#include "src/xds/ads_client.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "envoy/service/discovery/v3/ads.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "spdlog/spdlog.h"
#include "src/server/metrics.h"
#include "src/xds/rate_limit_config.h"
#include "src/xds/xds_channel.h"

namespace tollgate::xds {

using ::envoy::service::discovery::v3::AggregatedDiscoveryService;
using ::envoy::service::discovery::v3::DiscoveryRequest;
using ::envoy::service::discovery::v3::DiscoveryResponse;

namespace {

// google.rpc.Code INVALID_ARGUMENT, the code of every NACK.
constexpr int kInvalidArgument = 3;
// A NACK's message is cut after this many bytes (it names every error of every resource).
constexpr size_t kMaxNackMessageBytes = 16 * 1024;
// A failure repeated unchanged is logged again after this long at the earliest.
constexpr absl::Duration kRepeatLogInterval = absl::Minutes(5);
// A stream open this long is healthy even without a response (the control plane had nothing
// new): its end is news, and the backoff starts over.
constexpr absl::Duration kHealthyStream = absl::Seconds(30);

// "UNAVAILABLE: failed to connect to all addresses"
std::string StatusText(const grpc::Status& status) {
  return absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                      ": ", status.error_message());
}

// "40ms", "9.8s": a delay as logged.
std::string DelayText(absl::Duration delay) {
  return absl::FormatDuration(absl::Trunc(
      delay, delay < absl::Seconds(1) ? absl::Milliseconds(1) : absl::Milliseconds(100)));
}

// What identifies a response's content: its version and resources, not its nonce.
std::string Fingerprint(const DiscoveryResponse& response) {
  std::string fingerprint = response.version_info();
  for (const google::protobuf::Any& resource : response.resources()) {
    absl::StrAppend(&fingerprint, "\n", resource.type_url(), "\n", resource.value());
  }
  return fingerprint;
}

// One message as log records, one per line.
void LogLines(spdlog::level::level_enum level, absl::string_view prefix,
              absl::string_view message) {
  for (absl::string_view line : absl::StrSplit(message, '\n')) {
    spdlog::log(level, "{}{}", std::string(prefix), std::string(line));
  }
}

}  // namespace

struct XdsClient::RunState {
  // Whether the stream that just ended was healthy: it got a response, or stayed open for
  // kHealthyStream.
  bool healthy = false;
  // Consecutive streams that ended unhealthy: the backoff's count.
  int failures = 0;
  // The last failure logged, when, and how many alike were not logged since. A failure after
  // a healthy stream is always logged; an unhealthy stream's (a retry's) when it differs from
  // the last one logged, or kRepeatLogInterval after it.
  std::string failure;
  absl::Time failure_logged = absl::InfinitePast();
  int failures_not_logged = 0;
  // Whether the next connection is logged: the first one, and each after a logged failure.
  bool log_connection = true;
  // The response last rejected (Fingerprint), why, how many times in a row it came back.
  std::string rejected;
  std::string rejection;
  int rejected_again = 0;
  // Response types not subscribed to that were ignored (each logged once).
  absl::flat_hash_set<std::string> ignored_types;
  std::mt19937_64 random{std::random_device{}()};

  // The delay before the next try after `count` in a row (the first after 0).
  absl::Duration Backoff(const XdsClientOptions& options, int count) {
    const double base = std::min(
        static_cast<double>(options.backoff_max_ms),
        static_cast<double>(options.backoff_initial_ms) * std::pow(2.0, std::min(count, 30)));
    std::uniform_real_distribution<double> jitter(1 - options.backoff_random_factor,
                                                  1 + options.backoff_random_factor);
    const double millis =
        std::min(static_cast<double>(options.backoff_max_ms), base * jitter(random));
    return absl::Milliseconds(std::max(1.0, millis));
  }
};

absl::StatusOr<std::unique_ptr<XdsClient>> XdsClient::Start(const XdsClientOptions& options,
                                                            ApplyDomains apply,
                                                            server::Metrics* metrics) {
  absl::StatusOr<XdsConnection> connection = MakeXdsConnection(options);
  if (!connection.ok()) return connection.status();
  std::unique_ptr<XdsClient> client(new XdsClient(
      options, std::move(apply), metrics, std::make_unique<XdsConnection>(*std::move(connection))));
  if (metrics != nullptr) metrics->SetXdsConnected(false);
  client->thread_ = std::thread([raw = client.get()] { raw->Run(); });
  return client;
}

XdsClient::XdsClient(XdsClientOptions options, ApplyDomains apply, server::Metrics* metrics,
                     std::unique_ptr<XdsConnection> connection)
    : options_(std::move(options)),
      apply_(std::move(apply)),
      metrics_(metrics),
      clock_(options_.clock != nullptr ? options_.clock : &SystemClock()),
      connection_(std::move(connection)) {}

XdsClient::~XdsClient() { Stop(); }

void XdsClient::Stop() {
  if (!stopping_.HasBeenNotified()) stopping_.Notify();
  {
    absl::MutexLock lock(&mu_);
    if (context_ != nullptr) context_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

std::string XdsClient::applied_version() const {
  absl::MutexLock lock(&mu_);
  return applied_version_;
}

void XdsClient::Run() {
  RunState state;
  while (!stopping_.HasBeenNotified()) {
    const grpc::Status status = RunStream(state);
    if (metrics_ != nullptr) metrics_->SetXdsConnected(false);
    if (stopping_.HasBeenNotified()) break;
    if (metrics_ != nullptr) metrics_->RecordXdsStreamRestart();
    if (state.healthy) {
      state.failures = 0;
      state.failure.clear();
    }
    const absl::Duration delay = state.Backoff(options_, state.failures++);
    const std::string failure = StatusText(status);
    const absl::Time now = absl::Now();
    if (failure != state.failure || now - state.failure_logged >= kRepeatLogInterval) {
      spdlog::warn("xds: stream to {} ended: {}; retrying in {}{}", options_.server_address,
                   failure, DelayText(delay),
                   state.failures_not_logged == 0
                       ? ""
                       : absl::StrCat(" (the same ", state.failures_not_logged,
                                      " more times since it was last logged)"));
      state.failure = failure;
      state.failure_logged = now;
      state.failures_not_logged = 0;
      state.log_connection = true;
    } else {
      ++state.failures_not_logged;
      spdlog::debug("xds: stream to {} ended again: {}", options_.server_address, failure);
    }
    if (!Sleep(delay)) break;
  }
}

grpc::Status XdsClient::RunStream(RunState& state) {
  grpc::ClientContext context;
  for (const auto& [key, value] : connection_->headers) context.AddMetadata(key, value);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_.HasBeenNotified()) return grpc::Status::CANCELLED;
    context_ = &context;
  }
  auto stub = AggregatedDiscoveryService::NewStub(connection_->channel);
  std::unique_ptr<grpc::ClientReaderWriter<DiscoveryRequest, DiscoveryResponse>> stream =
      stub->StreamAggregatedResources(&context);

  // A new stream: the node, the version last applied, no nonce.
  DiscoveryRequest request;
  *request.mutable_node() = connection_->node;
  request.set_type_url(kRateLimitConfigTypeUrl);
  request.set_version_info(applied_version());
  state.healthy = false;
  // Written means connected: gRPC holds a call's messages until it has a connection, and
  // fails them when it finds none.
  bool open = stream->Write(request);
  const absl::Time opened = absl::Now();
  if (open) {
    if (metrics_ != nullptr) metrics_->SetXdsConnected(true);
    if (state.log_connection) {
      spdlog::info("xds: connected to {} as node '{}'", options_.server_address,
                   connection_->node.id());
      state.log_connection = false;
    }
  }

  DiscoveryResponse response;
  while (open && stream->Read(&response)) {
    state.healthy = true;
    if (response.type_url() != kRateLimitConfigTypeUrl) {
      // Not subscribed to: Envoy ignores such a response too. An ACK would name that type
      // and subscribe to it; its version and nonce are not this type's.
      if (state.ignored_types.insert(response.type_url()).second) {
        spdlog::warn("xds: ignoring a response of type '{}' (only {} is subscribed to)",
                     response.type_url(), kRateLimitConfigTypeUrl);
      }
      continue;
    }
    DiscoveryRequest answer;
    answer.set_type_url(kRateLimitConfigTypeUrl);
    answer.set_response_nonce(response.nonce());
    std::string fingerprint = Fingerprint(response);
    absl::Status result;
    const bool again = !state.rejected.empty() && fingerprint == state.rejected;
    if (again) {
      result = absl::InvalidArgumentError(state.rejection);
    } else {
      absl::StatusOr<std::vector<EnvoyDomainConfig>> domains =
          ConvertRateLimitConfigs(response.resources());
      const size_t count = domains.ok() ? domains->size() : 0;
      result =
          domains.ok() ? apply_(*std::move(domains), response.version_info()) : domains.status();
      if (result.ok()) {
        {
          absl::MutexLock lock(&mu_);
          applied_version_ = response.version_info();
        }
        if (metrics_ != nullptr) {
          metrics_->RecordXdsApplied(response.version_info(), clock_->NowMicros());
        }
        spdlog::info("xds: applied version {} ({} domain{})", response.version_info(), count,
                     count == 1 ? "" : "s");
        if (!applied_.HasBeenNotified()) applied_.Notify();
        state.rejected.clear();
        state.rejected_again = 0;
      }
    }
    if (result.ok()) {
      answer.set_version_info(response.version_info());
    } else {
      answer.set_version_info(applied_version());
      auto* error = answer.mutable_error_detail();
      error->set_code(kInvalidArgument);
      std::string message(result.message());
      if (message.size() > kMaxNackMessageBytes) {
        message.resize(kMaxNackMessageBytes);
        message += "...";
      }
      error->set_message(message);
      if (metrics_ != nullptr) metrics_->RecordXdsRejected();
      if (!again) {
        LogLines(spdlog::level::warn,
                 absl::StrCat("xds: rejected version ", response.version_info(), ": "),
                 result.message());
        state.rejected = std::move(fingerprint);
        state.rejection = std::string(result.message());
        state.rejected_again = 0;
      } else {
        // A control plane that answers a NACK with the same response at once (go-control-plane's
        // snapshot cache does: the NACK's version differs from the snapshot's) would otherwise
        // make a loop as fast as the network: the same NACK goes after the backoff.
        const absl::Duration delay = state.Backoff(options_, state.rejected_again++);
        spdlog::debug("xds: version {} sent again unchanged; rejected again in {}",
                      response.version_info(), DelayText(delay));
        if (!Sleep(delay)) break;
      }
    }
    open = stream->Write(answer);
  }
  if (absl::Now() - opened >= kHealthyStream) state.healthy = true;
  grpc::Status status = stream->Finish();
  {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
  }
  return status;
}

}  // namespace tollgate::xds
