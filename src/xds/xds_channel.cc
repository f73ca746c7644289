// Copyright tollgate authors.
#include "src/xds/xds_channel.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "src/core/build_info.h"

namespace tollgate::xds {
namespace {

// The PEM text of the file at `path`, for the option `flag`.
absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(flag, ": ", path, ": cannot read the file: ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::NotFoundError(absl::StrCat(flag, ": ", path, ": cannot read"));
  return text.str();
}

bool IsHeaderKeyByte(char c) {
  return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '_' || c == '.';
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(
    const XdsTlsOptions& tls, grpc::ChannelArguments& args) {
  if (!tls.enabled) {
    if (!tls.client_cert_path.empty() || !tls.client_key_path.empty() ||
        !tls.server_ca_path.empty() || !tls.server_name.empty()) {
      return absl::InvalidArgumentError(
          "xds tls: --xds-tls-cert, --xds-tls-key, --xds-tls-ca and --xds-tls-server-name "
          "need --xds-tls");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (tls.client_cert_path.empty() != tls.client_key_path.empty()) {
    return absl::InvalidArgumentError(
        "xds tls: a client certificate and its key go together: give both --xds-tls-cert and "
        "--xds-tls-key, or neither");
  }
  grpc::SslCredentialsOptions ssl;
  if (!tls.server_ca_path.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(tls.server_ca_path, "--xds-tls-ca");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  if (!tls.client_cert_path.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(tls.client_cert_path, "--xds-tls-cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(tls.client_key_path, "--xds-tls-key");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
  return grpc::SslCredentials(ssl);
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseNodeMetadata(
    absl::string_view text) {
  std::vector<std::pair<std::string, std::string>> pairs;
  if (text.empty()) return pairs;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    std::pair<absl::string_view, absl::string_view> pair =
        absl::StrSplit(entry, absl::MaxSplits('=', 1));
    if (pair.first.empty() || entry.find('=') == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--xds-node-metadata: expected KEY=VALUE entries separated by ',', got '", entry, "'"));
    }
    pairs.emplace_back(std::string(pair.first), std::string(pair.second));
  }
  return pairs;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseXdsHeaders(
    const std::vector<std::string>& entries) {
  std::vector<std::pair<std::string, std::string>> headers;
  for (const std::string& list : entries) {
    for (absl::string_view entry : absl::StrSplit(list, ',', absl::SkipEmpty())) {
      const size_t colon = entry.find(':');
      const std::string key =
          absl::AsciiStrToLower(absl::StripAsciiWhitespace(entry.substr(0, colon)));
      if (colon == absl::string_view::npos || key.empty() ||
          !std::all_of(key.begin(), key.end(), IsHeaderKeyByte) || absl::StartsWith(key, "grpc-")) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--xds-header: expected KEY:VALUE (KEY of a-z, 0-9, '-', '_', '.', not grpc-...), "
            "got '",
            entry, "'"));
      }
      const absl::string_view value = absl::StripAsciiWhitespace(entry.substr(colon + 1));
      if (!absl::EndsWith(key, "-bin") &&
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= 0x20 && c < 0x7f; })) {
        return absl::InvalidArgumentError(
            absl::StrCat("--xds-header: the value of '", key, "' must be printable ASCII"));
      }
      headers.emplace_back(key, std::string(value));
    }
  }
  return headers;
}

absl::StatusOr<XdsConnection> MakeXdsConnection(const XdsClientOptions& options) {
  if (options.server_address.empty()) {
    return absl::InvalidArgumentError("--xds-server: expected HOST:PORT, got nothing");
  }
  if (options.node_id.empty()) return absl::InvalidArgumentError("--xds-node-id: empty");
  if (options.backoff_initial_ms < 1 || options.backoff_initial_ms > options.backoff_max_ms) {
    return absl::InvalidArgumentError(
        absl::StrCat("--xds-backoff-initial-ms: expected from 1 to --xds-backoff-max-ms (",
                     options.backoff_max_ms, "), got ", options.backoff_initial_ms));
  }
  if (!(options.backoff_random_factor >= 0 && options.backoff_random_factor <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "xds backoff random factor: expected from 0 to 1, got ", options.backoff_random_factor));
  }
  if (options.max_message_bytes < 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--xds-max-message-bytes: expected at least 1024, got ", options.max_message_bytes));
  }
  XdsConnection connection;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> metadata =
      ParseNodeMetadata(options.node_metadata);
  if (!metadata.ok()) return metadata.status();
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> headers =
      ParseXdsHeaders(options.additional_headers);
  if (!headers.ok()) return headers.status();
  connection.headers = *std::move(headers);

  connection.node.set_id(options.node_id);
  for (auto& [key, value] : *metadata) {
    (*connection.node.mutable_metadata()->mutable_fields())[key].set_string_value(value);
  }
  connection.node.set_user_agent_name("tollgate");
  connection.node.set_user_agent_version(kBuildVersion);

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kXdsKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kXdsKeepaliveTimeoutMs);
  // The channel reconnects on its own schedule, and a stream opened while it waits fails at
  // once: keep its waits shorter than the client's shortest backoff, so that each new stream
  // finds a fresh connection attempt and the client's backoff alone paces the retries.
  const int reconnect_ms = static_cast<int>(
      std::max<int64_t>(100, static_cast<int64_t>(static_cast<double>(options.backoff_initial_ms) *
                                                  (1 - options.backoff_random_factor) / 2)));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(reconnect_ms, 1000));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, reconnect_ms);
  args.SetString(GRPC_ARG_PRIMARY_USER_AGENT_STRING, absl::StrCat("tollgate/", kBuildVersion));
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      Credentials(options.tls, args);
  if (!credentials.ok()) return credentials.status();
  connection.channel =
      grpc::CreateCustomChannel(options.server_address, *std::move(credentials), args);
  return connection;
}

}  // namespace tollgate::xds
