// Copyright tollgate authors. What the xDS client (src/xds/ads_client.h) is told: where the
// control plane is, who this node is, TLS, headers and backoff. Each field names the
// envoyproxy/ratelimit environment variable it stands for; `tollgate serve` sets them from its
// --xds-* flags (src/cli/main.cc) and ServeOptions::xds.
#ifndef TOLLGATE_SRC_XDS_XDS_OPTIONS_H_
#define TOLLGATE_SRC_XDS_XDS_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tollgate/clock.h"

namespace tollgate::xds {

// TLS to the xDS server (envoyproxy/ratelimit's CONFIG_GRPC_XDS_SERVER_USE_TLS and its
// companions). Files are PEM, read once when the client starts.
struct XdsTlsOptions {
  bool enabled = false;
  // The client certificate (chain) and its key, for a server that requires one (Envoy
  // Gateway does); both or neither (CONFIG_GRPC_XDS_CLIENT_TLS_CERT, _KEY).
  std::string client_cert_path;
  std::string client_key_path;
  // The authorities the server's certificate must chain to; empty: the system's
  // (CONFIG_GRPC_XDS_SERVER_TLS_CACERT).
  std::string server_ca_path;
  // The name the server's certificate must hold, instead of the host of server_address
  // (CONFIG_GRPC_XDS_SERVER_TLS_SAN).
  std::string server_name;
};

struct XdsClientOptions {
  // "host:port" (or any gRPC target, e.g. "dns:///host:port") of the control plane; empty:
  // no xDS client (CONFIG_GRPC_XDS_SERVER_URL).
  std::string server_address;
  // The node the control plane keys its snapshot by (CONFIG_GRPC_XDS_NODE_ID; Envoy Gateway
  // serves "envoy-ratelimit").
  std::string node_id = "default";
  // The node's metadata, "k1=v1,k2=v2", sent as string values (CONFIG_GRPC_XDS_NODE_METADATA).
  std::string node_metadata;
  XdsTlsOptions tls;
  // Metadata sent with the stream, each "key:value", or several as "k1:v1,k2:v2" (so
  // CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS goes in as one entry). Keys are lowercased
  // (gRPC requires it).
  std::vector<std::string> additional_headers;
  // Delay before opening a stream again after one ended: the first is about backoff_initial_ms,
  // each next one twice the previous, at most backoff_max_ms, each multiplied by a random
  // factor in [1 - backoff_random_factor, 1 + backoff_random_factor]; back to the first once a
  // stream was healthy (got a response, or stayed open 30 s) (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL,
  // _MAX_INTERVAL and _RANDOM_FACTOR, given in milliseconds here; XDS_CLIENT_BACKOFF_JITTER=false
  // is backoff_random_factor 0). The same schedule spaces the NACKs of a response rejected again
  // unchanged. CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL has no counterpart: gRPC's
  // channel reconnects on the schedule above.
  int64_t backoff_initial_ms = 10'000;
  int64_t backoff_max_ms = 60'000;
  double backoff_random_factor = 0.5;
  // The largest response accepted (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES; gRPC's default is 4 MiB).
  int max_message_bytes = 4 * 1024 * 1024;
  // Times `tollgate_xds_last_applied_timestamp_seconds`. nullptr: SystemClock().
  // REQUIRES: outlives the client.
  Clock* clock = nullptr;
};

}  // namespace tollgate::xds

#endif  // TOLLGATE_SRC_XDS_XDS_OPTIONS_H_
