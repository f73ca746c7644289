// Copyright tollgate authors. The TLS handshake of a connection accepted on the gRPC port,
// before its HTTP/2 session (src/server/h2_session.h) starts. Internal to GrpcServer.
//
// Bounded like the HTTP/2 floods are (GrpcServerOptions): at most max_tls_handshakes at once
// over the whole server, a connection beyond them closed at once; each within
// tls_handshake_timeout, else closed. So a flood of clients that connect and send nothing,
// or send garbage, holds at most max_tls_handshakes connections' TLS state, each for at most
// the timeout. Every outcome is counted in GrpcTls::counters(); failures are logged (a warning
// at most once a second, the rest at debug level).
#ifndef TOLLGATE_SRC_SERVER_GRPC_TLS_HANDSHAKE_H_
#define TOLLGATE_SRC_SERVER_GRPC_TLS_HANDSHAKE_H_

#include <memory>

#include "boost/asio/ip/tcp.hpp"

namespace tollgate::server {

struct GrpcServerShared;

// Handshakes `socket` with the context current in `shared->options.tls`, then serves it as an
// H2Session; or closes it (over the cap, failed, timed out, or the server shutting down).
// REQUIRES: on the socket's loop thread; shared->options.tls is set.
void StartGrpcTlsHandshake(std::shared_ptr<GrpcServerShared> shared,
                           boost::asio::ip::tcp::socket socket);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_GRPC_TLS_HANDSHAKE_H_
