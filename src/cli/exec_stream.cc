#include "cli/exec_stream.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

#include "api/routes.h"

namespace cohort::cli {
namespace {

constexpr int kOutputWaitMs = 2'000;

std::string HeaderOf(const HttpResponse& r, std::string_view name) {
  for (const auto& [k, v] : r.headers) {
    if (k.size() == name.size() && std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
        })) {
      return v;
    }
  }
  return {};
}

}  // namespace

bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

Result<void> SendExecInput(const HttpClient& head, const ExecSession& s, const api::ExecInput& in) {
  COHORT_TRY(head.Post(api::routes::WithQuery(api::routes::JobExecInput(s.job, s.id), s.Query()), api::ToJson(in)));
  return {};
}

Result<int> PumpExecOutput(const HttpClient& head, const ExecSession& s,
                           const std::function<void(const api::ExecFrame&)>& on_frame) {
  int64_t offset = 0;
  while (true) {
    auto query = s.Query();
    query.insert(query.end(), {{"offset", std::to_string(offset)}, {"wait_ms", std::to_string(kOutputWaitMs)}});
    auto r = COHORT_TRY(head.GetRaw(api::routes::WithQuery(api::routes::JobExecOutput(s.job, s.id), query)));
    if (r.status != 200) return std::unexpected(ErrorFromResponse(r.status, r.body));
    auto frames = COHORT_TRY(api::DecodeExecFrames(r.body));
    for (const auto& fr : frames) on_frame(fr);
    offset = COHORT_TRY(ParseIntParam(HeaderOf(r, "X-Cohort-Next-Offset"), "X-Cohort-Next-Offset", 0, INT64_MAX));
    if (HeaderOf(r, "X-Cohort-Done") == "1") {
      auto code = ParseIntParam(HeaderOf(r, "X-Cohort-Exit-Code"), "X-Cohort-Exit-Code", 0, 255);
      return code ? static_cast<int>(*code) : 1;
    }
  }
}

}  // namespace cohort::cli
