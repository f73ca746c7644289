// Copyright tollgate authors.
#include "src/store/memory/record.h"

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace tollgate::memory {
namespace {

std::string Concatenate(std::string_view name, std::string_view key) {
  std::string bytes;
  bytes.reserve(name.size() + key.size());
  bytes.append(name).append(key);
  return bytes;
}

}  // namespace

Record::Record(const KeyView& key, const AnyState& state, int64_t expires_at_micros)
    : expires_at_micros(expires_at_micros) {
  std::memset(state_, 0, sizeof(state_));
  std::memset(bytes_, 0, sizeof(bytes_));
  set_state(state);
  if (key.name.size() + key.key.size() <= kInlineBytes) {
    name_size_ = static_cast<uint8_t>(key.name.size());
    key_size_ = static_cast<uint8_t>(key.key.size());
    std::memcpy(bytes_, key.name.data(), key.name.size());
    std::memcpy(bytes_ + key.name.size(), key.key.data(), key.key.size());
  } else {
    const OnHeap heap{new char[key.name.size() + key.key.size()], key.name.size(), key.key.size()};
    std::memcpy(heap.bytes, key.name.data(), key.name.size());
    std::memcpy(heap.bytes + key.name.size(), key.key.data(), key.key.size());
    std::memcpy(bytes_, &heap, sizeof(heap));
    name_size_ = kOnHeap;
    key_size_ = 0;
  }
}

Record::Record(Record&& other) noexcept
    : expires_at_micros(other.expires_at_micros),
      state_index_(other.state_index_),
      name_size_(other.name_size_),
      key_size_(other.key_size_) {
  std::memcpy(state_, other.state_, sizeof(state_));
  std::memcpy(bytes_, other.bytes_, sizeof(bytes_));
  other.name_size_ = 0;  // `other` no longer owns a heap copy
}

Record::~Record() {
  if (name_size_ == kOnHeap) delete[] on_heap().bytes;
}

AnyState Record::state() const {
  AnyState state;
  // Tries every alternative; the record holds exactly one.
  [&]<size_t... I>(std::index_sequence<I...>) {
    (TakeIfHeld<std::variant_alternative_t<I, AnyState>>(state), ...);
  }
  (std::make_index_sequence<std::variant_size_v<AnyState>>());
  return state;
}

void Record::set_state(const AnyState& state) {
  std::visit([this](const auto& s) { Set(s); }, state);
}

KeyCopy::KeyCopy(const KeyView& key)
    : bytes_(Concatenate(key.name, key.key)), name_size_(key.name.size()), hash_(key.hash) {}

}  // namespace tollgate::memory
