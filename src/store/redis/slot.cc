// Copyright tollgate authors.
#include "src/store/redis/slot.h"

#include <array>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tollgate::redis {

uint16_t Crc16(std::string_view bytes) {
  // Bit by bit: a key is hashed once per call, and a 256-entry table would only save a few
  // nanoseconds next to a network round trip.
  uint16_t crc = 0;
  for (unsigned char byte : bytes) {
    crc ^= static_cast<uint16_t>(byte) << 8;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<uint16_t>(crc << 1);
    }
  }
  return crc;
}

int KeySlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return Crc16(key) & (kClusterSlots - 1);
}

const std::string& SlotTag(int slot) {
  // Counts up until every slot has its number; the loop ends (CRC16 reaches every slot).
  static const std::array<std::string, kClusterSlots>* const tags = [] {
    auto* table = new std::array<std::string, kClusterSlots>();
    int missing = kClusterSlots;
    for (int n = 0; missing > 0; ++n) {
      std::string tag = absl::StrCat(n);
      std::string& entry = (*table)[Crc16(tag) & (kClusterSlots - 1)];
      if (entry.empty()) {
        entry = std::move(tag);
        --missing;
      }
    }
    return table;
  }();
  return (*tags)[slot];
}

}  // namespace tollgate::redis
