#include "store/records.h"

#include <exception>

namespace cohort::store {

Result<json> JobRecord(const api::Job& job) {
  json record = api::ToJson(job);
  if (auto back = api::JobFromJson(record); !back) {
    std::string which = job.id > 0 ? fmt::format("job {}", job.id) : std::string("the new job");
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{} cannot be stored: it would not load back: {}", which,
                                 back.error().message),
                     back.error().field);
  }
  return record;
}

std::string DumpRecord(const json& record) {
  return record.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

Result<api::Job> DecodeJobRecord(api::JobId id, std::string_view body) {
  try {
    auto j = ParseJson(body, "record");
    if (!j) return Errorf(ErrorCode::kInternal, "stored job {} is corrupt: {}", id, j.error().message);
    auto job = api::JobFromJson(*j);
    if (!job) return Errorf(ErrorCode::kInternal, "stored job {} does not decode: {}", id, job.error().message);
    if (job->id != id) {
      return Errorf(ErrorCode::kInternal, "stored job {} is corrupt: its record has id {}", id, job->id);
    }
    return job;
  } catch (const std::exception& e) {
    return Errorf(ErrorCode::kInternal, "stored job {} does not decode: {}", id, e.what());
  }
}

Result<api::Node> DecodeNodeRecord(std::string_view name, std::string_view body) {
  try {
    auto j = ParseJson(body, "record");
    if (!j) return Errorf(ErrorCode::kInternal, "stored node '{}' is corrupt: {}", name, j.error().message);
    auto node = api::NodeFromJson(*j);
    if (!node) {
      return Errorf(ErrorCode::kInternal, "stored node '{}' does not decode: {}", name, node.error().message);
    }
    if (node->name != name) {
      return Errorf(ErrorCode::kInternal, "stored node '{}' is corrupt: its record names '{}'", name, node->name);
    }
    return node;
  } catch (const std::exception& e) {
    return Errorf(ErrorCode::kInternal, "stored node '{}' does not decode: {}", name, e.what());
  }
}

}  // namespace cohort::store
