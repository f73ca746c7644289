// Copyright tollgate authors. A TCP socket whose reads and writes cost the kernel as few
// system calls as a hand-written epoll loop's (nginx's, or bench/h2_floor_server's).
//
//   StreamSocket socket(std::move(accepted));
//   socket.ReadSome(boost::asio::buffer(bytes), [](boost::system::error_code error, size_t n) {
//     ...
//   });
//   size_t written = socket.WriteNow(boost::asio::buffer(reply), error);  // what fit, now
//
// Boost.Asio's reactor tries every new read at once (a "speculative" recv) unless the last
// read hit end of file, so a connection that answers a request and then reads the next one
// pays a recv that finds nothing (EAGAIN) on every request. ReadSome tells the reactor, after
// a read that came back shorter than its buffer, that the socket is drained: the next read
// waits for the reactor's next readiness event instead. That is safe because the reactor's
// registration is edge-triggered: bytes that arrive after a read raise a new event.
//
// Threading: as any Asio socket, one thread at a time (the socket's single-threaded loop).
#ifndef TOLLGATE_SRC_NET_STREAM_SOCKET_H_
#define TOLLGATE_SRC_NET_STREAM_SOCKET_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <cstddef>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "boost/asio/buffer.hpp"
#include "boost/asio/error.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/version.hpp"

// The drained-read path relies on Asio's epoll reactor as Boost 1.74 (Debian 12) has it;
// elsewhere ReadSome is plain async_read_some.
#if BOOST_VERSION == 107400 && defined(BOOST_ASIO_HAS_EPOLL) && !defined(BOOST_ASIO_HAS_IOCP)
#define TOLLGATE_STREAM_SOCKET_DRAINED_READS 1
#include "boost/asio/detail/epoll_reactor.hpp"
#include "boost/asio/detail/reactor_op.hpp"
#include "boost/asio/execution/context.hpp"
#include "boost/asio/query.hpp"
#else
#define TOLLGATE_STREAM_SOCKET_DRAINED_READS 0
#endif

namespace tollgate::net {

class StreamSocket : public boost::asio::ip::tcp::socket {
 public:
  // Called once per read with (error, bytes): operation_aborted when the socket was closed
  // first, eof when the peer closed its side.
  using ReadHandler = absl::AnyInvocable<void(boost::system::error_code, size_t) &&>;

  explicit StreamSocket(const executor_type& executor) : boost::asio::ip::tcp::socket(executor) {}
  explicit StreamSocket(boost::asio::io_context& io) : boost::asio::ip::tcp::socket(io) {}
  explicit StreamSocket(boost::asio::ip::tcp::socket&& socket)
      : boost::asio::ip::tcp::socket(std::move(socket)) {}

  // Reads at most `buffer.size()` bytes as soon as some are there; `handler` runs on the
  // socket's loop, never inline. At most one read at a time. `buffer` must stay valid until
  // `handler` runs.
  void ReadSome(boost::asio::mutable_buffer buffer, ReadHandler handler) {
#if TOLLGATE_STREAM_SOCKET_DRAINED_READS
    auto& impl = impl_.get_implementation();
    auto* op = new ReadOp(impl.socket_, buffer, std::move(handler));
    boost::system::error_code error;
    if ((impl.state_ & boost::asio::detail::socket_ops::non_blocking) == 0 &&
        !boost::asio::detail::socket_ops::set_internal_non_blocking(impl.socket_, impl.state_, true,
                                                                    error)) {
      op->ec_ = error;
      reactor().post_immediate_completion(op, /*is_continuation=*/true);
      return;
    }
    reactor().start_op(boost::asio::detail::epoll_reactor::read_op, impl.socket_,
                       impl.reactor_data_, op, /*is_continuation=*/true,
                       /*allow_speculative=*/true);
#else
    async_read_some(buffer, [handler = std::move(handler)](boost::system::error_code error,
                                                           size_t bytes) mutable {
      std::move(handler)(error, bytes);
    });
#endif
  }

  // Whether the peer closed its side and everything it sent was read: one non-blocking peek
  // (a system call). A read that drains the socket can take the last bytes together with
  // the end of the stream; after it, no reactor event tells of that end, so a caller that
  // needs to know asks this.
  bool PeerClosed() {
    char byte;
    for (;;) {
      const ssize_t got = ::recv(native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (got >= 0) return got == 0;
      if (errno != EINTR) return false;
    }
  }

  // Writes what the socket takes now, without waiting: returns the bytes written (maybe
  // fewer than asked, maybe 0 when the socket's buffer is full). `error` is set only for a
  // failure (the connection is broken).
  size_t WriteNow(boost::asio::const_buffer buffer, boost::system::error_code& error) {
    error.clear();
    for (;;) {
      const ssize_t sent = ::send(native_handle(), buffer.data(), buffer.size(), MSG_NOSIGNAL);
      if (sent >= 0) return static_cast<size_t>(sent);
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      error = boost::system::error_code(errno, boost::asio::error::get_system_category());
      return 0;
    }
  }

 private:
#if TOLLGATE_STREAM_SOCKET_DRAINED_READS
  using Reactor = boost::asio::detail::epoll_reactor;

  // One read, queued on the reactor like Asio's own recv operation; it reports the socket
  // drained (done_and_exhausted) after a short read, so the reactor does not try the next
  // read before its next event.
  class ReadOp : public boost::asio::detail::reactor_op {
   public:
    ReadOp(int fd, boost::asio::mutable_buffer buffer, ReadHandler handler)
        : reactor_op(boost::system::error_code(), &ReadOp::Perform, &ReadOp::Complete),
          fd_(fd),
          buffer_(buffer),
          handler_(std::move(handler)) {}

   private:
    static status Perform(reactor_op* base) {
      auto* op = static_cast<ReadOp*>(base);
      for (;;) {
        const ssize_t got = ::recv(op->fd_, op->buffer_.data(), op->buffer_.size(), 0);
        if (got > 0) {
          op->bytes_transferred_ = static_cast<size_t>(got);
          return static_cast<size_t>(got) < op->buffer_.size() ? done_and_exhausted : done;
        }
        if (got == 0) {
          op->ec_ = op->buffer_.size() == 0 ? boost::system::error_code() : boost::asio::error::eof;
          return done_and_exhausted;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return not_done;
        op->ec_ = boost::system::error_code(errno, boost::asio::error::get_system_category());
        return done;
      }
    }

    // Runs the handler (owner set) or only frees the operation (owner null: the loop is
    // being destroyed with the read still queued).
    static void Complete(void* owner, boost::asio::detail::operation* base,
                         const boost::system::error_code& /*result*/, size_t /*bytes*/) {
      auto* op = static_cast<ReadOp*>(base);
      ReadHandler handler = std::move(op->handler_);
      const boost::system::error_code error = op->ec_;
      const size_t bytes = op->bytes_transferred_;
      delete op;
      if (owner != nullptr) std::move(handler)(error, bytes);
    }

    const int fd_;
    const boost::asio::mutable_buffer buffer_;
    ReadHandler handler_;
  };

  Reactor& reactor() {
    if (reactor_ == nullptr) {
      reactor_ = &boost::asio::use_service<Reactor>(
          boost::asio::query(get_executor(), boost::asio::execution::context));
    }
    return *reactor_;
  }

  Reactor* reactor_ = nullptr;
#endif
};

}  // namespace tollgate::net

#endif  // TOLLGATE_SRC_NET_STREAM_SOCKET_H_
