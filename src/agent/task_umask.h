// The file-mode creation mask of a job's processes (api::JobSpec::umask): the head puts it
// in the task's environment as COHORT_UMASK (octal, "0027"), and the task shim (the task
// and the output files' copier) and exec sessions set it in their children before exec,
// never in themselves. Header-only: the lean task shim links it.
#pragma once

#include <string_view>

namespace cohort::agent {

// COHORT_UMASK's value as a mask, or -1 (absent, or not 1-4 octal digits up to 0777: the
// process keeps its own).
inline int TaskUmaskFrom(const char* value) {
  if (value == nullptr) return -1;
  std::string_view v(value);
  if (v.empty() || v.size() > 4) return -1;
  int mask = 0;
  for (char c : v) {
    if (c < '0' || c > '7') return -1;
    mask = mask * 8 + (c - '0');
  }
  return mask <= 0777 ? mask : -1;
}

}  // namespace cohort::agent
