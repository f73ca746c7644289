// Copyright tollgate authors.
#include "src/server/http_session.h"

#include <chrono>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/asio/dispatch.hpp"
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

// The response as it goes on the wire: status line, the fields as set, a blank line, the
// body. (The handler has set Content-Length and Connection.)
void SerializeResponse(const HttpResponse& response, std::string& out) {
  out.clear();
  out += response.version() == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  absl::StrAppend(&out, response.result_int(), " ");
  const auto reason = response.reason();
  out.append(reason.data(), reason.size());
  out += "\r\n";
  for (const auto& field : response) {
    const auto name = field.name_string();
    const auto value = field.value();
    out.append(name.data(), name.size());
    out += ": ";
    out.append(value.data(), value.size());
    out += "\r\n";
  }
  out += "\r\n";
  out += response.body();
}

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace

HttpSession::HttpSession(net::ip::tcp::socket socket, std::shared_ptr<HttpSessionContext> context)
    : socket_(std::move(socket)), timer_(socket_.get_executor()), context_(std::move(context)) {}

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

void HttpSession::SetDeadline(std::chrono::steady_clock::time_point deadline) {
  deadline_ = deadline;
  if (timer_armed_ || deadline == std::chrono::steady_clock::time_point::max()) return;
  timer_armed_ = true;
  timer_.expires_at(deadline);
  timer_.async_wait([self = shared_from_this()](beast::error_code error) { self->OnTimer(error); });
}

void HttpSession::OnTimer(beast::error_code error) {
  timer_armed_ = false;
  if (error || !socket_.is_open()) return;
  if (std::chrono::steady_clock::now() >= deadline_) {
    // The phase in progress (a request head or body, or a response's write) took too long:
    // closing the socket ends it with operation_aborted.
    timed_out_ = true;
    return Close();
  }
  SetDeadline(deadline_);  // moved later meanwhile, or cleared (max: stays unarmed)
}

void HttpSession::ReadHeader() {
  if (stopping_) return Close();
  parser_.emplace();
  parser_->header_limit(context_->limits.max_header_bytes);
  parser_->body_limit(context_->limits.max_body_bytes);
  SetDeadline(std::chrono::steady_clock::now() + context_->limits.idle_timeout);
  http::async_read_header(
      socket_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code error, size_t) { self->OnReadHeader(error); });
}

void HttpSession::OnReadHeader(beast::error_code error) {
  if (error) return FailRead(error);
  busy_ = true;
  if (parser_->is_done()) return Dispatch();
  // curl and others wait (about a second) for "100 Continue" before sending a large body.
  const auto& head = parser_->get();
  auto expect = head.find(http::field::expect);
  if (expect != head.end() && beast::iequals(expect->value(), "100-continue")) {
    net::async_write(socket_, net::buffer(kContinue.data(), kContinue.size()),
                     [self = shared_from_this()](beast::error_code write_error, size_t) {
                       if (write_error) return self->Close();
                       self->ReadBody();
                     });
    return;
  }
  ReadBody();
}

void HttpSession::ReadBody() {
  SetDeadline(std::chrono::steady_clock::now() + context_->limits.idle_timeout);
  http::async_read(
      socket_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code error, size_t) { self->OnReadBody(error); });
}

void HttpSession::OnReadBody(beast::error_code error) {
  if (error) return FailRead(error);
  Dispatch();
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
  deadline_ = std::chrono::steady_clock::time_point::max();
  // The handler may answer inline (the in-memory store) or from a store thread: dispatch
  // runs inline on this loop's thread and posts from any other.
  context_->handler->Handle(parser_->get(), [self = shared_from_this()](HttpResponse response) {
    net::dispatch(self->socket_.get_executor(), [self, response = std::move(response)]() mutable {
      self->Write(std::move(response));
    });
  });
}

void HttpSession::Write(HttpResponse response) {
  if (stopping_) response.keep_alive(false);
  keep_alive_ = response.keep_alive();
  SerializeResponse(response, write_buffer_);
  SetDeadline(std::chrono::steady_clock::now() + context_->limits.idle_timeout);
  net::async_write(
      socket_, net::buffer(write_buffer_),
      [self = shared_from_this()](beast::error_code error, size_t) { self->OnWrite(error); });
}

void HttpSession::OnWrite(beast::error_code error) {
  busy_ = false;
  if (error || !keep_alive_ || stopping_) return Close();
  ReadHeader();
}

void HttpSession::Close() {
  beast::error_code ignored;
  timer_.cancel();
  if (!socket_.is_open()) return;
  socket_.shutdown(net::ip::tcp::socket::shutdown_send, ignored);
  socket_.close(ignored);
}

}  // namespace tollgate::server
