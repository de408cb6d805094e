// Records: how both StateStores turn jobs and nodes into the text they keep, and back.
//
// A record is the api::ToJson of the value, dumped as compact JSON (invalid UTF-8 is
// replaced, never thrown). A job is checked on the way in: one that api::JobFromJson would
// reject (e.g. an empty command or user) is refused with kInvalidArgument, so a store never
// holds a job that would stop the head from loading its state after a restart. Decoding a
// stored record that fails is kInternal and names the job or node. Internal to src/store;
// free functions on plain values, callable from any thread.
#pragma once

#include <string>
#include <string_view>

#include "api/types.h"
#include "common/error.h"
#include "common/json.h"

namespace cohort::store {

// ToJson(job), after checking that it decodes back. kInvalidArgument names the job and
// the field that would not load.
Result<json> JobRecord(const api::Job& job);

// The text stored for a record.
std::string DumpRecord(const json& record);

// The job stored under `id`; kInternal naming the job if `body` does not decode or holds
// a different id.
Result<api::Job> DecodeJobRecord(api::JobId id, std::string_view body);

// The node stored under `name`; kInternal naming the node if `body` does not decode or
// holds a different name.
Result<api::Node> DecodeNodeRecord(std::string_view name, std::string_view body);

}  // namespace cohort::store
