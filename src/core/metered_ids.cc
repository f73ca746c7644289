// Copyright tollgate authors.
#include "src/core/metered_ids.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/core/absl_view.h"

namespace tollgate::internal {
namespace {

constexpr size_t kIdBytes = 16;
constexpr size_t kIdChars = 22;  // ceil(16 * 8 / 6), unpadded

}  // namespace

std::string NewMeteredId() {
  char bytes[kIdBytes];
  size_t filled = 0;
  while (filled < kIdBytes) {
    const ssize_t got = getrandom(bytes + filled, kIdBytes - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      std::abort();  // no entropy source: ids would be guessable, which must never be
    }
    filled += static_cast<size_t>(got);
  }
  std::string id;
  absl::WebSafeBase64Escape(absl::string_view(bytes, kIdBytes), &id);
  return id;
}

bool IsMeteredId(std::string_view id) {
  if (id.size() != kIdChars) return false;
  for (const char c : id) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

std::string ReservationToken(std::string_view id, std::string_view limit, std::string_view key) {
  std::string limit_part;
  std::string key_part;
  absl::WebSafeBase64Escape(AbslView(limit), &limit_part);
  absl::WebSafeBase64Escape(AbslView(key), &key_part);
  return absl::StrCat(AbslView(id), ".", limit_part, ".", key_part);
}

std::optional<ReservationParts> ParseReservationToken(std::string_view token) {
  const std::vector<absl::string_view> parts = absl::StrSplit(AbslView(token), '.');
  if (parts.size() != 3 || !IsMeteredId(std::string_view(parts[0].data(), parts[0].size()))) {
    return std::nullopt;
  }
  ReservationParts out;
  out.id = std::string(parts[0]);
  if (!absl::WebSafeBase64Unescape(parts[1], &out.limit) ||
      !absl::WebSafeBase64Unescape(parts[2], &out.key) || out.limit.empty() || out.key.empty()) {
    return std::nullopt;
  }
  return out;
}

}  // namespace tollgate::internal
