// Copyright tollgate authors. One Envoy config file, one `tollgate serve`: the same sequence
// of requests over gRPC (ShouldRateLimit) and over HTTP (POST /json) gets the same
// decisions: overall code, and per descriptor the code, limit_remaining and current_limit.
// The two runs use different keys (every descriptor value carries the run's tag), so they
// count separately on the one server; windows are a day or longer, so no run crosses one.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "boost/beast/http.hpp"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

namespace http = boost::beast::http;
using ::envoy::service::ratelimit::v3::RateLimitRequest;
using ::envoy::service::ratelimit::v3::RateLimitResponse;
using ::envoy::service::ratelimit::v3::RateLimitService;
using ::tollgate::testing::HttpTestClient;
using ::tollgate::testing::ServeProcess;

// Every kind of rule: fixed window, token bucket, sliding window, shadow, block list
// (requests_per_unit 0), wildcard, nested, unlimited, replaces.
constexpr char kConfig[] = R"(domain: eq
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: ip
    rate_limit: {unit: day, requests_per_unit: 4, algorithm: token_bucket}
  - key: api_key
    rate_limit: {unit: day, requests_per_unit: 5, algorithm: sliding_window}
  - key: beta
    shadow_mode: true
    rate_limit: {unit: year, requests_per_unit: 1}
  - key: tenant
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: day, requests_per_unit: 0}
      - key: plan
        value: "gold*"
        rate_limit: {unit: month, requests_per_unit: 2, name: gold}
      - key: plan
        value: platinum
        rate_limit: {unlimited: true}
      - key: vip
        rate_limit: {unit: week, requests_per_unit: 10, replaces: [{name: gold}]}
)";

struct Descriptor {
  std::vector<std::pair<std::string, std::string>> entries;  // "$" in a value: the run's tag
  int64_t hits = -1;                                         // >= 0: the descriptor's own
  uint32_t override_per_day = 0;                             // > 0: a limit override
};

struct Step {
  std::vector<Descriptor> descriptors;
  uint32_t hits_addend = 0;
};

RateLimitRequest BuildRequest(const Step& step, const std::string& tag) {
  RateLimitRequest request;
  request.set_domain("eq");
  request.set_hits_addend(step.hits_addend);
  for (const Descriptor& descriptor : step.descriptors) {
    auto* out = request.add_descriptors();
    for (const auto& [key, value] : descriptor.entries) {
      auto* entry = out->add_entries();
      entry->set_key(key);
      entry->set_value(absl::StrReplaceAll(value, {{"$", tag}}));
    }
    if (descriptor.hits >= 0) out->mutable_hits_addend()->set_value(descriptor.hits);
    if (descriptor.override_per_day > 0) {
      out->mutable_limit()->set_requests_per_unit(descriptor.override_per_day);
      out->mutable_limit()->set_unit(envoy::type::v3::DAY);
    }
  }
  return request;
}

std::vector<Step> Sequence() {
  const Descriptor user_a{{{"user", "$-a"}}};
  const Descriptor user_c{{{"user", "$-c"}}};
  const Descriptor user_d{{{"user", "$-d"}}};
  const Descriptor ip{{{"ip", "$-10.0.0.1"}}};
  const Descriptor api{{{"api_key", "$-k"}}};
  const Descriptor beta{{{"beta", "$-x"}}};
  const Descriptor free_plan{{{"tenant", "$-t"}, {"plan", "free"}}};
  const Descriptor gold{{{"tenant", "$-t"}, {"plan", "gold-1"}}};
  const Descriptor gold_other{{{"tenant", "$-u"}, {"plan", "gold-2"}}};
  const Descriptor vip{{{"tenant", "$-u"}, {"vip", "yes"}}};
  const Descriptor platinum{{{"tenant", "$-t"}, {"plan", "platinum"}}};
  const Descriptor unknown{{{"nothing", "$"}}};
  Descriptor override_limit{{{"user", "$-o"}}};
  override_limit.override_per_day = 2;
  Descriptor api_own_hits = api;
  api_own_hits.hits = 2;
  Descriptor api_peek = api;
  api_peek.hits = 0;
  return {
      {{user_a}},
      {{user_a}},
      {{user_a, ip}},
      {{user_a}},  // over: 3 a day
      {{ip}, 4},   // over: 1 + 4 > 4, nothing taken
      {{ip}, 2},
      {{api_own_hits, ip}},  // descriptor hits 2; the ip takes the request's 1
      {{api_peek}},
      {{api}, 3},
      {{api}},  // over: 5 a day
      {{beta}},
      {{beta, user_c}},       // the shadow rule is over but refuses nothing
      {{free_plan, user_c}},  // block list: over, and user_c is not counted
      {{user_c}},
      {{gold}},
      {{gold, platinum}},
      {{gold}},             // over: 2 a month
      {{gold_other, vip}},  // gold is replaced by the vip rule: not counted
      {{gold_other, vip}},
      {{gold_other}},
      {{unknown, user_c}},
      {{override_limit}},
      {{override_limit}},
      {{override_limit}},  // over: the override's 2 a day
      {{user_d, user_a}},  // over: user_a; user_d is not charged and reports its 3
      {{user_d}},          // counted: 2 left
  };
}

TEST(RlsEquivalenceTest, GrpcAndJsonGiveTheSameDecisions) {
  auto server = ServeProcess::Start(kConfig);
  ASSERT_NE(server, nullptr);
  const int grpc_port = server->grpc_port();
  ASSERT_GT(grpc_port, 0) << server->log();
  auto stub = RateLimitService::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port),
                                                            grpc::InsecureChannelCredentials()));
  HttpTestClient client(server->port());

  const std::vector<Step> steps = Sequence();
  int over_limit = 0;
  std::vector<int> overall_codes;
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("step ", i));
    RateLimitResponse over_grpc;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status status = stub->ShouldRateLimit(&context, BuildRequest(steps[i], "g"), &over_grpc);
    ASSERT_TRUE(status.ok()) << status.error_message();

    std::string body;
    ASSERT_TRUE(
        google::protobuf::util::MessageToJsonString(BuildRequest(steps[i], "j"), &body).ok());
    auto reply = client.Send(http::verb::post, "/json", body);
    ASSERT_TRUE(reply.has_value());
    RateLimitResponse over_json;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(reply->body(), &over_json).ok())
        << reply->body();

    EXPECT_EQ(reply->result_int(),
              over_grpc.overall_code() == RateLimitResponse::OVER_LIMIT ? 429 : 200);
    EXPECT_EQ(over_json.overall_code(), over_grpc.overall_code());
    ASSERT_EQ(over_json.statuses_size(), over_grpc.statuses_size()) << reply->body();
    for (int d = 0; d < over_grpc.statuses_size(); ++d) {
      SCOPED_TRACE(absl::StrCat("descriptor ", d));
      const auto& g = over_grpc.statuses(d);
      const auto& j = over_json.statuses(d);
      EXPECT_EQ(j.code(), g.code());
      EXPECT_EQ(j.limit_remaining(), g.limit_remaining());
      EXPECT_EQ(j.has_current_limit(), g.has_current_limit());
      EXPECT_EQ(j.current_limit().requests_per_unit(), g.current_limit().requests_per_unit());
      EXPECT_EQ(j.current_limit().unit(), g.current_limit().unit());
      EXPECT_EQ(j.current_limit().name(), g.current_limit().name());
      // Whole seconds, as envoyproxy/ratelimit sends (Envoy reads only .seconds()).
      EXPECT_EQ(g.duration_until_reset().nanos(), 0);
      EXPECT_EQ(j.duration_until_reset().nanos(), 0);
      if (g.code() == RateLimitResponse::OVER_LIMIT) {
        EXPECT_EQ(g.limit_remaining(), 0u);
      }
    }
    // What a refusal reports for the descriptors it did not charge: what they really have.
    if (i == 4) {  // ip: 3 left, 4 asked
      EXPECT_EQ(over_grpc.statuses(0).limit_remaining(), 0u);
    }
    if (i == 12) {  // user_c, counted once at step 11, only looked at
      EXPECT_EQ(over_grpc.statuses(1).limit_remaining(), 2u);
    }
    if (i == 24) {  // user_d not charged by the refusal: 3 left, not 2
      EXPECT_EQ(over_grpc.statuses(0).limit_remaining(), 3u);
      EXPECT_EQ(over_grpc.statuses(1).limit_remaining(), 0u);
    }
    if (i == 25) {
      EXPECT_EQ(over_grpc.overall_code(), RateLimitResponse::OK);
      EXPECT_EQ(over_grpc.statuses(0).limit_remaining(), 2u);
    }
    overall_codes.push_back(over_grpc.overall_code());
    over_limit += over_grpc.overall_code() == RateLimitResponse::OVER_LIMIT;
  }
  // The sequence means something: these steps refuse, the others pass.
  const std::vector<size_t> refused = {3, 4, 9, 12, 16, 23, 24};
  for (size_t i = 0; i < overall_codes.size(); ++i) {
    const bool expect_refused = std::find(refused.begin(), refused.end(), i) != refused.end();
    EXPECT_EQ(overall_codes[i],
              expect_refused ? RateLimitResponse::OVER_LIMIT : RateLimitResponse::OK)
        << "step " << i;
  }
  EXPECT_EQ(over_limit, static_cast<int>(refused.size()));
  EXPECT_EQ(server->Stop(), 0) << server->log();
}

}  // namespace
}  // namespace tollgate
