// Copyright tollgate authors.
#include "src/config/config_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tollgate::config {
namespace {

// How many of a directory's files a message names.
constexpr size_t kShownFiles = 3;

std::string DirectoryMessage(const std::string& path, absl::string_view flag) {
  std::vector<std::string> files;
  std::error_code error;
  for (std::filesystem::directory_iterator it(path, error), end; !error && it != end;
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (absl::EndsWith(name, ".yaml") || absl::EndsWith(name, ".yml")) files.push_back(name);
  }
  std::sort(files.begin(), files.end());
  const std::string directory = absl::EndsWith(path, "/") ? path.substr(0, path.size() - 1) : path;
  std::string message = absl::StrCat(path, ": is a directory, expected a config file");
  if (files.empty()) {
    absl::StrAppend(&message, " such as ", flag, directory,
                    "/limits.yaml (it holds no .yaml file)");
    return message;
  }
  std::vector<std::string> shown;
  for (size_t i = 0; i < files.size() && i < kShownFiles; ++i) {
    shown.push_back(absl::StrCat(flag, directory, "/", files[i]));
  }
  const std::string more = files.size() > kShownFiles
                               ? absl::StrCat(" (and ", files.size() - kShownFiles, " more)")
                               : "";
  if (flag.empty()) {
    absl::StrAppend(&message, ": load each of its files (", absl::StrJoin(shown, ", "), more, ")");
  } else {
    absl::StrAppend(&message, ": pass each of its files, ", absl::StrJoin(shown, " "), more,
                    ", or all at once: ", flag, directory, "/*.yaml");
  }
  return message;
}

}  // namespace

absl::StatusOr<std::string> ReadConfigFile(const std::string& path, absl::string_view flag) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    return absl::NotFoundError(DirectoryMessage(path, flag));
  }
  if (!std::filesystem::exists(path, error)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot read the file: ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::NotFoundError(absl::StrCat(path, ": cannot read the file"));
  return text.str();
}

}  // namespace tollgate::config
