#include "agent/image_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/clock.h"
#include "common/log.h"
#include "agent/runtime_call.h"

namespace cohort::agent {

namespace {

constexpr Millis kRuntimeTimeout{60'000};

// Docker's sizes: "4.26MB", "1.2GB", "512kB", "87B" (decimal units).
int64_t DockerSize(const std::string& text) {
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    return 0;
  }
  const std::string unit = text.substr(used);
  double scale = 1;
  if (unit == "kB" || unit == "KB") scale = 1e3;
  if (unit == "MB") scale = 1e6;
  if (unit == "GB") scale = 1e9;
  if (unit == "TB") scale = 1e12;
  return static_cast<int64_t>(std::llround(v * scale));
}

// "busybox" → "busybox:latest"; a digest or a tag stays.
std::string WithTag(const std::string& ref) {
  const size_t slash = ref.rfind('/');
  const size_t colon = ref.rfind(':');
  if (ref.find('@') != std::string::npos || (colon != std::string::npos && (slash == std::string::npos || colon > slash))) {
    return ref;
  }
  return ref + ":latest";
}

}  // namespace

json ToJson(const NodeImage& i) {
  return json{{"runtime", i.runtime},       {"id", i.id},
              {"names", i.names},           {"size_bytes", i.size_bytes},
              {"created_ms", i.created_ms}, {"last_used_ms", i.last_used_ms},
              {"running_tasks", i.running_tasks}};
}

std::vector<std::string> ImageListArgv(std::string_view runtime, const std::string& command) {
  if (runtime == "docker") return {command, "images", "--no-trunc", "--format", "{{json .}}"};
  return {command, "images", "--format", "json"};
}

std::vector<std::string> ImageRemoveArgv(const std::string& command, const std::string& id) {
  return {command, "rmi", id};
}

Result<std::vector<NodeImage>> ParseImageList(std::string_view runtime, std::string_view text) {
  std::vector<NodeImage> out;
  auto bad = [&](std::string_view what) {
    return Errorf(ErrorCode::kInternal, "`{} images` gave {}", runtime, what);
  };
  if (runtime == "docker") {
    std::istringstream lines{std::string(text)};
    for (std::string line; std::getline(lines, line);) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      json j = json::parse(line, nullptr, false);
      if (!j.is_object()) return bad("a line that is not a JSON object");
      NodeImage i;
      i.runtime = "docker";
      i.id = j.value("ID", "");
      const std::string repo = j.value("Repository", ""), tag = j.value("Tag", "");
      if (!repo.empty() && repo != "<none>") i.names.push_back(tag.empty() || tag == "<none>" ? repo : repo + ":" + tag);
      i.size_bytes = DockerSize(j.value("Size", ""));
      if (i.id.empty()) return bad("an image without an ID");
      // One line per tag: tags of one image merge.
      auto same = std::find_if(out.begin(), out.end(), [&](const NodeImage& o) { return o.id == i.id; });
      if (same != out.end()) {
        same->names.insert(same->names.end(), i.names.begin(), i.names.end());
      } else {
        out.push_back(std::move(i));
      }
    }
    return out;
  }
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return out;  // no images (old Podman)
  json j = json::parse(text, nullptr, false);
  if (!j.is_array()) return bad("output that is not a JSON array");
  for (const auto& e : j) {
    if (!e.is_object()) return bad("an entry that is not an object");
    NodeImage i;
    i.runtime = std::string(runtime);
    i.id = e.value("Id", "");
    if (i.id.empty()) return bad("an image without an Id");
    if (e.contains("Names") && e["Names"].is_array()) {
      for (const auto& n : e["Names"]) {
        if (n.is_string()) i.names.push_back(n.get<std::string>());
      }
    }
    if (e.contains("Size") && e["Size"].is_number()) i.size_bytes = e["Size"].get<int64_t>();
    if (e.contains("Created") && e["Created"].is_number()) i.created_ms = e["Created"].get<int64_t>() * 1000;
    out.push_back(std::move(i));
  }
  return out;
}

bool ImageMatches(const NodeImage& image, const std::string& ref) {
  if (ref.empty()) return false;
  if (ref == image.id || (ref.size() >= 12 && image.id.starts_with(ref)) ||
      (ref.starts_with("sha256:") && image.id == ref.substr(7))) {
    return true;
  }
  const std::string want = WithTag(ref);
  for (const auto& n : image.names) {
    const std::string name = WithTag(n);
    if (name == want || name == "localhost/" + want || name == "docker.io/library/" + want ||
        name == "docker.io/" + want) {
      return true;
    }
  }
  return false;
}

ImageCache::ImageCache(std::map<std::string, std::string> runtimes, std::string scratch_dir, RuntimeCalls* calls)
    : runtimes_(std::move(runtimes)), scratch_dir_(std::move(scratch_dir)), calls_(calls), started_ms_(NowUnixMs()) {}

void ImageCache::NoteStarted(const std::string& runtime, const std::string& image, int64_t now_ms) {
  MutexLock lock(mu_);
  int64_t& t = last_used_[{runtime, image}];
  t = std::max(t, now_ms);
}

Result<std::string> ImageCache::RunCapture(const std::vector<std::string>& argv) const {
  return RunRuntimeCommand(argv, scratch_dir_, kRuntimeTimeout, calls_);
}

Result<std::vector<NodeImage>> ImageCache::List(const std::vector<std::pair<std::string, std::string>>& running) {
  std::vector<NodeImage> out;
  std::vector<std::string> missing;  // runtimes not installed here: skipped unless all are
  for (const auto& [kind, command] : runtimes_) {
    auto text = RunCapture(ImageListArgv(kind, command));
    if (!text && text.error().code == ErrorCode::kNotFound) {
      missing.push_back(text.error().message);
      continue;
    }
    if (!text) return std::unexpected(text.error());
    auto images = ParseImageList(kind, *text);
    if (!images) return std::unexpected(images.error());
    out.insert(out.end(), images->begin(), images->end());
  }
  if (!missing.empty() && missing.size() == runtimes_.size()) {
    return Errorf(ErrorCode::kFailedPrecondition, "no container runtime runs on this node: {}", fmt::join(missing, "; "));
  }
  MutexLock lock(mu_);
  for (NodeImage& i : out) {
    for (const auto& [key, ms] : last_used_) {
      if (key.first == i.runtime && ImageMatches(i, key.second)) i.last_used_ms = std::max(i.last_used_ms, ms);
    }
    for (const auto& [runtime, ref] : running) {
      if (runtime == i.runtime && ImageMatches(i, ref)) i.running_tasks += 1;
    }
  }
  return out;
}

Result<std::vector<NodeImage>> ImageCache::Remove(const std::string& ref,
                                                  const std::vector<std::pair<std::string, std::string>>& running) {
  std::vector<NodeImage> matched;
  for (NodeImage& i : COHORT_TRY(List(running))) {
    if (ImageMatches(i, ref)) matched.push_back(std::move(i));
  }
  if (matched.empty()) return Errorf(ErrorCode::kNotFound, "no image '{}' on this node", ref);
  for (const NodeImage& i : matched) {
    if (i.running_tasks > 0) {
      return Errorf(ErrorCode::kFailedPrecondition, "image '{}' is in use by {} running task(s) on this node", ref,
                    i.running_tasks);
    }
  }
  for (const NodeImage& i : matched) COHORT_TRY(RunCapture(ImageRemoveArgv(runtimes_.at(i.runtime), i.id)));
  return matched;
}

Result<std::vector<NodeImage>> ImageCache::Prune(int64_t unused_for_ms, int64_t now_ms,
                                                 const std::vector<std::pair<std::string, std::string>>& running) {
  std::vector<NodeImage> removed;
  for (NodeImage& i : COHORT_TRY(List(running))) {
    if (i.running_tasks > 0) continue;
    const int64_t since = std::max({i.last_used_ms, i.created_ms, started_ms_});
    if (now_ms - since < unused_for_ms) continue;
    if (auto r = RunCapture(ImageRemoveArgv(runtimes_.at(i.runtime), i.id)); !r) {
      LOG_WARN("image cache: cannot remove unused image {} ({}): {}", i.id.substr(0, 12), fmt::join(i.names, ","),
               r.error().message);
      continue;
    }
    removed.push_back(std::move(i));
  }
  return removed;
}

}  // namespace cohort::agent
