// Copyright tollgate authors.
#include "src/store/memory/shard.h"

#include <algorithm>
#include <cassert>
#include <new>

namespace tollgate::memory {

void Shard::Put(const KeyView& key, const AnyState& state, int64_t expires_at_micros, int64_t now) {
  if (Record* entry = entries_.find(key); entry != nullptr) {
    // Its heap record stays; it goes back in with this time when it comes up.
    entry->set_state(state);
    entry->expires_at_micros = expires_at_micros;
    return;
  }
  if (expires_at_micros <= now) return;
  if (size() >= capacity_) {
    RemoveExpired(now, -1);
    if (size() >= capacity_) EvictSoonest();
  }
  entries_.insert_new(key, [&](void* line) { new (line) Record(key, state, expires_at_micros); });
  heap_.push_back(HeapRecord{expires_at_micros, KeyCopy(key)});
  std::push_heap(heap_.begin(), heap_.end(), LaterExpiry);
}

int64_t Shard::RemoveExpired(int64_t now, int budget) {
  int64_t removed = 0;
  while (budget != 0 && !heap_.empty() && heap_.front().expires_at_micros <= now) {
    if (budget > 0) --budget;
    const Record& entry = PopTop();
    if (entry.expires_at_micros > now) {
      PushBack(entry.expires_at_micros);
    } else {
      DropPopped();
      ++removed;
    }
  }
  return removed;
}

void Shard::EvictSoonest() {
  while (!heap_.empty()) {
    const int64_t popped_at = heap_.front().expires_at_micros;
    const Record& entry = PopTop();
    if (entry.expires_at_micros > popped_at) {
      PushBack(entry.expires_at_micros);  // used since; not as soon as its record says
      continue;
    }
    DropPopped();
    ++evictions_;
    return;
  }
}

const Record& Shard::PopTop() {
  std::pop_heap(heap_.begin(), heap_.end(), LaterExpiry);
  const Record* entry = entries_.find(heap_.back().key.view());
  assert(entry != nullptr);  // one heap record per entry, removed only with it
  return *entry;
}

void Shard::PushBack(int64_t expires_at_micros) {
  heap_.back().expires_at_micros = expires_at_micros;
  std::push_heap(heap_.begin(), heap_.end(), LaterExpiry);
}

void Shard::DropPopped() {
  entries_.erase(heap_.back().key.view());
  heap_.pop_back();
}

}  // namespace tollgate::memory
