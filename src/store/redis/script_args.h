// Copyright tollgate authors. The Redis scripts' arguments: state keys, the binary numbers,
// and the RESP of each script's call (lua/check.lua, lease.lua, add.lua, refund.lua).
#ifndef TOLLGATE_SRC_STORE_REDIS_SCRIPT_ARGS_H_
#define TOLLGATE_SRC_STORE_REDIS_SCRIPT_ARGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/decision.h"
#include "tollgate/store.h"

namespace tollgate::redis {

// `<prefix><limit name>:{<key>}`: the state key of a token bucket, and the base of a window
// limit's per-window keys (`<base>:<window index>`, appended by the script).
std::string StateKey(std::string_view prefix, std::string_view limit_name, std::string_view key);

// The hash slot of an item's state key (every key the script derives from it shares it).
int ItemSlot(std::string_view prefix, const CheckItem& item);

// Item indexes grouped by hash slot (`slots[i]` is item i's), in order of first appearance.
std::vector<std::vector<size_t>> GroupBySlot(const std::vector<int>& slots);

// Whether an ASK redirect may be followed for these items: only token buckets, whose
// script touches no key but the declared ones (a window's script reads per-window keys the
// importing node may not have yet).
bool OnlyDeclaredKeys(const std::vector<CheckItem>& items);

// The scripts' binary encoding: little-endian IEEE doubles, as Lua's struct library packs
// them with '<d' (lua/check.lua's header). A token bucket's state is one such double.
// PutLittleEndianDouble writes 8 bytes at `out` and returns the end; ReadLittleEndianDouble
// reads 8.
char* PutLittleEndianDouble(char* out, double value);
double ReadLittleEndianDouble(const char* bytes);

// One item's ARGV of check.lua ('<Bddd': algorithm, a, b, cost, then for an item that is
// not a plain check its op byte and fields), or of add.lua and refund.lua with `extra`
// ('<Bdddd': ..., age or reset_after), as lua/check.lua describes, up to the item's id (which
// follows them in check.lua's ARGV, and is an argument of its own in lease.lua's). Binary,
// not decimal: Redis parses a struct.unpack in a fraction of what four decimal arguments
// cost it (docs/redis.md, "What a check costs Redis").
struct ItemBytes {
  char data[1 + 4 * 8 + 1 + 8];
  size_t size = 0;
  bool then_id = false;  // an op byte was written: the item's id follows
  std::string_view view() const { return {data, size}; }
};
// check.lua reads a shadow item's algorithm byte in upper case ('T', 'F', 'S').
ItemBytes EncodeItem(const CheckItem& item, std::optional<double> extra, bool shadow, bool with_op);

// The RESP of `<verb> <script> <n> <keys> <time> <item args>`: check.lua's call for `items`
// (verb EVALSHA with its SHA1, or EVAL with its text), `now_micros` unset for Redis TIME.
std::string CheckCommand(std::string_view verb, std::string_view script, std::string_view prefix,
                         const std::vector<CheckItem>& items, std::optional<int64_t> now_micros);

// A batch that is one concurrency item taking ('K') or releasing ('L') a slot, not in shadow
// mode: lua/lease.lua's call, the two of every lease.
bool IsSingleLease(const std::vector<CheckItem>& items);
// EVALSHA <sha> (or EVAL <script>) of lua/lease.lua for `item` (IsSingleLease): the lease
// set's key, the time, the item's 26 bytes without its id, the id, the lease time in ms.
std::string LeaseCommand(std::string_view verb, std::string_view script, std::string_view prefix,
                         const CheckItem& item, std::optional<int64_t> now_micros);

// EVAL of lua/add.lua: per item algorithm, a, b, cost, age (µs before Redis' now), the age
// being `now_micros` minus the item's at_micros, both on the clock that stamped them.
std::string AddCommand(std::string_view prefix, const std::vector<CheckItem>& items,
                       int64_t now_micros);

// EVAL of lua/refund.lua for the items of one check.lua call that admitted them at
// `now_micros`, with the decisions it returned.
std::string RefundCommand(std::string_view prefix, const std::vector<CheckItem>& items,
                          const std::vector<Decision>& decisions, int64_t now_micros);

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_SCRIPT_ARGS_H_
