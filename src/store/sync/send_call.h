// Copyright tollgate authors. Sending one sync.lua call of a round, for every user of sync
// rounds (the sync store, the Rate Limit Quota Service).
#ifndef TOLLGATE_SRC_STORE_SYNC_SEND_CALL_H_
#define TOLLGATE_SRC_STORE_SYNC_SEND_CALL_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "src/store/redis/connection.h"
#include "src/store/redis/router.h"
#include "src/store/sync/round.h"

namespace tollgate::sync {

// Sends `call` on `router` as EVALSHA of `script_sha` (sync.lua), or as EVAL (the script's
// text) when `eval`, and once more as EVAL after a NOSCRIPT reply (Redis restarted or
// flushed its scripts); `done` gets the last reply, on the I/O thread. Adds each command sent
// to `commands`. REQUIRES: `router`, `script_sha`, `context`, `call` and `commands` live until
// `done` has run (as when `done` owns what holds them).
void SendCall(redis::Router& router, const std::string& script_sha, const CallContext& context,
              const SlotCall& call, std::atomic<int64_t>& commands, bool eval,
              redis::ReplyCallback done);

}  // namespace tollgate::sync

#endif  // TOLLGATE_SRC_STORE_SYNC_SEND_CALL_H_
