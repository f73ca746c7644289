// Copyright tollgate authors.
#include "src/store/redis/script_args.h"

#include <algorithm>
#include <bit>

#include "src/store/redis/lua_scripts.h"
#include "src/store/redis/resp.h"
#include "src/store/redis/slot.h"

namespace tollgate::redis {
namespace {

// The argument count of one item's ARGV (its bytes, the id appended).
constexpr size_t kItemArgs = 1;

// Bytes to reserve for a script call of `items` (exact for short numbers; a guess is fine).
size_t ExpectedBytes(std::string_view script, std::string_view prefix,
                     const std::vector<CheckItem>& items) {
  size_t bytes = 64 + script.size();
  for (const CheckItem& item : items) {
    bytes += 8 + prefix.size() + item.limit->name.size() + item.key.size() + 5 * 28;
  }
  return bytes;
}

// The state key argument `<prefix><limit name>:{<key>}` (see StateKey), followed by
// `suffix` (":l", a concurrency limit's lease set).
void AddStateKey(CommandWriter& writer, std::string_view prefix, const CheckItem& item,
                 std::string_view suffix = "") {
  writer.AddConcatenation({prefix, item.limit->name, ":{", item.key, "}", suffix});
}

// The time argument of check.lua and lease.lua: empty (Redis TIME), or pinned by a test.
void AddTime(CommandWriter& writer, std::optional<int64_t> now_micros) {
  if (now_micros.has_value()) {
    writer.AddInteger(*now_micros);
  } else {
    writer.Add("");
  }
}

// The op byte check.lua reads after an item's 25 bytes; 0 for a plain check (no byte).
char OpByte(const CheckItem& item) {
  switch (item.op) {
    case ItemOp::kCheck:
      return item.id.empty() ? 0 : 'K';  // a concurrency limit's slot, as lease `id`
    case ItemOp::kCharge:
      return 'C';
    case ItemOp::kReserve:
      return 'R';
    case ItemOp::kSettle:
      return 'S';
    case ItemOp::kRelease:
      return 'L';
    case ItemOp::kRenew:
      return 'N';
    case ItemOp::kAdd:  // lua/add.lua's, not check.lua's
      return 0;
  }
  return 0;
}

void AddItemArgs(CommandWriter& writer, const CheckItem& item,
                 std::optional<double> extra = std::nullopt, bool shadow = false,
                 bool with_op = false) {
  const ItemBytes bytes = EncodeItem(item, extra, shadow, with_op);
  if (bytes.then_id) {
    writer.AddConcatenation({bytes.view(), item.id});
  } else {
    writer.Add(bytes.view());
  }
}

}  // namespace

std::string StateKey(std::string_view prefix, std::string_view limit_name, std::string_view key) {
  std::string out;
  out.reserve(prefix.size() + limit_name.size() + key.size() + 3);
  out.append(prefix).append(limit_name).append(":{").append(key).append("}");
  return out;
}

int ItemSlot(std::string_view prefix, const CheckItem& item) {
  return KeySlot(StateKey(prefix, item.limit->name, item.key));
}

std::vector<std::vector<size_t>> GroupBySlot(const std::vector<int>& slots) {
  std::vector<std::vector<size_t>> groups;
  std::vector<int> group_slots;
  for (size_t i = 0; i < slots.size(); ++i) {
    auto it = std::find(group_slots.begin(), group_slots.end(), slots[i]);
    if (it == group_slots.end()) {
      group_slots.push_back(slots[i]);
      groups.push_back({i});
    } else {
      groups[it - group_slots.begin()].push_back(i);
    }
  }
  return groups;
}

bool OnlyDeclaredKeys(const std::vector<CheckItem>& items) {
  return std::all_of(items.begin(), items.end(), [](const CheckItem& item) {
    return item.limit->numbers.algorithm == Algorithm::kTokenBucket;
  });
}

char* PutLittleEndianDouble(char* out, double value) {
  uint64_t bits = std::bit_cast<uint64_t>(value);
  for (int i = 0; i < 8; ++i, bits >>= 8) *out++ = static_cast<char>(bits & 0xff);
  return out;
}

double ReadLittleEndianDouble(const char* bytes) {
  uint64_t bits = 0;
  for (int i = 7; i >= 0; --i) bits = (bits << 8) | static_cast<unsigned char>(bytes[i]);
  return std::bit_cast<double>(bits);
}

ItemBytes EncodeItem(const CheckItem& item, std::optional<double> extra, bool shadow,
                     bool with_op) {
  const LimitNumbers& numbers = item.limit->numbers;
  ItemBytes bytes;
  char* const arg = bytes.data;
  char* cursor = arg + 1;
  switch (numbers.algorithm) {
    case Algorithm::kTokenBucket:
      arg[0] = 't';
      cursor = PutLittleEndianDouble(cursor, static_cast<double>(numbers.capacity));
      cursor = PutLittleEndianDouble(cursor, numbers.refill_per_second);
      break;
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindow:
    case Algorithm::kConcurrency:  // the limit and the lease time
      arg[0] = numbers.algorithm == Algorithm::kFixedWindow     ? 'f'
               : numbers.algorithm == Algorithm::kSlidingWindow ? 's'
                                                                : 'c';
      cursor = PutLittleEndianDouble(cursor, static_cast<double>(numbers.limit));
      cursor = PutLittleEndianDouble(cursor, static_cast<double>(numbers.window_micros));
      break;
  }
  if (shadow) arg[0] = static_cast<char>(arg[0] - 'a' + 'A');
  cursor = PutLittleEndianDouble(cursor, static_cast<double>(item.cost));
  if (extra.has_value()) cursor = PutLittleEndianDouble(cursor, *extra);
  if (const char op = with_op ? OpByte(item) : 0; op != 0) {
    *cursor++ = op;
    bytes.then_id = true;
    if (item.op == ItemOp::kReserve) {
      // The record's TTL in ms, rounded up.
      const int64_t ttl_ms = (item.limit->reservation_ttl_micros + 999) / 1000;
      cursor = PutLittleEndianDouble(cursor, static_cast<double>(ttl_ms));
    }
  }
  bytes.size = static_cast<size_t>(cursor - arg);
  return bytes;
}

std::string CheckCommand(std::string_view verb, std::string_view script, std::string_view prefix,
                         const std::vector<CheckItem>& items, std::optional<int64_t> now_micros) {
  const size_t n = items.size();
  CommandWriter writer(4 + n * (1 + kItemArgs), ExpectedBytes(script, prefix, items));
  writer.Add(verb);
  writer.Add(script);
  writer.AddInteger(static_cast<int64_t>(n));
  for (const CheckItem& item : items) AddStateKey(writer, prefix, item);
  AddTime(writer, now_micros);
  for (const CheckItem& item : items) {
    AddItemArgs(writer, item, std::nullopt, item.shadow, /*with_op=*/true);
  }
  return std::move(writer).Finish();
}

bool IsSingleLease(const std::vector<CheckItem>& items) {
  if (items.size() != 1 || items[0].shadow ||
      items[0].limit->numbers.algorithm != Algorithm::kConcurrency) {
    return false;
  }
  const char op = OpByte(items[0]);
  return op == 'K' || op == 'L';
}

std::string LeaseCommand(std::string_view verb, std::string_view script, std::string_view prefix,
                         const CheckItem& item, std::optional<int64_t> now_micros) {
  CommandWriter writer(8, 96 + script.size() + prefix.size() + item.limit->name.size() +
                              item.key.size() + item.id.size());
  writer.Add(verb);
  writer.Add(script);
  writer.Add("1");
  AddStateKey(writer, prefix, item, ":l");
  AddTime(writer, now_micros);
  writer.Add(EncodeItem(item, std::nullopt, /*shadow=*/false, /*with_op=*/true).view());
  writer.Add(item.id);
  writer.AddInteger((item.limit->numbers.window_micros + 999) / 1000);
  return std::move(writer).Finish();
}

std::string AddCommand(std::string_view prefix, const std::vector<CheckItem>& items,
                       int64_t now_micros) {
  const size_t n = items.size();
  CommandWriter writer(4 + n * (1 + kItemArgs), ExpectedBytes(kLuaAdd, prefix, items));
  writer.Add("EVAL");
  writer.Add(kLuaAdd);
  writer.AddInteger(static_cast<int64_t>(n));
  for (const CheckItem& item : items) AddStateKey(writer, prefix, item);
  writer.Add("");
  for (const CheckItem& item : items) {
    // An age, not a time: this host's clock and Redis' need not agree.
    const int64_t age_micros = item.at_micros == 0 ? 0 : now_micros - item.at_micros;
    AddItemArgs(writer, item, static_cast<double>(std::max<int64_t>(0, age_micros)));
  }
  return std::move(writer).Finish();
}

std::string RefundCommand(std::string_view prefix, const std::vector<CheckItem>& items,
                          const std::vector<Decision>& decisions, int64_t now_micros) {
  const size_t n = items.size();
  CommandWriter writer(4 + n * (1 + kItemArgs), ExpectedBytes(kLuaRefund, prefix, items));
  writer.Add("EVAL");
  writer.Add(kLuaRefund);
  writer.AddInteger(static_cast<int64_t>(n));
  for (const CheckItem& item : items) AddStateKey(writer, prefix, item);
  writer.AddInteger(now_micros);
  for (size_t i = 0; i < n; ++i) {
    // A reservation's or a lease's op and id follow, so its record (its slot) goes with it.
    AddItemArgs(writer, items[i], static_cast<double>(decisions[i].reset_after_micros),
                /*shadow=*/false, /*with_op=*/!items[i].id.empty());
  }
  return std::move(writer).Finish();
}

}  // namespace tollgate::redis
