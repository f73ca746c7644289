// Copyright tollgate authors. Work deferred to the end of the I/O handler that is running.
//
//   void Connection::OnRead(...) {            // an I/O handler on `io`'s thread
//     net::HandlerScope scope(io);
//     ... answers, commands queued on other connections ...
//   }                                          // their writes go out here, one per connection
//
//   // elsewhere, on that thread: write at the end of the handler instead of posting
//   if (!net::HandlerScope::Defer(io, [self] { self->Flush(); })) Post(...);
//
// One read of a socket can carry many requests (HTTP/2 streams, Redis replies), each of which
// queues output on some connection. Posting each connection's write to the loop would cost a
// turn of the loop (and a poll of the reactor) per write; writing at once would cost a write
// per request. Deferring to the end of the handler writes once per connection per handler.
//
// Not thread-safe, and needs none: a scope, and what is deferred to it, belong to one thread.
#ifndef TOLLGATE_SRC_NET_HANDLER_SCOPE_H_
#define TOLLGATE_SRC_NET_HANDLER_SCOPE_H_

#include <cstddef>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/functional/any_invocable.h"
#include "boost/asio/io_context.hpp"

namespace tollgate::net {

class HandlerScope {
 public:
  using Work = absl::AnyInvocable<void() &&>;

  // Opens a scope for handlers of `io` on this thread; scopes nest (the innermost takes
  // what is deferred).
  explicit HandlerScope(const boost::asio::io_context& io) : io_(&io), outer_(current_) {
    current_ = this;
  }
  HandlerScope(const HandlerScope&) = delete;
  HandlerScope& operator=(const HandlerScope&) = delete;

  // Runs what was deferred, in order, including what that work defers in turn.
  ~HandlerScope() {
    for (size_t i = 0; i < deferred_.size(); ++i) {
      Work work = std::move(deferred_[i]);
      std::move(work)();
    }
    current_ = outer_;
  }

  // Defers `work` to the end of the innermost scope on this thread if that scope is `io`'s,
  // and returns true; otherwise returns false and leaves `work` to the caller.
  static bool Defer(const boost::asio::io_context& io, Work& work) {
    HandlerScope* scope = current_;
    if (scope == nullptr || scope->io_ != &io) return false;
    scope->deferred_.push_back(std::move(work));
    return true;
  }

 private:
  const boost::asio::io_context* const io_;
  HandlerScope* const outer_;
  absl::InlinedVector<Work, 4> deferred_;
  static inline thread_local HandlerScope* current_ = nullptr;
};

}  // namespace tollgate::net

#endif  // TOLLGATE_SRC_NET_HANDLER_SCOPE_H_
