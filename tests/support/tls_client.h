// Copyright tollgate authors. A TLS client for tests of a server's TLS port, made with
// OpenSSL: one connection, blocking, each step bounded by a timeout. It reports what a
// client sees: whether the handshake completed, the ALPN protocol, the served certificate,
// and whether the server then speaks HTTP/2 to it.
#ifndef TOLLGATE_TESTS_SUPPORT_TLS_CLIENT_H_
#define TOLLGATE_TESTS_SUPPORT_TLS_CLIENT_H_

#include <chrono>
#include <string>
#include <vector>

namespace tollgate::testing {

struct TlsClientOptions {
  // The CA the server's certificate must chain to; empty: the certificate is not verified.
  std::string ca_path;
  // The client certificate and its key; empty: none is presented.
  std::string cert_path;
  std::string key_path;
  // Offered by ALPN, in order; empty: no ALPN extension.
  std::vector<std::string> alpn = {"h2"};
  // SNI, and the name the server's certificate must carry when it is verified.
  std::string server_name = "localhost";
  // The newest TLS version offered (TLS1_3_VERSION, TLS1_1_VERSION, ...); 0: OpenSSL's.
  int max_version = 0;
  std::chrono::milliseconds timeout{10'000};
};

struct TlsProbe {
  // The handshake completed on the client's side. (With TLS 1.3 a server refuses a client
  // certificate after that: `served` tells.)
  bool handshake = false;
  // After the HTTP/2 client preface, the server's first frame came: a SETTINGS frame.
  bool served = false;
  // What failed (OpenSSL's reason, or "closed", or "timed out"), when something did.
  std::string error;
  std::string alpn;     // the protocol the server selected, "" for none
  std::string serial;   // the served certificate's serial number, hex
  std::string subject;  // its subject, RFC 2253 ("CN=localhost")
};

// Connects to 127.0.0.1:`port`, handshakes as `options` say and, when that completes, sends
// the HTTP/2 client preface and an empty SETTINGS frame and reads the server's first frame.
TlsProbe ProbeTls(int port, const TlsClientOptions& options);

// The serial number of the first certificate in the PEM file at `path` (hex, as ProbeTls
// reports it), or "" when it cannot be read.
std::string CertificateSerial(const std::string& path);

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_TLS_CLIENT_H_
