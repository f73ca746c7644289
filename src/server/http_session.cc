// Copyright tollgate authors.
#include "src/server/http_session.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/write.hpp"
#include "spdlog/spdlog.h"

namespace tollgate::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

uint64_t SessionRegistry::Add(const std::weak_ptr<HttpSession>& session) {
  absl::MutexLock lock(&mu_);
  if (closed_) return 0;
  uint64_t id = next_id_++;
  sessions_.emplace(id, session);
  return id;
}

void SessionRegistry::Remove(uint64_t id) {
  absl::MutexLock lock(&mu_);
  sessions_.erase(id);
}

bool SessionRegistry::AwaitEmpty(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto empty = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return sessions_.empty(); };
  return mu_.AwaitWithTimeout(absl::Condition(&empty), timeout);
}

std::vector<std::weak_ptr<HttpSession>> SessionRegistry::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  std::vector<std::weak_ptr<HttpSession>> open;
  open.reserve(sessions_.size());
  for (const auto& [id, session] : sessions_) open.push_back(session);
  return open;
}

namespace {

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

// Appends `response` as it goes on the wire (Beast's serializer) to `out`.
void AppendWire(const HttpResponse& response, std::string& out) {
  http::response_serializer<http::string_body> serializer(response);
  beast::error_code error;
  do {
    serializer.next(error, [&](beast::error_code&, const auto& buffers) {
      const size_t old = out.size();
      const size_t bytes = beast::buffer_bytes(buffers);
      out.resize(old + bytes);
      net::buffer_copy(net::buffer(out.data() + old, bytes), buffers);
      serializer.consume(bytes);
    });
  } while (!error && !serializer.is_done());
}

}  // namespace

HttpSession::HttpSession(net::ip::tcp::socket socket, std::shared_ptr<HttpSessionContext> context)
    : socket_(std::move(socket)),
      loop_(static_cast<net::io_context&>(socket_.get_executor().context())),
      timer_(socket_.get_executor()),
      context_(std::move(context)) {}

HttpSession::~HttpSession() {
  if (registry_id_ != 0) context_->registry.Remove(registry_id_);
}

void HttpSession::Start() {
  registry_id_ = context_->registry.Add(weak_from_this());
  if (registry_id_ == 0) return;  // shutting down: the socket closes with this session
  net::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->ReadHeader(); });
}

void HttpSession::CloseWhenIdle() {
  net::post(socket_.get_executor(), [self = shared_from_this()] {
    self->stopping_ = true;
    if (!self->busy_) self->Close();
  });
}

void HttpSession::SetDeadline(int64_t deadline_micros) {
  deadline_micros_ = deadline_micros;
  if (timer_armed_ || deadline_micros == kNever) return;
  ArmTimer(deadline_micros);
}

void HttpSession::ArmTimer(int64_t when_micros) {
  // Re-arming an armed timer cancels its wait, whose handler then sees operation_aborted.
  timer_armed_ = true;
  timer_at_micros_ = when_micros;
  timer_.expires_after(std::chrono::microseconds(std::max<int64_t>(0, when_micros - NowMicros())));
  timer_.async_wait([self = shared_from_this()](beast::error_code error) { self->OnTimer(error); });
}

void HttpSession::OnTimer(beast::error_code error) {
  if (error == net::error::operation_aborted) return;  // re-armed, or closed
  timer_armed_ = false;
  if (error || !socket_.is_open()) return;
  const int64_t now = NowMicros();
  if (now >= deadline_micros_) {
    // The phase in progress (a request head or body, or a response's write) took too long:
    // closing the socket ends it with operation_aborted.
    timed_out_ = true;
    return Close();
  }
  if (probe_pending_ && !busy_ && buffer_.size() == 0) {
    probe_pending_ = false;
    // Waiting for a request that cannot come: the client closed its side.
    if (socket_.PeerClosed()) return Close();
    return ArmTimer(std::min(deadline_micros_, now + kEofProbePeriodMicros));  // requests come
  }
  if (probe_pending_) return ArmTimer(std::min(deadline_micros_, now + kEofProbePeriodMicros));
  // Moved later meanwhile, or cleared (kNever: stays unarmed).
  if (deadline_micros_ != kNever) ArmTimer(deadline_micros_);
}

void HttpSession::ReadHeader() {
  if (stopping_) return Close();
  parser_.emplace();
  parser_->header_limit(context_->limits.max_header_bytes);
  parser_->body_limit(context_->limits.max_body_bytes);
  head_done_ = false;
  // The whole head must arrive by then, however it trickles in.
  SetDeadline(NowMicros() + IdleTimeoutMicros());
  Parse();
}

void HttpSession::Parse() {
  beast::error_code error;
  while (buffer_.size() > 0 && !parser_->is_done()) {
    const size_t used = parser_->put(buffer_.data(), error);
    buffer_.consume(used);
    if (error == http::error::need_more) {
      error = {};
      break;
    }
    if (error) return FailRead(error);
    if (used == 0) break;  // nothing parsed and nothing asked: wait for more bytes
  }
  if (!parser_->is_header_done()) return ReadMore();
  busy_ = true;
  if (parser_->is_done()) return Dispatch();
  if (!head_done_) {
    head_done_ = true;
    // The body's own deadline, from the end of the head.
    SetDeadline(NowMicros() + IdleTimeoutMicros());
    // curl and others wait (about a second) for "100 Continue" before sending a large body.
    const auto expect = parser_->get().find(http::field::expect);
    if (expect != parser_->get().end() && beast::iequals(expect->value(), "100-continue")) {
      write_buffer_.assign(kContinue.data(), kContinue.size());
      return Send(0, &HttpSession::OnContinueWritten);
    }
  }
  ReadMore();
}

void HttpSession::OnContinueWritten(beast::error_code error) {
  if (error) return Close();
  ReadMore();
}

void HttpSession::ReadMore() {
  // Room for a whole request in the usual case, so that one read takes it and comes back
  // short (the socket drained: the next read waits for the reactor's event).
  constexpr size_t kReadBytes = 16 * 1024;
  socket_.ReadSome(buffer_.prepare(kReadBytes),
                   [self = shared_from_this()](beast::error_code error, size_t bytes) {
                     self->OnRead(error, bytes);
                   });
}

void HttpSession::OnRead(beast::error_code error, size_t bytes) {
  if (error == net::error::eof) {
    // As Beast's reads: a request cut off is partial_message, none at all end_of_stream.
    if (parser_->got_some()) {
      error = {};
      parser_->put_eof(error);
      if (!error) error = http::error::partial_message;
    } else {
      error = http::error::end_of_stream;
    }
  }
  if (error) return FailRead(error);
  buffer_.commit(bytes);
  // No net::HandlerScope here: a read carries one request, and the store calls of the
  // requests read in one turn of the loop leave together when they are posted.
  Parse();
}

void HttpSession::FailRead(beast::error_code error) {
  if (timed_out_ || !socket_.is_open()) return Close();
  unsigned version = parser_ && parser_->is_header_done() ? parser_->get().version() : 11;
  if (error == http::error::body_limit) {
    busy_ = true;
    return Write(JsonErrorResponse(
        http::status::bad_request,
        absl::StrCat("request body larger than ", context_->limits.max_body_bytes, " bytes"),
        version, false));
  }
  if (error == http::error::header_limit) {
    busy_ = true;
    return Write(JsonErrorResponse(
        http::status::request_header_fields_too_large,
        absl::StrCat("request head larger than ", context_->limits.max_header_bytes, " bytes"),
        version, false));
  }
  if (error.category() == http::make_error_code(http::error::bad_method).category() &&
      error != http::error::end_of_stream && error != http::error::partial_message) {
    busy_ = true;
    return Write(JsonErrorResponse(http::status::bad_request,
                                   absl::StrCat("malformed HTTP request: ", error.message()),
                                   version, false));
  }
  // The client left, or we are shutting down: nothing to answer.
  Close();
}

void HttpSession::Dispatch() {
  // No deadline while the store decides: the store's own deadline bounds it.
  deadline_micros_ = kNever;
  // The handler may answer inline (the in-memory store) or from a store thread: dispatch
  // runs inline on this loop's thread and posts from any other.
  context_->handler->Handle(parser_->get(), [self = shared_from_this()](HttpResponse response) {
    if (self->loop_.get_executor().running_in_this_thread()) {
      self->Write(std::move(response));
      return;
    }
    net::post(self->loop_, [self, response = std::move(response)]() mutable {
      self->Write(std::move(response));
    });
  });
}

void HttpSession::Write(HttpResponse response) {
  if (stopping_) response.keep_alive(false);
  keep_alive_ = response.keep_alive();
  response.prepare_payload();
  write_buffer_.clear();
  AppendWire(response, write_buffer_);
  SetDeadline(NowMicros() + IdleTimeoutMicros());
  Send(0, &HttpSession::OnWrite);
}

void HttpSession::Send(size_t offset, void (HttpSession::*next)(beast::error_code)) {
  beast::error_code error;
  offset += socket_.WriteNow(net::buffer(write_buffer_) + offset, error);
  if (error || offset == write_buffer_.size()) return (this->*next)(error);
  // The socket's buffer is full: the rest when it has room.
  net::async_write(socket_, net::buffer(write_buffer_) + offset,
                   [self = shared_from_this(), next](beast::error_code write_error, size_t) {
                     ((*self).*next)(write_error);
                   });
}

void HttpSession::OnWrite(beast::error_code error) {
  busy_ = false;
  if (error || !keep_alive_ || stopping_) return Close();
  probe_pending_ = true;
  const int64_t probe_by = NowMicros() + kEofProbePeriodMicros;
  if (!timer_armed_ || timer_at_micros_ > probe_by) ArmTimer(probe_by);
  if (buffer_.size() == 0) return ReadHeader();
  // A pipelined request is already buffered: answered from the loop, not from deeper in
  // this stack (a client may pipeline many).
  net::post(socket_.get_executor(), [self = shared_from_this()] { self->ReadHeader(); });
}

void HttpSession::Close() {
  beast::error_code ignored;
  timer_.cancel();
  if (!socket_.is_open()) return;
  socket_.shutdown(net::ip::tcp::socket::shutdown_send, ignored);
  socket_.close(ignored);
}

}  // namespace tollgate::server
