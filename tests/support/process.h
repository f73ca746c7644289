// Copyright tollgate authors. Real processes and ports for tests.
#ifndef TOLLGATE_TESTS_SUPPORT_PROCESS_H_
#define TOLLGATE_TESTS_SUPPORT_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tollgate::testing {

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released).
int FreePort();

// Waits until something accepts TCP connections on 127.0.0.1:`port`.
absl::Status WaitForPort(int port, std::chrono::milliseconds timeout);

// A child process. The destructor kills it (SIGKILL) and reaps it if still running.
class Subprocess {
 public:
  // Starts `argv[0]` (searched in PATH) with `argv`. Its stdout and stderr go to
  // `log_path` when given, else are inherited. Its environment is this process's, with each
  // "NAME=VALUE" of `environment` added (replacing a variable of the same name).
  static absl::StatusOr<Subprocess> Start(const std::vector<std::string>& argv,
                                          const std::string& log_path = "",
                                          const std::vector<std::string>& environment = {});

  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  // Sends `signal` (SIGTERM, SIGKILL, SIGSTOP, SIGCONT...).
  void Signal(int signal) const;
  // Waits for exit; returns the exit code, or 128 + signal number when killed.
  int Wait();
  // Sends SIGTERM and waits up to `grace`, then SIGKILL. Returns as Wait().
  int Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));

 private:
  explicit Subprocess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
};

// A fresh empty directory under $TMPDIR (or /tmp) for one test.
std::string MakeTempDir(const std::string& prefix);

// Writes `contents` to `path`. Aborts the test on failure.
void WriteFile(const std::string& path, const std::string& contents);

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_PROCESS_H_
