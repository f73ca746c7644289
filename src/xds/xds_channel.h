// Copyright tollgate authors. XdsClientOptions -> what the xDS stream is opened with: the gRPC
// channel (plaintext or TLS, keepalive, message bound, reconnection paced by the client's
// backoff), the stream's metadata and the node.
#ifndef TOLLGATE_SRC_XDS_XDS_CHANNEL_H_
#define TOLLGATE_SRC_XDS_XDS_CHANNEL_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "envoy/config/core/v3/base.pb.h"
#include "grpcpp/channel.h"
#include "src/xds/xds_options.h"

namespace tollgate::xds {

// The channel's keepalive: a PING after this long without any frame, the connection given up
// when it is not answered in kXdsKeepaliveTimeoutMs. Above go-grpc servers' default
// enforcement minimum (5 minutes), so Envoy Gateway's server, which keeps that default, never
// closes the connection for pinging too often (GOAWAY too_many_pings).
inline constexpr int kXdsKeepaliveTimeMs = 6 * 60 * 1000;
inline constexpr int kXdsKeepaliveTimeoutMs = 20 * 1000;

struct XdsConnection {
  std::shared_ptr<grpc::Channel> channel;
  // Sent with each stream, keys lowercased.
  std::vector<std::pair<std::string, std::string>> headers;
  // Sent on each stream's first request: node_id, node_metadata as string values, and
  // user_agent_name "tollgate" with the build's version.
  envoy::config::core::v3::Node node;
};

// Checks `options` and builds the connection; the channel connects when first used.
// InvalidArgument for an empty server_address or node_id, a malformed node_metadata or header,
// backoff_initial_ms < 1 or > backoff_max_ms, a backoff_random_factor outside [0, 1],
// max_message_bytes < 1024, a TLS certificate without its key (or the reverse), or a TLS
// file or server name without tls.enabled; NotFound
// for a TLS file that cannot be read. Each message names the option.
absl::StatusOr<XdsConnection> MakeXdsConnection(const XdsClientOptions& options);

// The node_metadata form "k1=v1,k2=v2" as pairs, in order; "" gives none. InvalidArgument
// naming the entry that is not KEY=VALUE with a non-empty key.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseNodeMetadata(
    absl::string_view text);

// The additional_headers entries ("key:value", or "k1:v1,k2:v2") as pairs, keys lowercased.
// InvalidArgument naming an entry that is not KEY:VALUE, or whose key gRPC refuses (only
// a-z, 0-9, '-', '_' and '.'; not "grpc-..." nor one of the call's own headers).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseXdsHeaders(
    const std::vector<std::string>& entries);

}  // namespace tollgate::xds

#endif  // TOLLGATE_SRC_XDS_XDS_CHANNEL_H_
