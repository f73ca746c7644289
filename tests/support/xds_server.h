// Copyright tollgate authors. A real xDS server for tests: gRPC C++'s server answering
// StreamAggregatedResources the way go-control-plane's state-of-the-world server over a
// snapshot cache does (pkg/server/sotw/v3, pkg/cache/v3/simple.go), the server Envoy Gateway
// runs for the rate-limit service.
//
// It holds one snapshot (a version and resources per type URL) per node id. On each stream,
// a request whose response_nonce is not the nonce of the stream's last response of its type
// is stale and ignored; any other request opens a watch, answered at once with the snapshot
// (a new nonce) when the snapshot's version differs from the request's version_info, else
// when a snapshot with another version is set. Every request is recorded, so a test can see
// each ACK and NACK.
#ifndef TOLLGATE_TESTS_SUPPORT_XDS_SERVER_H_
#define TOLLGATE_TESTS_SUPPORT_XDS_SERVER_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/any.pb.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace tollgate::testing {

inline constexpr char kRateLimitConfigType[] =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

// One request as the server received it.
struct XdsRecordedRequest {
  int stream = 0;       // 1 for the first stream the server accepted, and so on
  std::string node_id;  // the stream's node (sent on its first request)
  std::string type_url;
  std::string version_info;
  std::string response_nonce;
  bool nack = false;  // error_detail was set
  int error_code = 0;
  std::string error_message;
  bool stale = false;  // ignored: its nonce was not the stream's last
  std::vector<std::pair<std::string, std::string>> metadata;  // the stream's headers
};

struct XdsServerOptions {
  // 0: a free port, kept across Stop() and Start().
  int port = 0;
  // TLS with this server certificate and key (PEM files); plaintext when empty.
  std::string cert_path;
  std::string key_path;
  // With TLS: client certificates are required and must chain to this authority.
  std::string client_ca_path;
};

// Thread-safe.
class XdsTestServer {
 public:
  // Starts serving on 127.0.0.1. Internal error when it cannot.
  static absl::StatusOr<std::unique_ptr<XdsTestServer>> Start(XdsServerOptions options = {});
  ~XdsTestServer();

  int port() const { return port_; }
  std::string address() const;

  // Ends every stream (status UNAVAILABLE) and stops listening; snapshots and records stay.
  void Stop();
  // Listens again on the same port.
  absl::Status Restart();

  // Sets the snapshot of `node_id`: `version` and the RateLimitConfig resources.
  void SetSnapshot(const std::string& node_id, const std::string& version,
                   const std::vector<ratelimit::config::ratelimit::v3::RateLimitConfig>& configs);
  // As above with resources of any type, by type URL.
  void SetRawSnapshot(const std::string& node_id, const std::string& version,
                      std::map<std::string, std::vector<google::protobuf::Any>> resources);

  // Every request so far, in order of arrival.
  std::vector<XdsRecordedRequest> requests() const;
  // Waits up to `timeout` for a request that `match` accepts; returns the first such, or
  // nullopt on timeout.
  std::optional<XdsRecordedRequest> WaitForRequest(
      const std::function<bool(const XdsRecordedRequest&)>& match,
      std::chrono::milliseconds timeout = std::chrono::seconds(30)) const;
  // The nonce and version of each response sent, in order.
  std::vector<std::pair<std::string, std::string>> responses() const;
  // Sends a response of `type_url` (its nonce set by the server) on every open stream, as if a
  // watch of that type fired: for testing how a client takes a type it did not ask for.
  void Push(const std::string& type_url, const std::string& version,
            std::vector<google::protobuf::Any> resources);

 private:
  class State;
  class Handler;
  explicit XdsTestServer(XdsServerOptions options);
  absl::Status Listen();

  XdsServerOptions options_;
  int port_ = 0;
  std::unique_ptr<State> state_;
  // Declared before the server, which calls it, so destroyed after it.
  std::unique_ptr<Handler> handler_;
  std::unique_ptr<grpc::Server> server_;
};

// A RateLimitConfig from protobuf text format. Fails the test (and returns what parsed) when
// `text` does not parse.
ratelimit::config::ratelimit::v3::RateLimitConfig RateLimitConfigFromText(const std::string& text);

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_XDS_SERVER_H_
