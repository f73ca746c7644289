// Copyright tollgate authors. TLS (and mTLS) on the gRPC port: the server's OpenSSL context,
// built from PEM files and rebuilt when they change, and the port's TLS counters.
//
//   auto tls = GrpcTls::Create({.cert_path = "tls.crt", .key_path = "tls.key",
//                               .client_ca_path = "ca.crt"});   // mTLS
//   options.tls = *tls;                      // GrpcServerOptions: new connections use it
//   (*tls)->Reload("SIGHUP");                // a new context for new connections, or the old
//   (*tls)->ReloadIfChanged();               // the same when the files' contents changed
//
// What a connection gets: TLS 1.2 or 1.3 (nothing older); ALPN "h2" only (a client that
// offers ALPN without "h2" fails the handshake; one that offers none is served HTTP/2, as gRPC
// servers do); with a client CA, a client certificate is required and must chain to it; with a
// client SAN too, the certificate must carry that name as a DNS or URI subject alternative
// name (envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN). No renegotiation.
#ifndef TOLLGATE_SRC_SERVER_GRPC_TLS_H_
#define TOLLGATE_SRC_SERVER_GRPC_TLS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/ssl/context.hpp"

namespace tollgate::server {

// The files of the gRPC port's TLS (`tollgate serve --grpc-tls-*`). All empty: plaintext.
struct GrpcTlsFiles {
  // PEM: the server's certificate, then the intermediates that chain it to the client's CA.
  std::string cert_path = {};  // --grpc-tls-cert
  // PEM: its private key, unencrypted.
  std::string key_path = {};  // --grpc-tls-key
  // PEM: the CAs a client certificate must chain to. Empty: no client certificate is asked.
  std::string client_ca_path = {};  // --grpc-tls-client-ca
  // A DNS or URI SAN the client certificate must carry (exact; DNS names ignore case).
  // Empty: any certificate the CA signed. REQUIRES: client_ca_path.
  std::string client_san = {};  // --grpc-tls-client-san

  bool enabled() const {
    return !cert_path.empty() || !key_path.empty() || !client_ca_path.empty() ||
           !client_san.empty();
  }
};

// The port's TLS counters, read by /metrics (Metrics::set_grpc_tls). Relaxed atomics.
struct GrpcTlsCounters {
  std::atomic<int64_t> handshakes_in_progress{0};
  std::atomic<int64_t> handshakes_completed{0};
  std::atomic<int64_t> handshakes_failed{0};     // the peer or the protocol failed it
  std::atomic<int64_t> handshakes_timed_out{0};  // not done within the handshake timeout
  std::atomic<int64_t> handshakes_refused{0};    // over the cap on handshakes at once
  std::atomic<int64_t> reloads_succeeded{0};
  std::atomic<int64_t> reloads_failed{0};
};

// Thread-safe.
class GrpcTls {
 public:
  // Reads the files and builds the context. InvalidArgument naming the flags when they do
  // not go together (a certificate without its key or the reverse; a client CA or SAN
  // without a certificate; a SAN without a client CA). FailedPrecondition naming the flag,
  // the file and what is wrong when a file cannot be read or does not hold what it should
  // (messages never quote a file's contents).
  static absl::StatusOr<std::shared_ptr<GrpcTls>> Create(GrpcTlsFiles files);

  GrpcTls(const GrpcTls&) = delete;
  GrpcTls& operator=(const GrpcTls&) = delete;
  ~GrpcTls();

  // The context for a new connection; the connection keeps it for its life.
  std::shared_ptr<boost::asio::ssl::context> context() const;

  // Re-reads the files. A usable set replaces the context for new connections (connections
  // open keep theirs), counts a success and logs it with `why`; otherwise the old context
  // stays, a failure is counted and the error logged, naming the file. Returns that status.
  absl::Status Reload(std::string_view why);
  // Reload("a TLS file changed") when what the files hold differs from what the last load or
  // reload read (used or refused); nullopt when it does not.
  std::optional<absl::Status> ReloadIfChanged();

  const GrpcTlsFiles& files() const { return files_; }
  bool client_certificates_required() const { return !files_.client_ca_path.empty(); }
  GrpcTlsCounters& counters() { return counters_; }
  const GrpcTlsCounters& counters() const { return counters_; }

 private:
  using Digest = std::array<uint8_t, 32>;  // SHA-256 of the files' contents
  explicit GrpcTls(GrpcTlsFiles files) : files_(std::move(files)) {}

  const GrpcTlsFiles files_;
  GrpcTlsCounters counters_;
  mutable absl::Mutex mu_;
  std::shared_ptr<boost::asio::ssl::context> context_ ABSL_GUARDED_BY(mu_);
  // One reload at a time; what it read last.
  absl::Mutex reload_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::optional<Digest> digest_ ABSL_GUARDED_BY(reload_mu_);
};

// Where "h2" is in `protocols`, a client's ALPN list in its wire form (each name after a
// one-byte length): the offset of its length byte, or nullopt when absent or the list is
// malformed.
std::optional<size_t> FindH2InAlpnList(std::string_view protocols);

// Whether the PEM certificate `certificate` carries `name` as a DNS SAN (ignoring case) or a
// URI SAN (exact). False when it cannot be parsed.
bool PemCertificateHasSan(std::string_view certificate, std::string_view name);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_GRPC_TLS_H_
