// Copyright tollgate authors. Limits from YAML.
//
//   limits:
//     api_per_user:
//       algorithm: token_bucket      # token_bucket | fixed_window | sliding_window
//       capacity: 10
//       refill_per_second: 5
//     otp_per_phone:
//       algorithm: fixed_window
//       limit: 3
//       window: 10m                   # 500ms, 1s, 10m, 1h, 1d
//       on_store_failure: fail_closed # fail_open (default) | fail_closed | local
//       timeout: 10ms                 # deadline for one store call (default 10ms)
//       mode: exact                   # exact (default) | sync
//       sync_interval: 1s             # with mode: sync
//       local: { algorithm: fixed_window, limit: 1, window: 10m }  # with on_store_failure: local
//       durable: true                 # answered once a Redis replica holds the count
//   memory_store:
//     max_keys: 1000000               # optional: the embedded store's cap on entries
#ifndef TOLLGATE_CONFIG_H_
#define TOLLGATE_CONFIG_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tollgate/limit.h"

namespace tollgate {

struct Config {
  // Sorted by name; names are unique.
  std::vector<Limit> limits;
  // `memory_store: {max_keys: N}`: the cap on the embedded in-memory store's entries
  // (MemoryStoreOptions::max_keys), 1 to 10^12. 0 when the file does not set it.
  int64_t memory_store_max_keys = 0;
  // Where each limit that sets `durable: true` says so ("FILE:LINE:COLUMN"), by limit name:
  // such a limit is refused when the service starts on a Redis with no replica, and the
  // message points here.
  std::map<std::string, std::string> durable_positions = {};
};

// Parses `yaml_text`. On failure returns InvalidArgument whose message names every error of
// the file, one line each in file order, joined by '\n': "FILE:LINE:COLUMN:
// limits.NAME.FIELD: what was expected" (file is `file_name`; an unknown key adds "did you
// mean" when one is close). A YAML syntax error is reported alone: nothing after it is read.
// At most 100 lines, then "FILE: and N more errors".
absl::StatusOr<Config> ParseConfig(std::string_view yaml_text, std::string_view file_name);

// Reads and parses the file at `path`. NotFound if it cannot be read (a directory: NotFound
// naming the config files it holds).
absl::StatusOr<Config> LoadConfigFile(const std::string& path);

// Parses a duration such as "500ms", "1s", "10m", "1h", "1d", "250us" into microseconds.
// InvalidArgument for anything else, including zero and negative values.
absl::StatusOr<int64_t> ParseDurationMicros(std::string_view text);

}  // namespace tollgate

#endif  // TOLLGATE_CONFIG_H_
