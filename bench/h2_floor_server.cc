// Copyright tollgate authors. The floor of a unary gRPC call over HTTP/2 on this machine: a
// minimal server written directly on libnghttp2 (epoll, non-blocking sockets) that
// answers every request on every stream with HTTP 200, `content-type: application/grpc`, one
// length-prefixed message (a RateLimitResponse with `overall_code = OK`, serialized once at
// start) and the trailers `grpc-status: 0`. It reads nothing of the request beyond what
// HTTP/2 needs (no path routing, no message parsing, no deadline): the least any gRPC server
// must do per call, under every gRPC row of bench/service_bench.sh. For measurement only; not
// part of `tollgate serve`.
//
//   h2_floor_server [--listen 127.0.0.1:0] [--max-concurrent-streams N] [--threads N]
//
// --threads N (default 1) runs N event loops, one per thread, each with its own epoll; the first
// accepts and hands connection k to loop k mod N, as `tollgate serve --threads N` spreads its
// connections over its loops, so that a row of tollgate and its floor have the same shape.
//
// Prints `listening port=NNNN` on stdout (flushed) once it accepts connections; exits 0 on
// SIGTERM or SIGINT, 2 on bad arguments, 1 if it cannot listen. IPv4 literal addresses only.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.pb.h"

namespace {

struct Options {
  std::string host = "127.0.0.1";
  int port = 0;
  uint32_t max_concurrent_streams = 1024;
  int threads = 1;
};

[[noreturn]] void Usage(const char* message) {
  std::fprintf(stderr,
               "h2_floor_server: %s\nusage: h2_floor_server [--listen HOST:PORT] "
               "[--max-concurrent-streams N] [--threads N]\n",
               message);
  std::exit(2);
}

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Usage(("missing value for " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--listen") {
      const size_t colon = value.rfind(':');
      if (colon == std::string::npos) Usage("--listen needs HOST:PORT");
      options.host = value.substr(0, colon);
      options.port = std::atoi(value.c_str() + colon + 1);
      if (options.port < 0 || options.port > 65535) Usage("--listen: bad port");
    } else if (flag == "--max-concurrent-streams") {
      const long streams = std::atol(value.c_str());
      if (streams < 1) Usage("--max-concurrent-streams needs a positive integer");
      options.max_concurrent_streams = static_cast<uint32_t>(streams);
    } else if (flag == "--threads") {
      options.threads = std::atoi(value.c_str());
      if (options.threads < 1 || options.threads > 64) Usage("--threads needs 1 to 64");
    } else {
      Usage(("unknown flag " + flag).c_str());
    }
  }
  return options;
}

// The one answer, framed: gRPC's 5-byte prefix (not compressed, big-endian length), then the
// serialized RateLimitResponse. Set once in main before any connection.
std::string* g_framed_response = nullptr;

nghttp2_nv Header(const char* name, const char* value) {
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name)),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value)), std::strlen(name),
                    std::strlen(value),
                    NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
}

// One accepted socket and its HTTP/2 server session. Owned by the connection table in main;
// used only on the one thread.
class Connection {
 public:
  explicit Connection(int fd) : fd_(fd) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() {
    if (session_ != nullptr) nghttp2_session_del(session_);
    close(fd_);
  }

  // Returns false if the session cannot be set up (the connection is then dropped).
  bool Start(nghttp2_session_callbacks* callbacks, uint32_t max_concurrent_streams) {
    if (nghttp2_session_server_new(&session_, callbacks, this) != 0) return false;
    const nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, max_concurrent_streams}};
    return nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, 1) == 0;
  }

  // Reads what the socket holds, answers every finished request, writes what the session has
  // to send. Returns false when the connection is to be closed.
  bool OnReadable() {
    uint8_t buffer[65536];
    for (;;) {
      const ssize_t got = read(fd_, buffer, sizeof(buffer));
      if (got > 0) {
        if (nghttp2_session_mem_recv(session_, buffer, static_cast<size_t>(got)) < 0) return false;
        if (static_cast<size_t>(got) < sizeof(buffer)) break;
        continue;
      }
      if (got == 0) return false;
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return false;
    }
    return Flush();
  }

  // Writes pending output; returns false on a write error or when the session is done.
  bool Flush() {
    for (;;) {
      while (pending_offset_ < pending_.size()) {
        const ssize_t sent =
            write(fd_, pending_.data() + pending_offset_, pending_.size() - pending_offset_);
        if (sent < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) return true;  // EPOLLOUT resumes
          return false;
        }
        pending_offset_ += static_cast<size_t>(sent);
      }
      pending_.clear();
      pending_offset_ = 0;
      // Everything the session has now, gathered into one write.
      for (;;) {
        const uint8_t* data = nullptr;
        const ssize_t length = nghttp2_session_mem_send(session_, &data);
        if (length < 0) return false;
        if (length == 0) break;
        pending_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(length));
      }
      if (pending_.empty()) break;
    }
    return nghttp2_session_want_read(session_) != 0 || nghttp2_session_want_write(session_) != 0;
  }

  bool wants_output() const { return pending_offset_ < pending_.size(); }
  int fd() const { return fd_; }

  // A request ended (END_STREAM seen): headers, the message, then trailers.
  int Answer(int32_t stream_id) {
    const nghttp2_nv headers[] = {Header(":status", "200"),
                                  Header("content-type", "application/grpc")};
    nghttp2_data_provider provider;
    provider.source.ptr = nullptr;
    provider.read_callback = &Connection::ReadMessage;
    return nghttp2_submit_response(session_, stream_id, headers, 2, &provider) == 0
               ? 0
               : NGHTTP2_ERR_CALLBACK_FAILURE;
  }

 private:
  // The body of a response: the framed message in one DATA frame, then the trailers (the
  // stream ends with them, not with the DATA frame).
  static ssize_t ReadMessage(nghttp2_session* session, int32_t stream_id, uint8_t* buffer,
                             size_t length, uint32_t* data_flags, nghttp2_data_source* /*source*/,
                             void* /*user_data*/) {
    const std::string& message = *g_framed_response;
    if (length < message.size()) return NGHTTP2_ERR_DEFERRED;  // never with a 16 KB frame
    std::copy(message.begin(), message.end(), buffer);
    *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    const nghttp2_nv trailers[] = {Header("grpc-status", "0")};
    if (nghttp2_submit_trailer(session, stream_id, trailers, 1) != 0) {
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return static_cast<ssize_t>(message.size());
  }

  const int fd_;
  nghttp2_session* session_ = nullptr;
  std::string pending_;
  size_t pending_offset_ = 0;
};

int OnFrameReceived(nghttp2_session* /*session*/, const nghttp2_frame* frame, void* user_data) {
  const bool request_frame =
      frame->hd.type == NGHTTP2_DATA ||
      (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST);
  if (request_frame && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
    return static_cast<Connection*>(user_data)->Answer(frame->hd.stream_id);
  }
  return 0;
}

int Listen(const Options& options) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(options.port));
  if (inet_pton(AF_INET, options.host.c_str(), &address.sin_addr) != 1 ||
      bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd, 1024) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// One event loop: the connections handed to it through its pipe (an accepted fd, 4 bytes per
// connection), and, for loop 0, the listener, whose connections it deals out round-robin.
class Loop {
 public:
  Loop(const Options& options, nghttp2_session_callbacks* callbacks)
      : options_(options), callbacks_(callbacks), epoll_(epoll_create1(EPOLL_CLOEXEC)) {
    if (pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) std::abort();
    Watch(pipe_[0], static_cast<uint64_t>(pipe_[0]));
  }
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  void AddListener(int listener, std::vector<std::unique_ptr<Loop>>* loops) {
    listener_ = listener;
    loops_ = loops;
    Watch(listener, static_cast<uint64_t>(listener));
  }

  // Hands an accepted socket to this loop (from any thread).
  void Hand(int fd) {
    if (write(pipe_[1], &fd, sizeof(fd)) != sizeof(fd)) close(fd);
  }

  [[noreturn]] void Run() {
    epoll_event events[256];
    for (;;) {
      const int ready = epoll_wait(epoll_, events, 256, -1);
      if (ready < 0) {
        if (errno == EINTR) continue;
        std::abort();
      }
      for (int i = 0; i < ready; ++i) OnEvent(events[i]);
    }
  }

 private:
  void Watch(int fd, uint64_t tag) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = tag;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &event);
  }

  void OnEvent(const epoll_event& event) {
    const uint64_t tag = event.data.u64;
    if (listener_ >= 0 && tag == static_cast<uint64_t>(listener_)) {
      for (;;) {
        const int fd = accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        (*loops_)[accepted_++ % loops_->size()]->Hand(fd);
      }
      return;
    }
    if (tag == static_cast<uint64_t>(pipe_[0])) {
      int fd = -1;
      while (read(pipe_[0], &fd, sizeof(fd)) == sizeof(fd)) Add(fd);
      return;
    }
    Connection* connection = static_cast<Connection*>(event.data.ptr);
    const bool was_waiting = connection->wants_output();
    bool open = true;
    if ((event.events & (EPOLLERR | EPOLLHUP)) != 0 && (event.events & EPOLLIN) == 0) {
      open = false;
    } else if ((event.events & EPOLLIN) != 0) {
      open = connection->OnReadable();
    } else if ((event.events & EPOLLOUT) != 0) {
      open = connection->Flush();
    }
    if (!open) {
      Drop(connection);
    } else if (was_waiting != connection->wants_output()) {
      // Asks for EPOLLOUT only while output waits on a full socket.
      epoll_event update{};
      update.events =
          EPOLLIN | (connection->wants_output() ? static_cast<uint32_t>(EPOLLOUT) : 0u);
      update.data.ptr = connection;
      epoll_ctl(epoll_, EPOLL_CTL_MOD, connection->fd(), &update);
    }
  }

  void Add(int fd) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto connection = std::make_unique<Connection>(fd);
    Connection* raw = connection.get();
    if (!connection->Start(callbacks_, options_.max_concurrent_streams)) return;
    epoll_event added{};
    added.events = EPOLLIN;
    added.data.ptr = raw;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &added);
    connections_.emplace(raw, std::move(connection));
    if (!raw->Flush()) Drop(raw);  // the server's SETTINGS
  }

  void Drop(Connection* connection) {
    epoll_ctl(epoll_, EPOLL_CTL_DEL, connection->fd(), nullptr);
    connections_.erase(connection);
  }

  const Options& options_;
  nghttp2_session_callbacks* const callbacks_;
  const int epoll_;
  int pipe_[2] = {-1, -1};
  int listener_ = -1;
  std::vector<std::unique_ptr<Loop>>* loops_ = nullptr;
  size_t accepted_ = 0;
  std::unordered_map<Connection*, std::unique_ptr<Connection>> connections_;
};

}  // namespace

int main(int argc, char** argv) {
  const Options options = ParseOptions(argc, argv);

  envoy::service::ratelimit::v3::RateLimitResponse response;
  response.set_overall_code(envoy::service::ratelimit::v3::RateLimitResponse::OK);
  const std::string serialized = response.SerializeAsString();
  std::string framed(5, '\0');
  const uint32_t size = static_cast<uint32_t>(serialized.size());
  framed[1] = static_cast<char>(size >> 24);
  framed[2] = static_cast<char>(size >> 16);
  framed[3] = static_cast<char>(size >> 8);
  framed[4] = static_cast<char>(size);
  framed += serialized;
  g_framed_response = &framed;

  const int listener = Listen(options);
  if (listener < 0) {
    std::fprintf(stderr, "h2_floor_server: cannot listen on %s:%d: %s\n", options.host.c_str(),
                 options.port, std::strerror(errno));
    return 1;
  }
  sockaddr_in bound{};
  socklen_t bound_length = sizeof(bound);
  getsockname(listener, reinterpret_cast<sockaddr*>(&bound), &bound_length);

  // Every thread blocks the stop signals; the main thread waits for one and exits.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, OnFrameReceived);

  std::vector<std::unique_ptr<Loop>> loops;
  for (int i = 0; i < options.threads; ++i) loops.push_back(std::make_unique<Loop>(options, callbacks));
  loops[0]->AddListener(listener, &loops);
  for (auto& loop : loops) std::thread([raw = loop.get()] { raw->Run(); }).detach();

  std::printf("listening port=%d\n", ntohs(bound.sin_port));
  std::fflush(stdout);
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  // The loops never return; the process ends with them (nothing to flush or release).
  std::_Exit(0);
}
