// Helpers shared by the store tests: fully populated values (every field away from its
// default, so a field a codec drops shows up), field-by-field comparisons that do not go
// through the codecs, and a temporary directory removed at scope exit.
#pragma once

#include <string>

#include "api/types.h"

namespace cohort::store::testing {

// A job with every field set to a non-default value (exit_code set to `exit_code`).
api::Job FullJob(std::optional<int> exit_code = 3);
// A small valid job: command {"true"}.
api::Job SmallJob(std::string name = "small");
// A node with every field set; `gpus` GPUs.
api::Node FullNode(std::string name, int gpus = 4);

// gtest expectations on every field; `where` labels failures.
void ExpectJobEq(const api::Job& want, const api::Job& got, const std::string& where = "");
void ExpectNodeEq(const api::Node& want, const api::Node& got, const std::string& where = "");

// A fresh directory under $TMPDIR (or /tmp), removed with its contents by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The bytes of a file ("" if it cannot be read).
std::string ReadFileBytes(const std::string& path);
void WriteFileBytes(const std::string& path, const std::string& bytes);

}  // namespace cohort::store::testing
