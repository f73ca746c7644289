// Copyright tollgate authors.
#include "tests/support/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tollgate::testing {
namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

FaultProxy::FaultProxy(int target_port) : target_port_(target_port) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr = Loopback(0);
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 64) != 0) {
    // Nothing a test or benchmark could do without its proxy: say why and stop.
    std::fprintf(stderr, "FaultProxy: cannot listen on 127.0.0.1: %s\n", std::strerror(errno));
    std::abort();
  }
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

FaultProxy::~FaultProxy() {
  stopping_ = true;
  shutdown(listen_fd_, SHUT_RDWR);
  close(listen_fd_);
  if (accept_thread_.joinable()) accept_thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::thread& thread : threads_) thread.join();
}

void FaultProxy::set_fault(Fault fault, int delay_ms) {
  delay_ms_ = delay_ms;
  fault_ = fault;
}

void FaultProxy::AcceptLoop() {
  while (!stopping_) {
    pollfd listener{listen_fd_, POLLIN, 0};
    if (poll(&listener, 1, 50) <= 0) continue;
    int client = accept(listen_fd_, nullptr, nullptr);
    if (client < 0) continue;
    if (fault_ == Fault::kDrop) {
      close(client);
      continue;
    }
    int server = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in target = Loopback(target_port_);
    if (connect(server, reinterpret_cast<sockaddr*>(&target), sizeof(target)) != 0) {
      close(server);
      close(client);
      continue;
    }
    int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::lock_guard<std::mutex> lock(mutex_);
    threads_.emplace_back([this, client, server] { Pump(client, server); });
  }
}

void FaultProxy::Pump(int client_fd, int server_fd) {
  pollfd fds[2] = {{client_fd, POLLIN, 0}, {server_fd, POLLIN, 0}};
  char buffer[16384];
  while (!stopping_) {
    if (fault_ == Fault::kDrop) break;
    if (fault_ == Fault::kBlackHole) {
      // Like a network partition: nothing is read, so bytes wait in the kernel's buffers
      // (as TCP retransmits would) and arrive, in order, once the fault is lifted.
      // Polled every millisecond, so lifting the fault costs at most that much latency.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    if (poll(fds, 2, 20) <= 0) continue;
    // The fault may have changed while poll waited: bytes that arrived after it was set
    // must not pass.
    if (fault_ != Fault::kPass && fault_ != Fault::kDelay) continue;
    bool closed = false;
    for (int i = 0; i < 2; ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      ssize_t n = recv(fds[i].fd, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        closed = true;
        break;
      }
      if (fault_ == Fault::kDelay) {
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_.load()));
      }
      if (!WriteAll(fds[1 - i].fd, buffer, static_cast<size_t>(n))) {
        closed = true;
        break;
      }
    }
    if (closed) break;
  }
  close(client_fd);
  close(server_fd);
}

}  // namespace tollgate::testing
