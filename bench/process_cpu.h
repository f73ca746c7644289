// Copyright tollgate authors. CPU time of other processes, for the load generators' CPU
// columns: utime + stime from /proc/PID/stat (Linux), in seconds.
#ifndef TOLLGATE_BENCH_PROCESS_CPU_H_
#define TOLLGATE_BENCH_PROCESS_CPU_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace tollgate::bench {

// utime + stime of process `pid`, in seconds; -1 when it cannot be read (or pid <= 0).
inline double ProcessCpuSeconds(int pid) {
  if (pid <= 0) return -1;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces), from field 3 on.
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 > text.size()) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  uint64_t utime = 0;
  for (int index = 3; fields >> field; ++index) {
    if (index == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (index == 15) {
      const uint64_t stime = std::strtoull(field.c_str(), nullptr, 10);
      return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
    }
  }
  return -1;
}

// A comma-separated list of pids ("123" or "123,124"); entries that are not positive numbers
// are skipped.
inline std::vector<int> ParsePids(std::string_view list) {
  std::vector<int> pids;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string entry(list.substr(0, comma));
    if (const int pid = std::atoi(entry.c_str()); pid > 0) pids.push_back(pid);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return pids;
}

// The sum over `pids` (a server of several processes, such as nginx's workers); -1 when the
// list is empty or one cannot be read.
inline double ProcessesCpuSeconds(const std::vector<int>& pids) {
  if (pids.empty()) return -1;
  double total = 0;
  for (const int pid : pids) {
    const double seconds = ProcessCpuSeconds(pid);
    if (seconds < 0) return -1;
    total += seconds;
  }
  return total;
}

}  // namespace tollgate::bench

#endif  // TOLLGATE_BENCH_PROCESS_CPU_H_
