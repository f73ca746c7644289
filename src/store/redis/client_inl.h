// Copyright tollgate authors. Template bodies of client.h.
#ifndef TOLLGATE_SRC_STORE_REDIS_CLIENT_INL_H_
#define TOLLGATE_SRC_STORE_REDIS_CLIENT_INL_H_

#include <future>
#include <string>
#include <utility>
#include <vector>

namespace tollgate::redis {

template <typename SendFn>
absl::StatusOr<RedisReply> BlockingCommand(const std::vector<std::string>& args, SendFn&& send) {
  std::promise<absl::StatusOr<RedisReply>> promise;
  std::future<absl::StatusOr<RedisReply>> result = promise.get_future();
  send(FormatCommand(args),
       [&promise](absl::StatusOr<RedisReply> reply) { promise.set_value(std::move(reply)); });
  return result.get();
}

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_CLIENT_INL_H_
