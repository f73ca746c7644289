// Copyright tollgate authors.
#include "src/store/redis/single_check_command.h"

#include <charconv>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/core/absl_view.h"
#include "src/store/redis/resp.h"
#include "src/store/redis/script_args.h"

namespace tollgate::redis {
namespace {

// A bulk string's header, `$<length>\r\n` (PutRespHeader).
char* PutBulkHeader(char* at, size_t length) { return PutRespHeader(at, '$', length); }

char* PutBytes(char* at, std::string_view bytes) {
  if (bytes.empty()) return at;  // an empty view may have no data() at all
  std::memcpy(at, bytes.data(), bytes.size());
  return at + bytes.size();
}

char* PutCrlf(char* at) {
  *at++ = '\r';
  *at++ = '\n';
  return at;
}

}  // namespace

std::string SingleCheckHead(std::string_view sha) {
  return absl::StrCat("*6\r\n$7\r\nEVALSHA\r\n$", sha.size(), "\r\n", AbslView(sha),
                      "\r\n$1\r\n1\r\n");
}

std::string SingleCheckCommand(std::string_view head, std::string_view prefix,
                               const CheckItem& item, std::optional<int64_t> now_micros) {
  char time[20];
  const size_t time_size =
      now_micros.has_value()
          ? static_cast<size_t>(std::to_chars(time, time + sizeof(time), *now_micros).ptr - time)
          : 0;
  const ItemBytes bytes = EncodeItem(item, std::nullopt, item.shadow, /*with_op=*/true);
  const std::string_view id = bytes.then_id ? std::string_view(item.id) : std::string_view();
  const std::string_view name = item.limit->name;
  const size_t key_size = prefix.size() + name.size() + 3 + item.key.size();
  std::string out;
  out.resize(head.size() + 3 * (kMaxRespHeader + 2) + key_size + time_size + bytes.size +
             id.size());
  char* cursor = PutBytes(out.data(), head);
  cursor = PutBulkHeader(cursor, key_size);  // the state key (StateKey)
  cursor = PutBytes(cursor, prefix);
  cursor = PutBytes(cursor, name);
  cursor = PutBytes(cursor, ":{");
  cursor = PutBytes(cursor, item.key);
  cursor = PutCrlf(PutBytes(cursor, "}"));
  cursor = PutCrlf(PutBytes(PutBulkHeader(cursor, time_size), {time, time_size}));  // the time
  cursor = PutBulkHeader(cursor, bytes.size + id.size());  // the item's bytes and id
  cursor = PutCrlf(PutBytes(PutBytes(cursor, bytes.view()), id));
  out.resize(static_cast<size_t>(cursor - out.data()));
  return out;
}

}  // namespace tollgate::redis
