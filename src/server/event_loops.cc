// Copyright tollgate authors.
#include "src/server/event_loops.h"

#include <chrono>
#include <exception>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/asio/post.hpp"
#include "spdlog/spdlog.h"

namespace tollgate::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {
thread_local int current_loop_index = -1;
}  // namespace

absl::StatusOr<std::unique_ptr<EventLoops>> EventLoops::Start(int threads) {
  if (threads < 0) return absl::InvalidArgumentError("threads must be >= 0");
  if (threads == 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads <= 0) threads = 1;
  std::unique_ptr<EventLoops> loops(new EventLoops());
  for (int i = 0; i < threads; ++i) {
    auto loop = std::make_unique<Loop>();
    loop->work.emplace(net::make_work_guard(loop->io));
    loops->loops_.push_back(std::move(loop));
  }
  for (int i = 0; i < threads; ++i) {
    Loop* loop = loops->loops_[i].get();
    loop->thread = std::thread([loop, i] {
      current_loop_index = i;
      for (;;) {
        try {
          loop->io.run();
          break;
        } catch (const std::exception& e) {
          // A handler must not throw; if one does, log it and keep the loop serving.
          spdlog::error("event loop {}: uncaught exception: {}", i, e.what());
        }
      }
    });
  }
  return loops;
}

EventLoops::~EventLoops() {
  Stop();
  Join();
}

int EventLoops::CurrentIndex() { return current_loop_index; }

void EventLoops::Stop() {
  for (const std::unique_ptr<Loop>& loop : loops_) {
    loop->work.reset();
    loop->io.stop();
  }
}

void EventLoops::Join() {
  for (const std::unique_ptr<Loop>& loop : loops_) {
    if (loop->thread.joinable()) loop->thread.join();
  }
}

Listener::Listener(EventLoops& loops, AcceptCallback on_accept)
    : loops_(loops),
      on_accept_(std::move(on_accept)),
      acceptor_(loops.loop(0)),
      retry_timer_(loops.loop(0)) {}

absl::StatusOr<std::shared_ptr<Listener>> Listener::Start(EventLoops& loops,
                                                          const ListenAddress& address,
                                                          AcceptCallback on_accept) {
  auto listener = std::make_shared<Listener>(loops, std::move(on_accept));
  boost::system::error_code error;
  tcp::resolver resolver(loops.loop(0));
  auto endpoints = resolver.resolve(address.host, std::to_string(address.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, error);
  if (error || endpoints.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", FormatListenAddress(address.host, address.port),
                     ": cannot resolve host: ", error ? error.message() : "no address"));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  tcp::acceptor& acceptor = listener->acceptor_;
  acceptor.open(endpoint.protocol(), error);
  if (!error) acceptor.set_option(net::socket_base::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  if (!error) acceptor.listen(net::socket_base::max_listen_connections, error);
  if (error) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", FormatListenAddress(endpoint.address().to_string(), endpoint.port()),
        ": ", error.message()));
  }
  listener->host_ = endpoint.address().to_string();
  listener->port_ = acceptor.local_endpoint().port();
  // The first accept is posted, so that it starts on the listener's loop like every later
  // one (the acceptor is only touched there).
  net::post(acceptor.get_executor(), [listener] { listener->Accept(); });
  return listener;
}

std::string Listener::address() const { return FormatListenAddress(host_, port_); }

void Listener::Accept() {
  if (!acceptor_.is_open()) return;
  // The socket is made on its own loop; this handler runs on the listener's.
  net::io_context& loop =
      loops_.loop(static_cast<int>(accepted_++ % static_cast<uint64_t>(loops_.size())));
  acceptor_.async_accept(
      loop, [self = shared_from_this()](boost::system::error_code error, tcp::socket socket) {
        if (!self->acceptor_.is_open()) return;
        if (error) {
          spdlog::warn("accept on {} failed: {}", self->address(), error.message());
          self->retry_timer_.expires_after(std::chrono::milliseconds(100));
          self->retry_timer_.async_wait([self](boost::system::error_code wait_error) {
            if (!wait_error) self->Accept();
          });
          return;
        }
        net::any_io_executor executor = socket.get_executor();
        net::post(executor, [self, socket = std::move(socket)]() mutable {
          if (!self->stopped_.load(std::memory_order_acquire)) self->on_accept_(std::move(socket));
        });
        self->Accept();
      });
}

void Listener::Stop() {
  stopped_.store(true, std::memory_order_release);
  net::post(acceptor_.get_executor(), [self = shared_from_this()] {
    boost::system::error_code ignored;
    self->acceptor_.close(ignored);
    self->retry_timer_.cancel();
  });
}

}  // namespace tollgate::server
