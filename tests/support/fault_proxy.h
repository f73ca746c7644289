// Copyright tollgate authors. A TCP proxy on loopback that can delay, drop or black-hole.
#ifndef TOLLGATE_TESTS_SUPPORT_FAULT_PROXY_H_
#define TOLLGATE_TESTS_SUPPORT_FAULT_PROXY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tollgate::testing {

// Listens on 127.0.0.1:port() and forwards every connection to 127.0.0.1:target_port, with
// TCP_NODELAY on both sides. Used by tests and by bench/resilience_bench (no gtest inside:
// the library tollgate_fault_proxy links only threads); a proxy that cannot listen aborts
// with the reason.
// The fault applies to bytes forwarded from then on, in both directions:
//   kPass       forward at once;
//   kDelay      hold every chunk for `delay_ms` before forwarding it;
//   kBlackHole  nothing arrives either way, connections stay open (no RST, no FIN): a
//               partition. Bytes sent meanwhile are delivered in order once lifted;
//   kDrop       close every connection (and every new one) at once.
class FaultProxy {
 public:
  enum class Fault { kPass, kDelay, kBlackHole, kDrop };

  explicit FaultProxy(int target_port);
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;
  ~FaultProxy();

  int port() const { return port_; }
  void set_fault(Fault fault, int delay_ms = 0);

 private:
  void AcceptLoop();
  void Pump(int client_fd, int server_fd);

  const int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<Fault> fault_{Fault::kPass};
  std::atomic<int> delay_ms_{0};
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::vector<std::thread> threads_;
  std::thread accept_thread_;
};

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_FAULT_PROXY_H_
