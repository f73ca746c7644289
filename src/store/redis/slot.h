// Copyright tollgate authors. Redis Cluster hash slots.
#ifndef TOLLGATE_SRC_STORE_REDIS_SLOT_H_
#define TOLLGATE_SRC_STORE_REDIS_SLOT_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace tollgate::redis {

// Slots of a Redis Cluster.
inline constexpr int kClusterSlots = 16384;

// CRC16-XMODEM (polynomial 0x1021, initial value 0, no reflection), the checksum Redis
// Cluster hashes keys with. Crc16("123456789") == 0x31C3.
uint16_t Crc16(std::string_view bytes);

// The hash slot of `key`, as `CLUSTER KEYSLOT` computes it: if the key contains a `{`
// followed later by a `}` with at least one byte between them, only the bytes between the
// first `{` and the first `}` after it are hashed (the hash tag); otherwise the whole key.
// Returns 0..kClusterSlots-1.
int KeySlot(std::string_view key);

// A short hash tag for `slot`: KeySlot(absl::StrCat("x{", SlotTag(slot), "}")) == slot. The
// same tag for a slot on every call and in every process (the smallest decimal number that
// hashes to it), so a key named by it is stable. REQUIRES: 0 <= slot < kClusterSlots.
// Thread-safe; the first call builds the table.
const std::string& SlotTag(int slot);

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_SLOT_H_
