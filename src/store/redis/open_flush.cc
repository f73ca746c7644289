// Copyright tollgate authors. RedisStoreImpl's flushes: the requests one thread makes while
// an I/O handler of the connections runs, sent together when it ends.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "src/store/redis/redis_store_impl.h"

namespace tollgate::redis {
thread_local std::vector<RedisStoreImpl::OpenFlush*> RedisStoreImpl::open_flushes_;

// The requests of one thread for one store, by hash slot in order of first use, waiting for
// the end of the running handler. Requests never sent (the loop stopped before the flush
// ran) are answered Unavailable when it is destroyed.
struct RedisStoreImpl::OpenFlush {
  RedisStoreImpl* store = nullptr;
  // The store's count of calls in flight, held up from the flush's opening to its end.
  std::shared_ptr<internal::InFlight> in_flight;
  std::vector<std::pair<int, std::vector<ScriptRequest>>> slots;

  OpenFlush(RedisStoreImpl* store, std::shared_ptr<internal::InFlight> counter)
      : store(store), in_flight(std::move(counter)) {
    in_flight->Start();
  }
  OpenFlush(const OpenFlush&) = delete;
  OpenFlush& operator=(const OpenFlush&) = delete;
  ~OpenFlush() {
    std::erase(open_flushes_, this);
    for (auto& [slot, requests] : slots) {
      for (ScriptRequest& request : requests) {
        absl::Status stopped = absl::UnavailableError("the Redis store's I/O loop stopped");
        if (request.timed_done) {
          std::move(request.timed_done)(std::move(stopped), 0);
        } else {
          std::move(request.done)(std::move(stopped));
        }
      }
    }
    in_flight->Finish();
  }

  // Sends every request (its calls count in flight on their own).
  void Send() {
    std::erase(open_flushes_, this);
    for (auto& [slot, requests] : slots) {
      store->SendRequests(slot, std::move(requests), std::nullopt);
    }
    slots.clear();
  }

  void Add(int slot, ScriptRequest request) {
    auto it = std::find_if(slots.begin(), slots.end(),
                           [slot](const auto& group) { return group.first == slot; });
    if (it == slots.end()) {
      slots.emplace_back(slot, std::vector<ScriptRequest>());
      it = slots.end() - 1;
    }
    it->second.push_back(std::move(request));
  }
};

void RedisStoreImpl::Submit(int slot, ScriptRequest request) {
  for (OpenFlush* open : open_flushes_) {
    if (open->store == this) {
      open->Add(slot, std::move(request));
      return;
    }
  }
  auto open = std::make_unique<OpenFlush>(this, calls_in_flight_);
  open->Add(slot, std::move(request));
  OpenFlush* const raw = open.get();
  Router::Work flush = [open = std::move(open)]() mutable { open->Send(); };
  if (router_.DeferOnIoThread(flush)) {
    open_flushes_.push_back(raw);
    return;
  }
  std::move(flush)();  // no handler to wait for: at once
}

}  // namespace tollgate::redis
