// Copyright tollgate authors. The redis-server a benchmark runs against.
#ifndef TOLLGATE_BENCH_BENCH_REDIS_H_
#define TOLLGATE_BENCH_BENCH_REDIS_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tollgate::bench {

// A TCP port on 127.0.0.1 that was free a moment ago. Aborts when none can be bound.
inline int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("FreeLoopbackPort");
    std::abort();
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// The URL of the benchmark's Redis: $TOLLGATE_REDIS_URL when set; otherwise a fresh
// `redis-server` (no persistence) on a free loopback port, started on first use and killed
// when the process exits. The caller retries its first connection while it starts.
inline const std::string& BenchRedisUrl() {
  static pid_t pid = -1;
  static const std::string* url = [] {
    if (const char* env = std::getenv("TOLLGATE_REDIS_URL")) return new std::string(env);
    const int port = FreeLoopbackPort();
    pid = fork();
    if (pid == 0) {
      // Not the benchmark's stdout: a pipe reader would wait for redis-server too.
      if (std::freopen("/dev/null", "w", stdout) == nullptr) _exit(127);
      const std::string port_text = std::to_string(port);
      execlp("redis-server", "redis-server", "--port", port_text.c_str(), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", "/tmp", "--loglevel", "warning",
             static_cast<char*>(nullptr));
      _exit(127);
    }
    std::atexit([] {
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    });
    return new std::string("redis://127.0.0.1:" + std::to_string(port));
  }();
  return *url;
}

}  // namespace tollgate::bench

#endif  // TOLLGATE_BENCH_BENCH_REDIS_H_
