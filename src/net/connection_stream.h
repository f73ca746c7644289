// Copyright tollgate authors. The bytes of one accepted connection: the TCP socket itself,
// or TLS over it (Boost.Asio's ssl::stream on OpenSSL).
//
//   ConnectionStream plain(std::move(socket));                 // reads and writes the socket
//   ConnectionStream tls(std::move(socket), context);          // TLS; handshake first:
//   tls.AsyncHandshake([](boost::system::error_code error) { ... });
//   stream.ReadSome(boost::asio::buffer(bytes), [](boost::system::error_code error, size_t n) {});
//   size_t written = stream.WriteNow(boost::asio::buffer(reply), error);  // plain only; TLS: 0
//   stream.AsyncWrite(boost::asio::buffer(reply) + written, [](error_code, size_t) { ... });
//
// The plain path is StreamSocket's (drained reads, writes without a handler when the
// socket's buffer takes them) behind one branch: no allocation and no virtual call per read
// or write. The TLS path writes only asynchronously (OpenSSL may need to read to write, and
// the reverse), and supports one read and one write in flight at once, as ssl::stream does.
//
// Threading: one thread at a time (the socket's single-threaded loop). Movable while no
// operation is in flight (the TLS stream sits on the heap, so a move does not move it).
// Members are destroyed TLS stream first, then its context, then the plain socket.
#ifndef TOLLGATE_SRC_NET_CONNECTION_STREAM_H_
#define TOLLGATE_SRC_NET_CONNECTION_STREAM_H_

#include <cstddef>
#include <memory>
#include <utility>

#include "boost/asio/buffer.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/ssl/context.hpp"
#include "boost/asio/ssl/stream.hpp"
#include "boost/asio/write.hpp"
#include "src/net/stream_socket.h"

namespace tollgate::net {

class ConnectionStream {
 public:
  using ReadHandler = StreamSocket::ReadHandler;
  using TlsStream = boost::asio::ssl::stream<StreamSocket>;

  // Plaintext over `socket`.
  explicit ConnectionStream(boost::asio::ip::tcp::socket socket) : socket_(std::move(socket)) {}
  // TLS over `socket` as the server, with `context` (kept alive as long as the stream, so a
  // context replaced for new connections stays with the old ones). REQUIRES: AsyncHandshake
  // completes without error before ReadSome or AsyncWrite.
  ConnectionStream(boost::asio::ip::tcp::socket socket,
                   std::shared_ptr<boost::asio::ssl::context> context)
      : socket_(socket.get_executor()), context_(std::move(context)) {
    tls_ = std::make_unique<TlsStream>(StreamSocket(std::move(socket)), *context_);
  }

  ConnectionStream(ConnectionStream&&) noexcept = default;
  // Not assignable: the TLS stream must go before the context it was made with.
  ConnectionStream& operator=(ConnectionStream&&) = delete;

  bool tls() const { return tls_ != nullptr; }
  // The TCP socket under either form (options, endpoints, closing).
  StreamSocket& socket() { return tls_ != nullptr ? tls_->next_layer() : socket_; }
  // The OpenSSL connection (ALPN, the peer's certificate), or nullptr when plain.
  SSL* ssl() { return tls_ != nullptr ? tls_->native_handle() : nullptr; }

  // The server side of the TLS handshake; `handler(error)` runs on the socket's loop.
  // REQUIRES: tls().
  template <typename Handler>
  void AsyncHandshake(Handler&& handler) {
    tls_->async_handshake(boost::asio::ssl::stream_base::server, std::forward<Handler>(handler));
  }

  // Reads at most `buffer.size()` bytes as soon as some are there (StreamSocket::ReadSome's
  // contract; with TLS, decrypted bytes). At most one read at a time.
  void ReadSome(boost::asio::mutable_buffer buffer, ReadHandler handler) {
    if (tls_ == nullptr) {
      socket_.ReadSome(buffer, std::move(handler));
      return;
    }
    tls_->async_read_some(buffer, [handler = std::move(handler)](boost::system::error_code error,
                                                                 size_t bytes) mutable {
      std::move(handler)(error, bytes);
    });
  }

  // Plain: StreamSocket::WriteNow (what the socket takes now). TLS: writes nothing and
  // returns 0: every TLS write goes through AsyncWrite.
  size_t WriteNow(boost::asio::const_buffer buffer, boost::system::error_code& error) {
    if (tls_ != nullptr) {
      error.clear();
      return 0;
    }
    return socket_.WriteNow(buffer, error);
  }

  // Writes all of `buffer` (which must stay valid until `handler(error, bytes)` runs). At
  // most one write at a time.
  template <typename Handler>
  void AsyncWrite(boost::asio::const_buffer buffer, Handler&& handler) {
    if (tls_ == nullptr) {
      boost::asio::async_write(socket_, buffer, std::forward<Handler>(handler));
      return;
    }
    boost::asio::async_write(*tls_, buffer, std::forward<Handler>(handler));
  }

  // Shuts the TCP connection down and closes the socket (no TLS close_notify: the peer sees
  // the connection end); operations in flight complete with an error.
  void Close() {
    boost::system::error_code ignored;
    socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
    socket().close(ignored);
  }

 private:
  // The connection when plain; an unopened socket on the same loop when TLS.
  StreamSocket socket_;
  std::shared_ptr<boost::asio::ssl::context> context_;
  std::unique_ptr<TlsStream> tls_;
};

}  // namespace tollgate::net

#endif  // TOLLGATE_SRC_NET_CONNECTION_STREAM_H_
