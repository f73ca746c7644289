// Copyright tollgate authors. What the floor servers of bench/service_bench.sh share
// (bench/h2_floor_server, bench/http_floor_server): epoll loops over non-blocking sockets, one
// per thread, and, with `--redis`, one pipelined Redis connection per loop through which
// every request passes before it is answered. For measurement only; not part of `tollgate
// serve`.
//
// A floor is the least a server of its protocol must do per request on this machine, so that
// a row of tollgate reads as a ratio to it. With `--redis HOST:PORT` each request also costs
// one Redis round trip, as a decision of tollgate's Redis store does: the request waits for
// one EVALSHA of a small script with a token bucket's Redis calls (TIME, GET, SET with PX;
// the key cycles over `--keys`), and is answered when its reply comes. The commands a loop
// queues in one turn (one return of epoll_wait) leave in one write at the end of the turn, and
// the answers that one read of replies releases leave in one write per connection: the
// batching a hand-written event loop gets, under tollgate's Redis rows.
//
// Usage of a floor: `--listen HOST:PORT` (IPv4 literal; port 0 picks one), `--threads N`
// (loops; the first accepts and deals connection k to loop k mod N, as `tollgate serve
// --threads N` does), `--redis HOST:PORT`, `--keys N` (default 10000), and the floor's own
// flags. Prints `listening port=NNNN` on stdout (flushed) once it accepts connections; exits 0
// on SIGTERM or SIGINT, 2 on bad arguments, 1 if it cannot listen or reach Redis.
#ifndef TOLLGATE_BENCH_FLOOR_SERVER_H_
#define TOLLGATE_BENCH_FLOOR_SERVER_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace floor_server {

struct Options {
  std::string host = "127.0.0.1";
  int port = 0;
  int threads = 1;
  std::string redis_host;  // empty: answer at once, no Redis
  int redis_port = 0;
  uint64_t keys = 10000;
};

// The floor's own flags: returns false for a flag it does not know.
using ExtraFlag = std::function<bool(const std::string& flag, const std::string& value)>;

[[noreturn]] inline void Usage(const std::string& program, const std::string& usage,
                               const std::string& message) {
  std::fprintf(stderr, "%s: %s\nusage: %s\n", program.c_str(), message.c_str(), usage.c_str());
  std::exit(2);
}

inline bool SplitHostPort(const std::string& value, std::string* host, int* port) {
  const size_t colon = value.rfind(':');
  if (colon == std::string::npos) return false;
  *host = value.substr(0, colon);
  *port = std::atoi(value.c_str() + colon + 1);
  return *port >= 0 && *port <= 65535;
}

inline Options ParseOptions(int argc, char** argv, const std::string& program,
                            const std::string& usage, const ExtraFlag& extra) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Usage(program, usage, "missing value for " + flag);
    const std::string value = argv[++i];
    if (flag == "--listen") {
      if (!SplitHostPort(value, &options.host, &options.port)) {
        Usage(program, usage, "--listen needs HOST:PORT");
      }
    } else if (flag == "--threads") {
      options.threads = std::atoi(value.c_str());
      if (options.threads < 1 || options.threads > 64) Usage(program, usage, "--threads: 1 to 64");
    } else if (flag == "--redis") {
      if (!SplitHostPort(value, &options.redis_host, &options.redis_port) ||
          options.redis_port == 0) {
        Usage(program, usage, "--redis needs HOST:PORT");
      }
    } else if (flag == "--keys") {
      const long long keys = std::atoll(value.c_str());
      if (keys < 1) Usage(program, usage, "--keys needs a positive integer");
      options.keys = static_cast<uint64_t>(keys);
    } else if (!extra || !extra(flag, value)) {
      Usage(program, usage, "unknown flag " + flag);
    }
  }
  return options;
}

inline int ConnectTcp(const std::string& host, int port, bool non_blocking) {
  const int fd =
      socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (non_blocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1 ||
      connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Writes all of `bytes` to a non-blocking socket, waiting for room when it is full (a floor's
// writes are small; a full socket is the exception). False on a write error.
inline bool WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t sent = write(fd, bytes.data(), bytes.size());
    if (sent >= 0) {
      bytes.remove_prefix(static_cast<size_t>(sent));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd room{fd, POLLOUT, 0};
      poll(&room, 1, -1);
    } else if (errno != EINTR) {
      return false;
    }
  }
  return true;
}

// One loop's pipelined connection to Redis: Queue() appends an EVALSHA of the floor's script,
// Flush() writes what is queued in one write, ReadReplies() counts the replies that came.
class Redis {
 public:
  // A token bucket's Redis calls, without its arithmetic: what each request costs Redis.
  static constexpr std::string_view kScript =
      "local t = redis.call('TIME') "
      "local old = redis.call('GET', KEYS[1]) "
      "redis.call('SET', KEYS[1], t[1] .. '.' .. t[2], 'PX', 60000) "
      "return 1";

  // Connects (blocking), loads the script, then makes the socket non-blocking. Null with
  // `*error` set when Redis cannot be reached or refuses the script.
  static std::unique_ptr<Redis> Connect(const Options& options, std::string* error) {
    const int fd = ConnectTcp(options.redis_host, options.redis_port, /*non_blocking=*/false);
    if (fd < 0) {
      *error = "cannot connect to Redis at " + options.redis_host + ":" +
               std::to_string(options.redis_port) + ": " + std::strerror(errno);
      return nullptr;
    }
    auto redis = std::unique_ptr<Redis>(new Redis(fd, options.keys));
    const std::string load = Command({"SCRIPT", "LOAD", std::string(kScript)});
    char reply[256];
    ssize_t got = 0;
    if (write(fd, load.data(), load.size()) != static_cast<ssize_t>(load.size()) ||
        (got = read(fd, reply, sizeof(reply))) < 46 || reply[0] != '$') {
      *error = "Redis did not load the floor's script: " +
               std::string(reply, static_cast<size_t>(got > 0 ? got : 0));
      return nullptr;
    }
    const std::string sha(reply + 5, 40);  // "$40\r\n" + 40 hex digits
    redis->prefix_ = "*4\r\n$7\r\nEVALSHA\r\n$40\r\n" + sha + "\r\n$1\r\n1\r\n";
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return redis;
  }

  Redis(const Redis&) = delete;
  Redis& operator=(const Redis&) = delete;
  ~Redis() { close(fd_); }

  int fd() const { return fd_; }

  // Queues one EVALSHA on the next key ("floor:{N}", N cycling over the keys).
  void Queue() {
    char key[40] = "floor:{";
    char* end = std::to_chars(key + 7, key + sizeof(key) - 1, next_key_++ % keys_).ptr;
    *end++ = '}';
    char length[8];
    char* length_end = std::to_chars(length, length + sizeof(length), end - key).ptr;
    out_ += prefix_;
    out_ += '$';
    out_.append(length, length_end);
    out_ += "\r\n";
    out_.append(key, end);
    out_ += "\r\n";
  }

  // Writes what is queued. False on a write error.
  bool Flush() {
    if (out_.empty()) return true;
    const bool written = WriteAll(fd_, out_);
    out_.clear();
    return written;
  }

  // Reads what the socket holds and returns how many whole replies it completed (the script
  // answers `:1`), or -1 when Redis closed the connection or answered an error.
  int ReadReplies() {
    char buffer[16384];
    int replies = 0;
    for (;;) {
      const ssize_t got = read(fd_, buffer, sizeof(buffer));
      if (got == 0) return -1;
      if (got < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        return -1;
      }
      for (ssize_t i = 0; i < got; ++i) {
        const char c = buffer[i];
        if (at_line_start_ && c == '-') return -1;
        at_line_start_ = c == '\n';
        if (c == '\n') ++replies;
      }
      if (static_cast<size_t>(got) < sizeof(buffer)) break;
    }
    return replies;
  }

 private:
  Redis(int fd, uint64_t keys) : fd_(fd), keys_(keys) {}

  static std::string Command(const std::vector<std::string>& args) {
    std::string command = "*";
    command.append(std::to_string(args.size())).append("\r\n");
    for (const std::string& arg : args) {
      command.append("$").append(std::to_string(arg.size())).append("\r\n");
      command.append(arg).append("\r\n");
    }
    return command;
  }

  const int fd_;
  const uint64_t keys_;
  uint64_t next_key_ = 0;
  std::string prefix_;  // the EVALSHA command up to its key
  std::string out_;
  bool at_line_start_ = true;
};

// A connection of a floor's protocol. The loop calls OnReadable on input and Flush when the
// socket has room again; Release answers the oldest request waiting for Redis.
class Connection {
 public:
  explicit Connection(int fd) : fd_(fd) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  virtual ~Connection() { close(fd_); }

  // Reads what the socket holds and handles it. False: close the connection.
  virtual bool OnReadable() = 0;
  // Writes pending output. False: close the connection.
  virtual bool Flush() = 0;
  // Answers request `tag` (what the connection passed to Loop::Defer), now that its Redis
  // reply came. The answer leaves with the connection's next Flush.
  virtual void Release(int32_t tag) = 0;
  // Output waits for room in the socket (the loop then asks for EPOLLOUT).
  bool wants_output() const { return output_offset_ < output_.size(); }

  int fd() const { return fd_; }
  uint64_t id = 0;         // set by the loop
  bool flush_due = false;  // the loop's: in its list of connections to flush this turn

 protected:
  // Hands `consume(bytes, size)` every chunk the socket holds, until it is drained. False on
  // end of file, a read error, or when `consume` returns false.
  template <typename Consume>
  bool ReadAvailable(Consume consume) {
    char buffer[65536];
    for (;;) {
      const ssize_t got = read(fd_, buffer, sizeof(buffer));
      if (got > 0) {
        if (!consume(buffer, static_cast<size_t>(got))) return false;
        if (static_cast<size_t>(got) < sizeof(buffer)) return true;
        continue;
      }
      if (got == 0) return false;
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
  }

  // Writes output_: true when all of it went (output_ is then empty) or the socket is full
  // (the rest when it has room: wants_output()), false on a write error.
  bool WriteOutput() {
    while (output_offset_ < output_.size()) {
      const ssize_t sent =
          write(fd_, output_.data() + output_offset_, output_.size() - output_offset_);
      if (sent < 0) {
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;
      }
      output_offset_ += static_cast<size_t>(sent);
    }
    output_.clear();
    output_offset_ = 0;
    return true;
  }

  std::string output_;  // what is to be written, from output_offset_ on

 private:
  const int fd_;
  size_t output_offset_ = 0;
};

// One event loop: the connections handed to it through its pipe (an accepted fd, 4 bytes per
// connection), for loop 0 the listener, and with --redis its Redis connection.
class Loop {
 public:
  using Factory = std::function<std::unique_ptr<Connection>(int fd, Loop& loop)>;

  Loop(const Options& options, Factory factory)
      : options_(options), factory_(std::move(factory)), epoll_(epoll_create1(EPOLL_CLOEXEC)) {
    if (pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) std::abort();
    Watch(pipe_[0], kPipeTag);
  }
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // Connects this loop's Redis connection (with --redis). False with `*error` set on failure.
  bool ConnectRedis(std::string* error) {
    redis_ = Redis::Connect(options_, error);
    if (redis_ == nullptr) return false;
    Watch(redis_->fd(), kRedisTag);
    return true;
  }

  void AddListener(int listener, std::vector<std::unique_ptr<Loop>>* loops) {
    listener_ = listener;
    loops_ = loops;
    Watch(listener, kListenerTag);
  }

  // Hands an accepted socket to this loop (from any thread).
  void Hand(int fd) {
    if (write(pipe_[1], &fd, sizeof(fd)) != sizeof(fd)) close(fd);
  }

  // With --redis: request `tag` of `connection` waits for one Redis round trip (and is
  // answered by Connection::Release). Without: false, and the connection answers at once.
  bool Defer(Connection& connection, int32_t tag) {
    if (redis_ == nullptr) return false;
    redis_->Queue();
    waiting_.push_back({connection.id, tag});
    return true;
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
      // The end of the turn: the answers Redis released, then the commands queued.
      for (const uint64_t id : flush_due_) {
        const auto found = connections_.find(id);
        if (found == connections_.end()) continue;
        Connection* connection = found->second.get();
        connection->flush_due = false;
        const bool was_waiting = connection->wants_output();  // before Flush changes it
        AfterIo(connection, was_waiting, connection->Flush());
      }
      flush_due_.clear();
      if (redis_ != nullptr && !redis_->Flush()) Die("writing to Redis failed");
    }
  }

 private:
  static constexpr uint64_t kPipeTag = 1, kListenerTag = 2, kRedisTag = 3;
  struct Waiting {
    uint64_t connection;
    int32_t tag;
  };

  [[noreturn]] static void Die(const char* message) {
    std::fprintf(stderr, "floor server: %s\n", message);
    std::_Exit(1);
  }

  void Watch(int fd, uint64_t tag) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = tag;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &event);
  }

  void OnEvent(const epoll_event& event) {
    const uint64_t tag = event.data.u64;
    if (tag == kListenerTag) {
      for (;;) {
        const int fd = accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        (*loops_)[accepted_++ % loops_->size()]->Hand(fd);
      }
      return;
    }
    if (tag == kPipeTag) {
      int fd = -1;
      while (read(pipe_[0], &fd, sizeof(fd)) == sizeof(fd)) Add(fd);
      return;
    }
    if (tag == kRedisTag) {
      const int replies = redis_->ReadReplies();
      if (replies < 0) Die("Redis closed the connection or answered an error");
      for (int i = 0; i < replies && !waiting_.empty(); ++i) {
        const Waiting waiting = waiting_.front();
        waiting_.pop_front();
        const auto found = connections_.find(waiting.connection);
        if (found == connections_.end()) continue;  // closed meanwhile
        found->second->Release(waiting.tag);
        if (!found->second->flush_due) {
          found->second->flush_due = true;
          flush_due_.push_back(waiting.connection);
        }
      }
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
    AfterIo(connection, was_waiting, open);
  }

  // Closes the connection, or asks for EPOLLOUT only while its output waits on a full socket.
  void AfterIo(Connection* connection, bool was_waiting, bool open) {
    if (!open) {
      epoll_ctl(epoll_, EPOLL_CTL_DEL, connection->fd(), nullptr);
      connections_.erase(connection->id);
      return;
    }
    if (was_waiting == connection->wants_output()) return;
    epoll_event update{};
    update.events = EPOLLIN | (connection->wants_output() ? static_cast<uint32_t>(EPOLLOUT) : 0u);
    update.data.ptr = connection;
    epoll_ctl(epoll_, EPOLL_CTL_MOD, connection->fd(), &update);
  }

  void Add(int fd) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::unique_ptr<Connection> connection = factory_(fd, *this);
    if (connection == nullptr) return;
    Connection* raw = connection.get();
    raw->id = ++last_id_;
    epoll_event added{};
    added.events = EPOLLIN;
    added.data.ptr = raw;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &added);
    connections_.emplace(raw->id, std::move(connection));
    AfterIo(raw, false, raw->Flush());  // what the protocol says first (HTTP/2's SETTINGS)
  }

  const Options& options_;
  const Factory factory_;
  const int epoll_;
  int pipe_[2] = {-1, -1};
  int listener_ = -1;
  std::vector<std::unique_ptr<Loop>>* loops_ = nullptr;
  size_t accepted_ = 0;
  uint64_t last_id_ = 0;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections_;
  std::unique_ptr<Redis> redis_;
  std::deque<Waiting> waiting_;
  std::vector<uint64_t> flush_due_;
};

inline int Listen(const Options& options) {
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

// Listens, starts `options.threads` loops of `factory`'s connections (each with its Redis
// connection under --redis), prints `listening port=N`, and exits 0 on SIGTERM or SIGINT.
[[noreturn]] inline void Serve(const std::string& program, const Options& options,
                               const Loop::Factory& factory) {
  const int listener = Listen(options);
  if (listener < 0) {
    std::fprintf(stderr, "%s: cannot listen on %s:%d: %s\n", program.c_str(), options.host.c_str(),
                 options.port, std::strerror(errno));
    std::exit(1);
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

  std::vector<std::unique_ptr<Loop>> loops;
  for (int i = 0; i < options.threads; ++i) {
    loops.push_back(std::make_unique<Loop>(options, factory));
    std::string error;
    if (!options.redis_host.empty() && !loops.back()->ConnectRedis(&error)) {
      std::fprintf(stderr, "%s: %s\n", program.c_str(), error.c_str());
      std::exit(1);
    }
  }
  loops[0]->AddListener(listener, &loops);
  for (auto& loop : loops) std::thread([raw = loop.get()] { raw->Run(); }).detach();

  std::printf("listening port=%d\n", ntohs(bound.sin_port));
  std::fflush(stdout);
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  // The loops never return; the process ends with them (nothing to flush or release).
  std::_Exit(0);
}

}  // namespace floor_server

#endif  // TOLLGATE_BENCH_FLOOR_SERVER_H_
