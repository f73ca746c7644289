// Copyright tollgate authors. The xDS client of `tollgate serve`: Envoy domains from a control
// plane (Envoy Gateway), over the Aggregated Discovery Service, state of the world.
//
// One stream, StreamAggregatedResources, subscribes to every
// type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig resource (a wildcard, as
// envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW does). Each response is the whole set: every
// resource is converted and validated (src/xds/rate_limit_config.h) and, when all are valid,
// handed to `apply` as one set that replaces the previous one, then ACKed; otherwise, or when
// `apply` refuses it, NACKed with error_detail {code: INVALID_ARGUMENT, message: what was
// wrong, naming the resource and field}, and the running config stays. A stream that ends is
// opened again after a jittered exponential backoff, asking for the version last applied;
// the last applied config serves meanwhile.
//
// Why gRPC C++'s client (libgrpc++-dev) and not HTTP/2 of our own: this is one long-lived
// stream to a trusted control plane, off the request path, and gRPC C++ brings what such a
// client needs and a home-made one would have to write and test: reconnection, keepalive,
// HTTP/2 flow control, TLS with ALPN and a client certificate, name resolution. The flood
// bounds that made tollgate serve gRPC with nghttp2 (docs/envoy.md, "The gRPC server")
// protect a server from untrusted clients; they do not apply to a client.
//
//   XdsClientOptions options;
//   options.server_address = "envoy-gateway.envoy-gateway-system:18001";
//   options.node_id = "envoy-ratelimit";
//   auto client = XdsClient::Start(options, [&](std::vector<EnvoyDomainConfig> domains,
//                                               const std::string& version) {
//     return service.ReloadControlPlaneDomains(std::move(domains));
//   }, &metrics);
//   (*client)->WaitForConfig(absl::Seconds(1));  // true once a config was applied
#ifndef TOLLGATE_SRC_XDS_ADS_CLIENT_H_
#define TOLLGATE_SRC_XDS_ADS_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "src/config/envoy_config.h"
#include "src/xds/xds_options.h"

namespace grpc {
class ClientContext;
class Status;
}  // namespace grpc

namespace tollgate::server {
class Metrics;
}  // namespace tollgate::server

namespace tollgate::xds {

struct XdsConnection;

// Takes one response's whole set of domains (state of the world: it replaces the previous
// set) and its version. OK: the set serves and is ACKed. An error (e.g. a domain also given
// by a file) is sent back as the NACK's message and nothing changes. Called on the client's
// thread, one call at a time.
using ApplyDomains = absl::AnyInvocable<absl::Status(std::vector<EnvoyDomainConfig> domains,
                                                     const std::string& version)>;

// Thread-safe. Logs each change of state once ("xds: connected to X", "xds: applied version
// V (N domains)", "xds: rejected version V: ...", "xds: stream to X ended: STATUS; retrying in
// Ns"); a failure repeated unchanged is logged again at most every 5 minutes.
class XdsClient {
 public:
  // Checks `options` and starts the client's thread, which connects at once. InvalidArgument
  // for unusable options (an empty server_address or node_id, a malformed node_metadata or
  // header, a backoff out of range, a TLS key without its certificate), NotFound for a TLS
  // file that cannot be read. `metrics`, when not nullptr, gets the tollgate_xds_* families.
  // REQUIRES: `metrics` outlives the client.
  static absl::StatusOr<std::unique_ptr<XdsClient>> Start(const XdsClientOptions& options,
                                                          ApplyDomains apply,
                                                          server::Metrics* metrics = nullptr);

  XdsClient(const XdsClient&) = delete;
  XdsClient& operator=(const XdsClient&) = delete;
  // Stop().
  ~XdsClient();

  // Cancels the stream and joins the thread: returns within a few hundred milliseconds (gRPC
  // cancels a call at once; waits are cut short), never after another `apply`. Idempotent.
  void Stop();

  // Whether a config has been applied since the start (it then keeps serving, whatever the
  // stream does).
  bool has_config() const { return applied_.HasBeenNotified(); }
  // Waits up to `timeout` for the first config applied; returns has_config().
  bool WaitForConfig(absl::Duration timeout) const {
    return applied_.WaitForNotificationWithTimeout(timeout);
  }
  // The version last applied, "" before any.
  std::string applied_version() const;
  const std::string& server_address() const { return options_.server_address; }

 private:
  // What one run of the client's thread keeps between streams.
  struct RunState;

  XdsClient(XdsClientOptions options, ApplyDomains apply, server::Metrics* metrics,
            std::unique_ptr<XdsConnection> connection);
  void Run();
  // Opens one stream and serves it until it ends; returns how it ended.
  grpc::Status RunStream(RunState& state);
  // Waits for `delay` unless Stop() comes first; false when it did.
  bool Sleep(absl::Duration delay) const {
    return !stopping_.WaitForNotificationWithTimeout(delay);
  }

  const XdsClientOptions options_;
  ApplyDomains apply_;
  server::Metrics* const metrics_;
  Clock* const clock_;
  const std::unique_ptr<XdsConnection> connection_;

  absl::Notification stopping_;
  absl::Notification applied_;  // the first config applied
  mutable absl::Mutex mu_;
  // The running stream's context, for Stop() to cancel; nullptr between streams.
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string applied_version_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace tollgate::xds

#endif  // TOLLGATE_SRC_XDS_ADS_CLIENT_H_
