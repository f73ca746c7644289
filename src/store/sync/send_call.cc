// Copyright tollgate authors.
#include "src/store/sync/send_call.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "src/store/redis/lua_scripts.h"
#include "src/store/redis/resp.h"

namespace tollgate::sync {

void SendCall(redis::Router& router, const std::string& script_sha, const CallContext& context,
              const SlotCall& call, std::atomic<int64_t>& commands, bool eval,
              redis::ReplyCallback done) {
  const std::vector<std::string> args =
      ScriptCommand(eval ? "EVAL" : "EVALSHA", eval ? redis::kLuaSync : script_sha, context, call);
  commands.fetch_add(1, std::memory_order_relaxed);
  router.Send(
      call.slot, redis::FormatCommand(args),
      [&router, &script_sha, &context, &call, &commands, eval,
       done = std::move(done)](absl::StatusOr<redis::RedisReply> reply) mutable {
        if (!eval && reply.ok() && reply->is_error() && absl::StartsWith(reply->str, "NOSCRIPT")) {
          SendCall(router, script_sha, context, call, commands, /*eval=*/true, std::move(done));
          return;
        }
        std::move(done)(std::move(reply));
      },
      /*follow_ask=*/false);
}

}  // namespace tollgate::sync
