// Copyright tollgate authors. The Redis scripts' arguments: state keys, the binary numbers,
// an item's spec, and the RESP of lua/add.lua's and lua/refund.lua's calls (check.lua's is in
// check_command.h).
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

// One item's spec, its ARGV of check.lua ('<Bddd': algorithm, a, b, cost, then for an item that is
// not a plain check its op byte and fields), or of add.lua and refund.lua with `extra`
// ('<Bdddd': ..., age or reset_after), as lua/check.lua describes, up to the item's id (which
// follows them in check.lua's spec). Binary,
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
