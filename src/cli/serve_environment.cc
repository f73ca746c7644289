// Copyright tollgate authors.
#include "src/cli/serve_environment.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/cli/serve.h"
#include "src/config/names.h"
#include "src/core/absl_view.h"

extern char** environ;

namespace tollgate::cli {
namespace {

// Larger than any password or URL; a bound on what a wrong path (a log, a device) reads.
constexpr size_t kMaxSecretBytes = 64 * 1024;

std::vector<std::string> OptionEnvironmentNames(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* option : command.get_options()) {
    if (!option->get_envname().empty()) names.push_back(option->get_envname());
  }
  return names;
}

// The names of the set, non-empty variables that start with kEnvironmentPrefix.
std::vector<std::string> PrefixedVariables() {
  std::vector<std::string> names;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view variable(*entry);
    const size_t equals = variable.find('=');
    if (equals == std::string_view::npos || equals + 1 == variable.size()) continue;
    std::string_view name = variable.substr(0, equals);
    if (absl::StartsWith(AbslView(name), AbslView(kEnvironmentPrefix))) names.emplace_back(name);
  }
  return names;
}

bool IsUnreserved(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

}  // namespace

std::string PercentEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (IsUnreserved(c)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

namespace {

// Where a URL's authority lies: after "://", up to the first '/' or '?'. npos when `url`
// has no scheme.
struct Authority {
  size_t begin = std::string_view::npos;
  size_t end = std::string_view::npos;
};

Authority FindAuthority(std::string_view url) {
  Authority authority;
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos || scheme == 0) return authority;
  authority.begin = scheme + 3;
  authority.end = url.find_first_of("/?", authority.begin);
  if (authority.end == std::string_view::npos) authority.end = url.size();
  return authority;
}

}  // namespace

std::string EnvironmentName(std::string_view long_name) {
  std::string name(kEnvironmentPrefix);
  for (char c : long_name) name.push_back(c == '-' ? '_' : absl::ascii_toupper(c));
  return name;
}

void ReadOptionsFromEnvironment(CLI::App& command) {
  const CLI::Option* help = command.get_help_ptr();
  for (CLI::Option* option : command.get_options()) {
    if (option == help || option->get_lnames().empty()) continue;
    option->envname(EnvironmentName(option->get_lnames().front()));
  }
}

std::vector<std::string> MisspelledEnvironmentVariables(const CLI::App& command) {
  const std::vector<std::string> known = OptionEnvironmentNames(command);
  std::vector<absl::string_view> candidates(known.begin(), known.end());
  std::vector<std::string> warnings;
  for (const std::string& name : PrefixedVariables()) {
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    absl::string_view closest = config_internal::ClosestName(name, candidates);
    if (closest.empty()) continue;
    warnings.push_back(absl::StrCat(name, " is not an option of serve (did you mean ", closest,
                                    "?); it is ignored"));
  }
  return warnings;
}

std::vector<std::string> OptionEnvironmentVariablesSet(const CLI::App& command) {
  const std::vector<std::string> known = OptionEnvironmentNames(command);
  std::vector<std::string> set;
  for (const std::string& name : PrefixedVariables()) {
    if (std::find(known.begin(), known.end(), name) != known.end()) set.push_back(name);
  }
  return set;
}

absl::StatusOr<std::string> ReadSecretFile(std::string_view option, const std::string& path) {
  const auto invalid = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(AbslView(option), " ", path, ": ", AbslView(why)));
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid(std::strerror(errno));
  std::string text;
  char buffer[4096];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxSecretBytes) return invalid("larger than 64 KiB, not a secret");
  }
  if (in.bad()) return invalid("read failed");
  if (absl::EndsWith(text, "\n")) text.pop_back();
  if (absl::EndsWith(text, "\r")) text.pop_back();
  if (text.empty()) return invalid("empty");
  if (text.find_first_of("\r\n") != std::string::npos) {
    return invalid("more than one line; expected the secret alone");
  }
  return text;
}

bool RedisUrlHasPassword(std::string_view url) {
  const Authority authority = FindAuthority(url);
  if (authority.begin == std::string_view::npos) return false;
  const std::string_view host_part = url.substr(authority.begin, authority.end - authority.begin);
  const size_t at = host_part.rfind('@');
  return at != std::string_view::npos && host_part.substr(0, at).find(':') != std::string::npos;
}

bool HideRedisPasswords(int argc, char** argv) {
  bool hidden = false;
  for (int i = 1; i < argc; ++i) {
    char* value = nullptr;
    if (std::strcmp(argv[i], "--redis") == 0 && i + 1 < argc) {
      value = argv[++i];
    } else if (std::strncmp(argv[i], "--redis=", 8) == 0) {
      value = argv[i] + 8;
    }
    if (value == nullptr || !RedisUrlHasPassword(value)) continue;
    const std::string_view url(value);
    const Authority authority = FindAuthority(url);
    const size_t at = url.substr(0, authority.end).rfind('@');
    const size_t colon = url.find(':', authority.begin);
    for (size_t j = colon + 1; j < at; ++j) value[j] = 'x';
    hidden = true;
  }
  return hidden;
}

absl::StatusOr<std::string> WithRedisPassword(std::string_view url, std::string_view password) {
  const Authority authority = FindAuthority(url);
  if (authority.begin == std::string_view::npos) {
    return absl::InvalidArgumentError(
        "expected a Redis URL such as redis://host:6379 to add the password to");
  }
  if (RedisUrlHasPassword(url)) {
    return absl::InvalidArgumentError(
        "the Redis URL already has a password and --redis-password-file gives another; give it "
        "in one place");
  }
  const std::string_view host_part = url.substr(authority.begin, authority.end - authority.begin);
  const size_t at = host_part.rfind('@');
  const std::string_view user =
      at == std::string_view::npos ? std::string_view() : host_part.substr(0, at);
  const std::string_view host = at == std::string_view::npos ? host_part : host_part.substr(at + 1);
  return absl::StrCat(AbslView(url.substr(0, authority.begin)), AbslView(user), ":",
                      PercentEncode(password), "@", AbslView(host),
                      AbslView(url.substr(authority.end)));
}

absl::StatusOr<std::string> ResolveRedisUrl(const ServeOptions& options) {
  std::string url = options.redis_url;
  if (!options.redis_url_file.empty()) {
    if (!url.empty()) {
      return absl::InvalidArgumentError(
          "--redis and --redis-url-file are both given (on the command line or as TOLLGATE_REDIS "
          "and TOLLGATE_REDIS_URL_FILE); give one");
    }
    absl::StatusOr<std::string> from_file =
        ReadSecretFile("--redis-url-file", options.redis_url_file);
    if (!from_file.ok()) return from_file.status();
    url = *std::move(from_file);
  }
  if (options.redis_password_file.empty()) return url;
  if (url.empty()) {
    return absl::InvalidArgumentError(
        "--redis-password-file needs the Redis to use it with: --redis or --redis-url-file");
  }
  absl::StatusOr<std::string> password =
      ReadSecretFile("--redis-password-file", options.redis_password_file);
  if (!password.ok()) return password.status();
  return WithRedisPassword(url, *password);
}

}  // namespace tollgate::cli
