// Copyright tollgate authors.
#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/core/absl_view.h"
#include "src/core/batch.h"
#include "src/store/redis/lua_scripts.h"
#include "src/store/redis/redis_connections_impl.h"
#include "src/store/redis/redis_store_impl.h"
#include "src/store/redis/redis_url.h"
#include "src/store/redis/slot.h"
#include "tollgate/clock.h"

namespace tollgate {
namespace redis {
namespace {

// The in-flight count of the store one of whose calls' callbacks runs on this thread.
thread_local const internal::InFlight* t_answering = nullptr;

// Bytes per item in the script's reply ('<Bddd': flags, remaining, reset_after,
// retry_after), after the leading now_micros ('<d').
constexpr size_t kReplyBytesPerItem = 1 + 3 * 8;

// Reads maxmemory settings. An eviction policy other than noeviction can evict our keys
// once Redis reaches maxmemory: allkeys-* pick any key, and volatile-* pick keys with a TTL,
// which every tollgate key has. Either silently resets counters.
void CheckEviction(Router& client, std::vector<std::string>* warnings) {
  absl::StatusOr<RedisReply> policy = client.Command({"CONFIG", "GET", "maxmemory-policy"});
  absl::StatusOr<RedisReply> maxmemory = client.Command({"CONFIG", "GET", "maxmemory"});
  auto value = [](const absl::StatusOr<RedisReply>& reply) -> std::optional<std::string> {
    if (!reply.ok() || reply->type != RedisReply::Type::kArray || reply->elements.size() != 2) {
      return std::nullopt;
    }
    return reply->elements[1].str;
  };
  std::optional<std::string> policy_value = value(policy);
  std::optional<std::string> maxmemory_value = value(maxmemory);
  if (!policy_value.has_value() || !maxmemory_value.has_value()) {
    warnings->push_back(
        absl::StrCat("could not read Redis' maxmemory-policy (",
                     policy.ok() ? DebugString(*policy) : policy.status().ToString(),
                     "); make sure it is noeviction, or an eviction will silently reset limits"));
    return;
  }
  if (*policy_value == "noeviction") return;
  if (*maxmemory_value == "0") {
    warnings->push_back(absl::StrCat(
        "Redis' maxmemory-policy is ", *policy_value,
        "; it evicts nothing while maxmemory is 0, but once maxmemory is set it can evict limit "
        "keys and silently reset counters: use noeviction (a Redis of its own for limits)"));
    return;
  }
  warnings->push_back(absl::StrCat(
      "Redis' maxmemory-policy is ", *policy_value, " with maxmemory ", *maxmemory_value,
      ": under memory pressure Redis evicts limit keys, silently resetting counters; use "
      "noeviction (a Redis of its own for limits)"));
}

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

// One item's ARGV of check.lua ('<Bddd': algorithm, a, b, cost, then for an item that is
// not a plain check its op byte and fields), or of add.lua and refund.lua with `extra`
// ('<Bdddd': ..., age or reset_after), as lua/check.lua describes. Binary, not decimal: Redis
// parses a struct.unpack in a fraction of what four decimal arguments cost it
// (docs/redis.md, "What a check costs Redis").
constexpr size_t kItemArgs = 1;
// An item's bytes up to its id (which follows them in check.lua's ARGV, and is an argument of
// its own in lease.lua's).
struct ItemBytes {
  char data[1 + 4 * 8 + 1 + 8];
  size_t size = 0;
  bool then_id = false;  // an op byte was written: the item's id follows
  std::string_view view() const { return {data, size}; }
};
// check.lua reads a shadow item's algorithm byte in upper case ('T', 'F', 'S').
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

// A batch that is one concurrency item taking ('K') or releasing ('L') a slot, not in shadow
// mode: lua/lease.lua's call, the two of every lease.
bool IsSingleLease(const std::vector<CheckItem>& items) {
  if (items.size() != 1 || items[0].shadow ||
      items[0].limit->numbers.algorithm != Algorithm::kConcurrency) {
    return false;
  }
  const char op = OpByte(items[0]);
  return op == 'K' || op == 'L';
}

// EVALSHA <sha> (or EVAL <script>) of lua/lease.lua for `item` (IsSingleLease): the lease
// set's key, the time, the item's 26 bytes without its id, the id, the lease time in ms.
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

}  // namespace

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

std::string SingleCheckHead(std::string_view sha) {
  return absl::StrCat("*6\r\n$7\r\nEVALSHA\r\n$", sha.size(), "\r\n", AbslView(sha),
                      "\r\n$1\r\n1\r\n");
}

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
  cursor = PutBulkHeader(cursor, key_size);  // the state key (AddStateKey)
  cursor = PutBytes(cursor, prefix);
  cursor = PutBytes(cursor, name);
  cursor = PutBytes(cursor, ":{");
  cursor = PutBytes(cursor, item.key);
  cursor = PutCrlf(PutBytes(cursor, "}"));
  cursor = PutCrlf(PutBytes(PutBulkHeader(cursor, time_size), {time, time_size}));  // AddTime
  cursor = PutBulkHeader(cursor, bytes.size + id.size());                           // AddItemArgs
  cursor = PutCrlf(PutBytes(PutBytes(cursor, bytes.view()), id));
  out.resize(static_cast<size_t>(cursor - out.data()));
  return out;
}

namespace {

// EVAL of lua/add.lua: per item algorithm, a, b, cost, age (µs before Redis' now), the age
// being `now_micros` minus the item's at_micros, both on the clock that stamped them.
std::string AddCommand(std::string_view script, std::string_view prefix,
                       const std::vector<CheckItem>& items, int64_t now_micros) {
  const size_t n = items.size();
  CommandWriter writer(4 + n * (1 + kItemArgs), ExpectedBytes(script, prefix, items));
  writer.Add("EVAL");
  writer.Add(script);
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

// EVAL of lua/refund.lua for the items of one check.lua call that admitted them at
// `now_micros`, with the decisions it returned.
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

// Item indexes grouped by hash slot, in order of first appearance.
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

// Whether an ASK redirect may be followed for these items: only token buckets, whose
// script touches no key but the declared ones (a window's script reads per-window keys the
// importing node may not have yet).
bool OnlyDeclaredKeys(const std::vector<CheckItem>& items) {
  return std::all_of(items.begin(), items.end(), [](const CheckItem& item) {
    return item.limit->numbers.algorithm == Algorithm::kTokenBucket;
  });
}

}  // namespace

int ItemSlot(std::string_view prefix, const CheckItem& item) {
  return KeySlot(StateKey(prefix, item.limit->name, item.key));
}

std::string StateKey(std::string_view prefix, std::string_view limit_name, std::string_view key) {
  std::string out;
  out.reserve(prefix.size() + limit_name.size() + key.size() + 3);
  out.append(prefix).append(limit_name).append(":{").append(key).append("}");
  return out;
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

absl::StatusOr<std::vector<Decision>> ParseCheckReply(const RedisReply& reply,
                                                      const std::vector<CheckItem>& items,
                                                      int64_t* now_micros) {
  if (reply.is_error()) {
    return absl::InternalError(absl::StrCat("Redis refused the check script: ", reply.str));
  }
  if (reply.type != RedisReply::Type::kString ||
      reply.str.size() != 8 + kReplyBytesPerItem * items.size()) {
    return absl::InternalError(
        absl::StrCat("unexpected reply to the check script: ", DebugString(reply)));
  }
  // Every value is a whole number the script computed in doubles (exact below 2^53).
  const char* cursor = reply.str.data();
  auto next = [&cursor] {
    const double value = ReadLittleEndianDouble(cursor);
    cursor += 8;
    return static_cast<int64_t>(value);
  };
  const int64_t now = next();
  if (now_micros != nullptr) *now_micros = now;
  std::vector<Decision> decisions;
  decisions.reserve(items.size());
  for (const CheckItem& item : items) {
    const auto flags = static_cast<unsigned char>(*cursor++);
    Decision decision;
    decision.allowed = (flags & 1) != 0;
    decision.limit = item.limit->numbers.MaxCost();
    const int64_t remaining = next();  // negative: a debt
    decision.remaining = std::max<int64_t>(remaining, 0);
    decision.debt = std::max<int64_t>(-remaining, 0);
    decision.reset_after_micros = next();
    decision.retry_after_micros = next();
    decision.source = DecisionSource::kRedis;
    switch (flags >> 1) {
      case 0:
        decision.reason = DenyReason::kNone;
        break;
      case 1:
        decision.reason = DenyReason::kOverLimit;
        break;
      case 2:
        decision.reason = DenyReason::kCostExceedsLimit;
        break;
      case 3:
        decision.reason = DenyReason::kNotFound;
        break;
      default:
        decision.reason = DenyReason::kAlreadySettled;
        break;
    }
    decisions.push_back(decision);
  }
  // check.lua reports an allowed item's remaining as if it were consumed.
  if (!internal::BatchAllowed(items, decisions)) {
    internal::GiveBackUncharged(items, absl::MakeSpan(decisions));
  }
  return decisions;
}

RedisStoreImpl::RedisStoreImpl(RedisStoreOptions options,
                               std::shared_ptr<RedisConnections> connections,
                               std::string script_sha, std::string lease_sha,
                               std::vector<std::string> warnings,
                               DurabilityAssessment durability)
    : options_(std::move(options)),
      script_sha_(std::move(script_sha)),
      lease_sha_(std::move(lease_sha)),
      single_check_head_(SingleCheckHead(script_sha_)),
      warnings_(std::move(warnings)),
      durability_(std::move(durability)),
      clock_(options_.clock != nullptr ? options_.clock : &SystemClock()),
      connections_(std::move(connections)),
      router_(RouterOf(*connections_)) {}

RedisStoreImpl::~RedisStoreImpl() {
  // Nobody else holds them: closing them answers every call still out, now.
  if (connections_.use_count() == 1) connections_.reset();
  // A store released by one of its own calls' callbacks (the last owner let go in it) does
  // not wait for that call: it is over but for the count.
  calls_in_flight_->WaitUntilAtMost(t_answering == calls_in_flight_.get() ? 1 : 0);
}

void RedisStoreImpl::Send(int slot, std::string command, ReplyCallback done, bool follow_ask,
                          int64_t durable_timeout_micros) {
  calls_in_flight_->Start();
  ReplyCallback counted = [in_flight = calls_in_flight_,
                           done = std::move(done)](absl::StatusOr<RedisReply> reply) mutable {
    const internal::InFlight* outer = std::exchange(t_answering, in_flight.get());
    std::move(done)(std::move(reply));
    t_answering = outer;
    // The store may be gone from here on (released in `done`, or by its destructor as
    // soon as this count falls).
    in_flight->Finish();
  };
  // ---- durable limits (durable_writes.h): answered once a replica holds the write ----
  if (durable_timeout_micros > 0) {
    router_.SendDurable(slot, std::move(command),
                        {.timeout_micros = durable_timeout_micros, .wrote = &ScriptReplyWrote},
                        std::move(counted));
    return;
  }
  router_.Send(slot, std::move(command), std::move(counted), follow_ask);
}

void RedisStoreImpl::ApplyAsync(std::vector<CheckItem> items, CheckCallback done) {
  if (!items.empty() && items.front().op == ItemOp::kAdd) {
    AddAsync(std::move(items), std::move(done));
    return;
  }
  // check.lua applies every other op.
  CheckAtAsync(std::move(items), std::nullopt, std::move(done));
}

// One check.lua call in flight: what its reply goes to, and what the NOSCRIPT retry needs
// to send it again. One allocation per call; the reply callback that owns it fits in
// AnyInvocable's inline storage.
struct RedisStoreImpl::ScriptCall {
  std::vector<CheckItem> items;
  std::optional<int64_t> now_micros;
  int slot = kAnySlot;
  bool follow_ask = false;
  bool retried = false;
  bool lease = false;  // lua/lease.lua's call (IsSingleLease), else lua/check.lua's
  int64_t durable_timeout_micros = 0;  // DurableTimeoutMicros: > 0 when durable
  // Exactly one is set: the decisions (CheckAtAsync) or the raw reply (EvalCheckAsync).
  CheckCallback decisions_done;
  ReplyCallback reply_done;
};

void RedisStoreImpl::CheckAtAsync(std::vector<CheckItem> items, std::optional<int64_t> now_micros,
                                  CheckCallback done) {
  if (items.empty()) {
    std::move(done)(absl::InvalidArgumentError("a check needs at least one item"));
    return;
  }
  if (router_.topology() == Topology::kCluster && items.size() > 1) {
    std::vector<int> slots;
    slots.reserve(items.size());
    for (const CheckItem& item : items) slots.push_back(ItemSlot(options_.key_prefix, item));
    if (std::any_of(slots.begin(), slots.end(), [&](int slot) { return slot != slots[0]; })) {
      CheckSlotsAsync(std::move(items), slots, now_micros, std::move(done));
      return;
    }
  }
  auto call = std::make_unique<ScriptCall>();
  call->items = std::move(items);
  call->now_micros = now_micros;
  call->decisions_done = std::move(done);
  SendScriptCall(std::move(call));
}

void RedisStoreImpl::EvalCheckAsync(std::vector<CheckItem> items, std::optional<int64_t> now_micros,
                                    ReplyCallback done) {
  auto call = std::make_unique<ScriptCall>();
  call->items = std::move(items);
  call->now_micros = now_micros;
  call->reply_done = std::move(done);
  SendScriptCall(std::move(call));
}

void RedisStoreImpl::SendScriptCall(std::unique_ptr<ScriptCall> call) {
  if (router_.topology() == Topology::kCluster) {
    call->slot = ItemSlot(options_.key_prefix, call->items[0]);
    call->follow_ask = OnlyDeclaredKeys(call->items);
  }
  call->lease = IsSingleLease(call->items);
  call->durable_timeout_micros =
      DurableTimeoutMicros(call->items, durability_.durable_by_default);
  std::string command = ScriptCommand(*call, /*eval=*/false);
  SendScriptCommand(std::move(call), std::move(command));
}

std::string RedisStoreImpl::ScriptCommand(const ScriptCall& call, bool eval) const {
  if (call.lease) {
    return LeaseCommand(eval ? "EVAL" : "EVALSHA", eval ? kLuaLease : lease_sha_,
                        options_.key_prefix, call.items[0], call.now_micros);
  }
  if (!eval && call.items.size() == 1) {
    return SingleCheckCommand(single_check_head_, options_.key_prefix, call.items[0],
                              call.now_micros);
  }
  return CheckCommand(eval ? "EVAL" : "EVALSHA", eval ? kLuaCheck : script_sha_,
                      options_.key_prefix, call.items, call.now_micros);
}

void RedisStoreImpl::SendScriptCommand(std::unique_ptr<ScriptCall> call, std::string command) {
  const int slot = call->slot;
  const bool follow_ask = call->follow_ask;
  const int64_t durable_timeout_micros = call->durable_timeout_micros;
  Send(
      slot, std::move(command),
      [this, call = std::move(call)](absl::StatusOr<RedisReply> reply) mutable {
        OnScriptReply(std::move(call), std::move(reply));
      },
      follow_ask, durable_timeout_micros);
}

void RedisStoreImpl::OnScriptReply(std::unique_ptr<ScriptCall> call,
                                   absl::StatusOr<RedisReply> reply) {
  if (reply.ok() && reply->is_error() && !call->retried &&
      absl::StartsWith(reply->str, "NOSCRIPT")) {
    // This node lost the script (restart, failover, SCRIPT FLUSH), or never had it (a
    // cluster node that just joined or was promoted). EVAL runs it and caches it again
    // under the same SHA1, so later EVALSHA calls find it.
    call->retried = true;
    std::string command = ScriptCommand(*call, /*eval=*/true);
    SendScriptCommand(std::move(call), std::move(command));
    return;
  }
  if (call->reply_done) {
    std::move(call->reply_done)(std::move(reply));
    return;
  }
  if (!reply.ok()) {
    std::move(call->decisions_done)(reply.status());
    return;
  }
  std::move(call->decisions_done)(ParseCheckReply(*reply, call->items));
}

struct RedisStoreImpl::MultiSlotCheck {
  RedisStoreImpl* store = nullptr;
  std::vector<CheckItem> items;
  std::vector<std::vector<size_t>> groups;  // item indexes per slot
  CheckCallback done;

  absl::Mutex mu;
  std::vector<absl::StatusOr<RedisReply>> replies ABSL_GUARDED_BY(mu);
  size_t pending ABSL_GUARDED_BY(mu) = 0;

  // After the checks: the answer, sent once every refund has replied.
  absl::StatusOr<std::vector<Decision>> result;
  std::atomic<size_t> pending_refunds{0};

  std::vector<CheckItem> GroupItems(size_t group) const {
    std::vector<CheckItem> out;
    out.reserve(groups[group].size());
    for (size_t index : groups[group]) out.push_back(items[index]);
    return out;
  }
};

void RedisStoreImpl::CheckSlotsAsync(std::vector<CheckItem> items, const std::vector<int>& slots,
                                     std::optional<int64_t> now_micros, CheckCallback done) {
  auto check = std::make_shared<MultiSlotCheck>();
  check->store = this;
  check->items = std::move(items);
  check->groups = GroupBySlot(slots);
  check->done = std::move(done);
  const size_t groups = check->groups.size();
  {
    absl::MutexLock lock(&check->mu);
    check->replies.assign(groups, absl::UnavailableError("no reply"));
    check->pending = groups;
  }
  for (size_t group = 0; group < groups; ++group) {
    EvalCheckAsync(check->GroupItems(group), now_micros,
                   [check, group](absl::StatusOr<RedisReply> reply) {
                     bool last = false;
                     {
                       absl::MutexLock lock(&check->mu);
                       check->replies[group] = std::move(reply);
                       last = --check->pending == 0;
                     }
                     if (last) FinishMultiSlot(check);
                   });
  }
}

void RedisStoreImpl::FinishMultiSlot(const std::shared_ptr<MultiSlotCheck>& check) {
  std::vector<absl::StatusOr<RedisReply>> replies;
  {
    absl::MutexLock lock(&check->mu);
    replies.swap(check->replies);
  }
  absl::Status error;
  bool all_allowed = true;
  std::vector<Decision> decisions(check->items.size());
  struct Admitted {
    size_t group;
    std::vector<Decision> decisions;
    int64_t now_micros;
  };
  std::vector<Admitted> admitted;
  for (size_t group = 0; group < replies.size(); ++group) {
    absl::StatusOr<std::vector<Decision>> parsed = absl::UnavailableError("no reply");
    int64_t now = 0;
    if (!replies[group].ok()) {
      parsed = replies[group].status();
    } else {
      parsed = ParseCheckReply(*replies[group], check->GroupItems(group), &now);
    }
    if (!parsed.ok()) {
      if (error.ok()) error = parsed.status();
      all_allowed = false;
      continue;
    }
    bool group_allowed = true;
    for (size_t i = 0; i < parsed->size(); ++i) {
      const size_t index = check->groups[group][i];
      decisions[index] = (*parsed)[i];
      group_allowed = group_allowed && ((*parsed)[i].allowed || check->items[index].shadow ||
                                        !IsConditional(check->items[index].op));
    }
    all_allowed = all_allowed && group_allowed;
    if (group_allowed) admitted.push_back({group, *std::move(parsed), now});
  }
  if (all_allowed) {
    std::move(check->done)(std::move(decisions));
    return;
  }
  // Refused somewhere (or failed): nothing may stay consumed. In the answer, the admitting
  // items keep allowed = true (they alone would pass) with the cost given back.
  for (const Admitted& group : admitted) {
    for (size_t i = 0; i < group.decisions.size(); ++i) {
      const size_t index = check->groups[group.group][i];
      Decision& decision = decisions[index];
      // A refused shadow item took nothing; an item that is not conditional was applied.
      if (!decision.allowed || !IsConditional(check->items[index].op)) continue;
      decision.remaining = std::min(decision.limit, decision.remaining + check->items[index].cost);
    }
  }
  if (error.ok()) {
    check->result = std::move(decisions);
  } else {
    check->result = error;
  }
  // Only what a group's script consumed is given back: its refused shadow items took nothing.
  std::vector<std::vector<CheckItem>> refunds;
  std::vector<Admitted> consumed;
  for (Admitted& group : admitted) {
    std::vector<CheckItem> items = check->GroupItems(group.group);
    for (size_t i = items.size(); i-- > 0;) {
      // What stays applied whatever the request does (a charge) is not given back.
      if (group.decisions[i].allowed && IsConditional(items[i].op)) continue;
      items.erase(items.begin() + static_cast<ptrdiff_t>(i));
      group.decisions.erase(group.decisions.begin() + static_cast<ptrdiff_t>(i));
    }
    if (items.empty()) continue;
    refunds.push_back(std::move(items));
    consumed.push_back(std::move(group));
  }
  if (consumed.empty()) {
    std::move(check->done)(std::move(check->result));
    return;
  }
  check->pending_refunds.store(consumed.size());
  RedisStoreImpl* store = check->store;
  for (size_t r = 0; r < consumed.size(); ++r) {
    const Admitted& group = consumed[r];
    const std::vector<CheckItem>& items = refunds[r];
    const int slot = ItemSlot(store->options_.key_prefix, items[0]);
    // A refund that fails leaves its consumption in place: an over-refusal until the
    // window ends or the bucket refills, never an over-admission.
    store->Send(
        slot, RefundCommand(store->options_.key_prefix, items, group.decisions, group.now_micros),
        [check](const absl::StatusOr<RedisReply>&) {
          if (check->pending_refunds.fetch_sub(1) == 1) {
            std::move(check->done)(std::move(check->result));
          }
        },
        OnlyDeclaredKeys(items));
  }
}

void RedisStoreImpl::AddAsync(std::vector<CheckItem> items, CheckCallback done) {
  for (const CheckItem& item : items) {
    if (item.op != ItemOp::kAdd) {
      std::move(done)(absl::InvalidArgumentError(
          absl::StrCat("kAdd items go in a batch of their own (limit '", item.limit->name, "')")));
      return;
    }
  }
  // EVAL, not EVALSHA: reconciliation runs right after Redis returns, often a restarted
  // Redis without the script, and a NOSCRIPT retry would let checks sent meanwhile on the
  // same connection overtake the added consumption. It is rare, so the script's bytes on
  // the wire do not matter; one round trip keeps it ahead of later checks.
  // One EVAL per hash slot (always one on a single server); `done` gets the first error.
  std::vector<int> slots;
  slots.reserve(items.size());
  for (const CheckItem& item : items) {
    slots.push_back(router_.topology() == Topology::kCluster ? ItemSlot(options_.key_prefix, item)
                                                             : 0);
  }
  struct Join {
    absl::Mutex mu;
    absl::Status status ABSL_GUARDED_BY(mu);
    size_t pending ABSL_GUARDED_BY(mu) = 0;
    std::vector<Decision> decisions;  // one per item, each "applied"
    CheckCallback done;
  };
  auto join = std::make_shared<Join>();
  join->done = std::move(done);
  join->decisions.reserve(items.size());
  for (const CheckItem& item : items) {
    Decision applied;
    applied.allowed = true;
    applied.limit = item.limit->numbers.MaxCost();
    applied.source = DecisionSource::kRedis;
    join->decisions.push_back(applied);
  }
  std::vector<std::vector<size_t>> groups = GroupBySlot(slots);
  {
    absl::MutexLock lock(&join->mu);
    join->pending = groups.size();
  }
  for (const std::vector<size_t>& group : groups) {
    std::vector<CheckItem> group_items;
    for (size_t index : group) group_items.push_back(items[index]);
    Send(
        ItemSlot(options_.key_prefix, group_items[0]),
        AddCommand(kLuaAdd, options_.key_prefix, group_items, clock_->NowMicros()),
        [join](absl::StatusOr<RedisReply> reply) {
          absl::Status status;
          if (!reply.ok()) {
            status = reply.status();
          } else if (reply->is_error()) {
            status =
                absl::InternalError(absl::StrCat("Redis refused the add script: ", reply->str));
          }
          bool last = false;
          {
            absl::MutexLock lock(&join->mu);
            if (join->status.ok()) join->status = status;
            last = --join->pending == 0;
          }
          if (!last) return;
          absl::Status result;
          {
            absl::MutexLock lock(&join->mu);
            result = join->status;
          }
          if (result.ok()) {
            std::move(join->done)(std::move(join->decisions));
          } else {
            std::move(join->done)(std::move(result));
          }
        },
        OnlyDeclaredKeys(group_items));
  }
}

}  // namespace redis

absl::StatusOr<std::unique_ptr<RedisStore>> RedisStore::Create(RedisStoreOptions options) {
  std::shared_ptr<RedisConnections> connections = std::move(options.redis);
  if (connections == nullptr) {
    return absl::InvalidArgumentError("RedisStore needs connections (RedisStoreOptions::redis)");
  }
  options.redis = nullptr;  // the store holds them once, as `connections_`
  redis::Router& router = redis::RouterOf(*connections);

  // In a cluster this loads the scripts on one primary; the others get them from the EVAL
  // that follows their first NOSCRIPT.
  std::string shas[2];
  const std::pair<const char*, std::string_view> scripts[2] = {{"check", redis::kLuaCheck},
                                                               {"lease", redis::kLuaLease}};
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<redis::RedisReply> loaded =
        router.Command({"SCRIPT", "LOAD", std::string(scripts[i].second)});
    if (!loaded.ok()) return loaded.status();
    if (loaded->type != redis::RedisReply::Type::kString) {
      return absl::InternalError(absl::StrCat("SCRIPT LOAD of the ", scripts[i].first,
                                              " script failed: ", redis::DebugString(*loaded)));
    }
    shas[i] = std::move(loaded->str);
  }
  std::vector<std::string> warnings;
  redis::CheckEviction(router, &warnings);
  redis::DurabilityAssessment durability = redis::AssessDurability(router);
  warnings.insert(warnings.end(), durability.warnings.begin(), durability.warnings.end());
  redis::DurableMonitorOf(*connections).set_on_event(options.on_event);
  return std::make_unique<redis::RedisStoreImpl>(std::move(options), std::move(connections),
                                                 std::move(shas[0]), std::move(shas[1]),
                                                 std::move(warnings), std::move(durability));
}

}  // namespace tollgate
