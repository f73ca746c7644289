// Copyright tollgate authors. A RateLimitConfig received over xDS means what the equivalent
// YAML file means (the peer's test/config files, as protobuf text), and each of the peer's
// invalid configs is refused with a message naming the resource and the field.
#include "src/xds/rate_limit_config.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "src/core/absl_view.h"
#include "src/server/descriptor_matcher.h"

namespace tollgate::xds {
namespace {

using ::ratelimit::config::ratelimit::v3::RateLimitConfig;
using ::testing::HasSubstr;

RateLimitConfig FromText(const std::string& text) {
  RateLimitConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

// Everything a descriptor means, one line each, nested by indentation; not where it was
// written (line, file_name).
void Describe(const std::vector<EnvoyDescriptor>& descriptors, const std::string& indent,
              std::string& out) {
  for (const EnvoyDescriptor& d : descriptors) {
    absl::StrAppend(&out, indent, d.key, "=", d.value, " shadow=", d.shadow_mode,
                    " quota=", d.quota_mode, " share=", d.share_threshold,
                    " metadata=", d.metadata_json);
    if (d.rate_limit.has_value()) {
      const EnvoyRateLimit& r = *d.rate_limit;
      absl::StrAppend(
          &out, " limit{unlimited=", r.unlimited, " unit=", AbslView(EnvoyUnitName(r.unit)),
          " rpu=", r.requests_per_unit, " x", r.unit_multiplier, " name=", r.name,
          " replaces=", absl::StrJoin(r.replaces, "|"),
          " algorithm=", static_cast<int>(r.algorithm),
          " failure=", static_cast<int>(r.on_store_failure), " timeout=", r.timeout_micros, "}");
    }
    out += "\n";
    Describe(d.descriptors, indent + "  ", out);
  }
}

std::string Describe(const EnvoyDomainConfig& config) {
  std::string out = absl::StrCat("domain ", config.domain, "\n");
  Describe(config.descriptors, "  ", out);
  return out;
}

// The proto and the YAML file give the same config.
void ExpectSameAsYaml(const std::string& proto_text, const std::string& yaml) {
  absl::StatusOr<EnvoyDomainConfig> from_proto = ConvertRateLimitConfig(FromText(proto_text));
  ASSERT_TRUE(from_proto.ok()) << from_proto.status();
  absl::StatusOr<EnvoyDomainConfig> from_yaml = ParseEnvoyConfig(yaml, "peer.yaml");
  ASSERT_TRUE(from_yaml.ok()) << from_yaml.status();
  EXPECT_EQ(Describe(*from_proto), Describe(*from_yaml));
}

// The error of converting `proto_text`, "" when it converts.
std::string Error(const std::string& proto_text) {
  absl::StatusOr<EnvoyDomainConfig> config = ConvertRateLimitConfig(FromText(proto_text));
  if (config.ok()) return "";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(config.status().message());
}

TEST(RateLimitConfigTest, BasicConfigAsTheFile) {
  // The peer's test/config/basic_config.yaml.
  ExpectSameAsYaml(R"pb(
                     name: "basic"
                     domain: "test-domain"
                     descriptors {
                       key: "key1"
                       value: "value1"
                       descriptors {
                         key: "subkey1"
                         rate_limit { unit: SECOND requests_per_unit: 5 }
                       }
                       descriptors {
                         key: "subkey1"
                         value: "subvalue1"
                         rate_limit { unit: SECOND requests_per_unit: 10 }
                       }
                     }
                     descriptors {
                       key: "key2"
                       rate_limit { unit: MINUTE requests_per_unit: 20 }
                     }
                     descriptors {
                       key: "key2"
                       value: "value2"
                       rate_limit { unit: MINUTE requests_per_unit: 30 }
                     }
                     descriptors { key: "key2" value: "value3" }
                     descriptors {
                       key: "key3"
                       rate_limit { unit: HOUR requests_per_unit: 1 }
                     }
                     descriptors {
                       key: "key4"
                       rate_limit { name: "key4_rate_limit" unit: DAY requests_per_unit: 1 }
                     }
                     descriptors {
                       key: "key5"
                       value: "value5"
                       rate_limit { unit: DAY requests_per_unit: 15 }
                       descriptors {
                         key: "subkey5"
                         value: "subvalue5"
                         rate_limit { unit: DAY requests_per_unit: 25 }
                       }
                     }
                     descriptors {
                       key: "key6"
                       rate_limit { unlimited: true }
                     }
                     descriptors {
                       key: "key7"
                       detailed_metric: true
                       rate_limit { unit: MINUTE requests_per_unit: 70 }
                     }
                     descriptors {
                       key: "week"
                       rate_limit { unit: WEEK requests_per_unit: 7 }
                     }
                     descriptors {
                       key: "block"
                       rate_limit { unit: SECOND requests_per_unit: 0 }
                     }
                   )pb",
                   R"(domain: test-domain
name: basic
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: subkey1
        value: subvalue1
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key2
    value: value2
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: key2
    value: value3
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: key4
    rate_limit: {name: key4_rate_limit, unit: day, requests_per_unit: 1}
  - key: key5
    value: value5
    rate_limit: {unit: day, requests_per_unit: 15}
    descriptors:
      - key: subkey5
        value: subvalue5
        rate_limit: {unit: day, requests_per_unit: 25}
  - key: key6
    rate_limit: {unlimited: true}
  - key: key7
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 70}
  - key: week
    rate_limit: {unit: week, requests_per_unit: 7}
  - key: block
    rate_limit: {unit: second, requests_per_unit: 0}
)");
}

TEST(RateLimitConfigTest, ShadowQuotaReplacesAndWildcardsAsTheFile) {
  // The peer's shadowmode_config.yaml and wildcard.yaml, with quota_mode and replaces.
  ExpectSameAsYaml(R"pb(
                     domain: "test-domain"
                     descriptors {
                       key: "key1"
                       value: "value1"
                       descriptors {
                         key: "subkey1"
                         value: "subvalue1"
                         shadow_mode: true
                         rate_limit { unit: SECOND requests_per_unit: 10 }
                       }
                     }
                     descriptors {
                       key: "key2"
                       shadow_mode: true
                       rate_limit { unit: MINUTE requests_per_unit: 20 }
                     }
                     descriptors {
                       key: "quota"
                       quota_mode: true
                       rate_limit { unit: DAY requests_per_unit: 3 }
                     }
                     descriptors {
                       key: "wild"
                       value: "foo*"
                       rate_limit { unit: MINUTE requests_per_unit: 20 }
                     }
                     descriptors {
                       key: "midWild"
                       value: "bar*b"
                       rate_limit { unit: MINUTE requests_per_unit: 20 }
                     }
                     descriptors {
                       key: "general"
                       rate_limit { name: "general" unit: MINUTE requests_per_unit: 100 }
                     }
                     descriptors {
                       key: "vip"
                       rate_limit {
                         name: "vip"
                         unit: MINUTE
                         requests_per_unit: 1000
                         replaces { name: "general" }
                         replaces { name: "other" }
                       }
                     }
                   )pb",
                   R"(domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        value: subvalue1
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: key2
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: quota
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: wild
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: midWild
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: general
    rate_limit: {name: general, unit: minute, requests_per_unit: 100}
  - key: vip
    rate_limit:
      name: vip
      unit: minute
      requests_per_unit: 1000
      replaces: [{name: general}, {name: other}]
)");
}

TEST(RateLimitConfigTest, MetadataAsTheFile) {
  // The peer's metadata.yaml, with every kind of value: a Struct's strings stay strings
  // (even "12" or "true"), its numbers and booleans are typed, its keys come sorted.
  ExpectSameAsYaml(
      R"pb(
        domain: "test-domain"
        descriptors {
          key: "key2"
          rate_limit { unit: MINUTE requests_per_unit: 20 }
          metadata {
            fields {
              key: "service_with_quota"
              value {
                struct_value {
                  fields {
                    key: "name"
                    value { string_value: "service_2" }
                  }
                }
              }
            }
            fields {
              key: "count"
              value { number_value: 12 }
            }
            fields {
              key: "ratio"
              value { number_value: 0.25 }
            }
            fields {
              key: "text"
              value { string_value: "12" }
            }
            fields {
              key: "flag"
              value { bool_value: true }
            }
            fields {
              key: "none"
              value { null_value: NULL_VALUE }
            }
            fields {
              key: "tiers"
              value {
                list_value {
                  values { string_value: "gold" }
                  values { string_value: "true" }
                }
              }
            }
          }
        }
      )pb",
      R"(domain: test-domain
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
    metadata:
      count: 12
      flag: true
      none: null
      ratio: 0.25
      service_with_quota: {name: service_2}
      text: "12"
      tiers: [gold, "true"]
)");
}

TEST(RateLimitConfigTest, PeersInvalidConfigsNameTheResourceAndField) {
  // bad_limit_unit.yaml: UNKNOWN, or a number the enum does not have.
  EXPECT_EQ(Error(R"pb(name: "eg-rl"
                       domain: "default"
                       descriptors {
                         key: "k"
                         rate_limit { requests_per_unit: 5 }
                       })pb"),
            "resource 'eg-rl' (domain 'default'): descriptors[0].rate_limit.unit: expected one "
            "of second, minute, hour, day, week, month, year, got 'UNKNOWN'");
  EXPECT_THAT(Error(R"pb(name: "r"
                         domain: "d"
                         descriptors {
                           key: "k"
                           rate_limit { unit: 42 requests_per_unit: 5 }
                         })pb"),
              HasSubstr("descriptors[0].rate_limit.unit: expected one of second, minute, hour, "
                        "day, week, month, year, got '42'"));
  // unlimited_with_unit.yaml.
  EXPECT_EQ(Error(R"pb(name: "r"
                       domain: "d"
                       descriptors {
                         key: "foo"
                         rate_limit { unlimited: true unit: DAY requests_per_unit: 25 }
                       })pb"),
            "resource 'r' (domain 'd'): descriptors[0].rate_limit.unit: must not be set when "
            "unlimited is true\n"
            "resource 'r' (domain 'd'): descriptors[0].rate_limit.requests_per_unit: must not be "
            "set when unlimited is true");
  // empty_key.yaml.
  EXPECT_EQ(Error(R"pb(name: "r"
                       domain: "d"
                       descriptors { value: "value1" })pb"),
            "resource 'r' (domain 'd'): descriptors[0].key: must not be empty");
  // duplicate_key.yaml.
  EXPECT_EQ(Error(R"pb(name: "r"
                       domain: "d"
                       descriptors { key: "key1" value: "value1" }
                       descriptors { key: "key1" value: "value1" })pb"),
            "resource 'r' (domain 'd'): descriptors[1]: duplicate descriptor key 'key1' value "
            "'value1' in the same list");
  // replaces_self.yaml and replaces_empty.yaml.
  EXPECT_EQ(Error(R"pb(name: "r"
                       domain: "d"
                       descriptors {
                         key: "key1"
                         value: "value1"
                         descriptors {
                           key: "subkey1"
                           rate_limit {
                             name: "self"
                             replaces { name: "self" }
                             unit: SECOND
                             requests_per_unit: 5
                           }
                         }
                       })pb"),
            "resource 'r' (domain 'd'): descriptors[0].descriptors[0].rate_limit.replaces[0]."
            "name: a rule cannot replace itself");
  EXPECT_EQ(Error(R"pb(name: "r"
                       domain: "d"
                       descriptors {
                         key: "subkey1"
                         rate_limit {
                           name: "self"
                           replaces {}
                           unit: SECOND
                           requests_per_unit: 5
                         }
                       })pb"),
            "resource 'r' (domain 'd'): descriptors[0].rate_limit.replaces[0].name: must not be "
            "empty");
  // empty_domain.yaml.
  EXPECT_EQ(Error(R"pb(name: "r")pb"), "resource 'r' (domain ''): domain: must not be empty");
  // A wildcard that can never match names the earlier one by its field.
  EXPECT_EQ(Error(R"pb(name: "r"
                       domain: "d"
                       descriptors { key: "p" value: "foo*" }
                       descriptors { key: "p" value: "foo*bar" })pb"),
            "resource 'r' (domain 'd'): descriptors[1].value: wildcard 'foo*bar' can never "
            "match: 'foo*' (descriptors[0]) comes first and matches every value it would");
}

TEST(RateLimitConfigTest, ConvertedDomainsNameTheirResource) {
  absl::StatusOr<EnvoyDomainConfig> config =
      ConvertRateLimitConfig(FromText(R"pb(name: "eg-rl" domain: "tiffin")pb"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->file_name, "xDS resource 'eg-rl'");
  // So a domain also given by a file is refused naming both.
  absl::StatusOr<EnvoyDomainConfig> file = ParseEnvoyConfig("domain: tiffin\n", "tiffin.yaml");
  ASSERT_TRUE(file.ok());
  absl::StatusOr<std::unique_ptr<DescriptorMatcher>> both =
      DescriptorMatcher::Create({*file, *config});
  EXPECT_EQ(both.status().message(),
            "domain 'tiffin' is in both tiffin.yaml and xDS resource 'eg-rl'");
}

google::protobuf::RepeatedPtrField<google::protobuf::Any> Pack(
    const std::vector<RateLimitConfig>& configs) {
  google::protobuf::RepeatedPtrField<google::protobuf::Any> resources;
  for (const RateLimitConfig& config : configs) resources.Add()->PackFrom(config);
  return resources;
}

TEST(RateLimitConfigTest, ResponseConvertsEveryResourceOrNamesEachBadOne) {
  absl::StatusOr<std::vector<EnvoyDomainConfig>> ok = ConvertRateLimitConfigs(Pack(
      {FromText(R"pb(name: "a" domain: "one")pb"), FromText(R"pb(name: "b" domain: "two")pb")}));
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[1].domain, "two");
  EXPECT_TRUE(ConvertRateLimitConfigs({}).ok());  // state of the world: no domains

  google::protobuf::RepeatedPtrField<google::protobuf::Any> bad =
      Pack({FromText(R"pb(name: "a" domain: "one")pb"), FromText(R"pb(name: "b" domain: "one")pb"),
            FromText(R"pb(name: "c"
                          domain: "three"
                          descriptors {})pb")});
  bad.Add()->set_type_url("type.googleapis.com/envoy.config.cluster.v3.Cluster");
  google::protobuf::Any* garbage = bad.Add();
  garbage->set_type_url(kRateLimitConfigTypeUrl);
  garbage->set_value("\xff\xff\xff");
  absl::StatusOr<std::vector<EnvoyDomainConfig>> refused = ConvertRateLimitConfigs(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(),
            "resource 'b' (domain 'one'): domain: also given by resource 'a'\n"
            "resource 'c' (domain 'three'): descriptors[0].key: must not be empty\n"
            "resource #3: expected type "
            "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig, got "
            "'type.googleapis.com/envoy.config.cluster.v3.Cluster'\n"
            "resource #4: not a valid RateLimitConfig message (cannot decode)");
}

}  // namespace
}  // namespace tollgate::xds
