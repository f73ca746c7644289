// Copyright tollgate authors. RedisStoreImpl's flushes: the requests one thread makes while
// an I/O handler of the connections runs, sent together when it ends.
#include <algorithm>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "src/core/absl_view.h"
#include "src/store/redis/redis_store_impl.h"

namespace tollgate::redis {
thread_local std::vector<RedisStoreImpl::OpenFlush*> RedisStoreImpl::open_flushes_;

// The requests of one thread for one store, by hash slot in order of first use, waiting for
// the end of the running handler. Counted in the store's calls in flight until sent (the
// calls then count on their own) or abandoned: requests never sent (the loop stopped before
// the flush ran, or the store is going) are answered Unavailable.
struct RedisStoreImpl::OpenFlush {
  RedisStoreImpl* store = nullptr;
  std::shared_ptr<internal::InFlight> in_flight;  // null once sent or abandoned
  std::vector<std::pair<int, std::vector<ScriptRequest>>> slots;

  OpenFlush(RedisStoreImpl* store, std::shared_ptr<internal::InFlight> counter)
      : store(store), in_flight(std::move(counter)) {
    in_flight->Start();
  }
  OpenFlush(const OpenFlush&) = delete;
  OpenFlush& operator=(const OpenFlush&) = delete;
  ~OpenFlush() { Abandon("the Redis store's I/O loop stopped"); }

  void Add(int slot, ScriptRequest request) {
    auto it = std::find_if(slots.begin(), slots.end(),
                           [slot](const auto& group) { return group.first == slot; });
    if (it == slots.end()) {
      slots.emplace_back(slot, std::vector<ScriptRequest>());
      it = slots.end() - 1;
    }
    it->second.push_back(std::move(request));
  }

  void Send() {
    std::erase(open_flushes_, this);
    if (in_flight == nullptr) return;
    for (auto& [slot, requests] : slots) {
      store->SendRequests(slot, std::move(requests), std::nullopt);
    }
    slots.clear();
    Done();
  }

  void Abandon(std::string_view why) {
    std::erase(open_flushes_, this);
    if (in_flight == nullptr) return;
    for (auto& [slot, requests] : slots) {
      for (ScriptRequest& request : requests) {
        absl::Status unavailable = absl::UnavailableError(AbslView(why));
        if (request.timed_done) {
          std::move(request.timed_done)(std::move(unavailable), 0);
        } else {
          std::move(request.done)(std::move(unavailable));
        }
      }
    }
    slots.clear();
    Done();
  }

  // The store may be gone from here on.
  void Done() { std::exchange(in_flight, nullptr)->Finish(); }
};

void RedisStoreImpl::AbandonOpenFlush() {
  for (OpenFlush* open : std::vector<OpenFlush*>(open_flushes_)) {
    if (open->store == this) open->Abandon("the Redis store is shutting down");
  }
}

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
