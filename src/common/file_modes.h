// Private files and directories: state that only this process's user may read (the head's
// state directory and database, the agent's work directory, task logs). Each function
// creates what is missing with the private mode and also fixes the mode of what already
// exists, so a directory made by an older version that left it world-readable is closed on
// the next start. Thread-safe (they act on paths only).
#pragma once

#include <string>

#include "common/error.h"

namespace cohort {

// Creates `path` and any missing parents; `path` itself gets mode 0700, also when it
// existed. Refuses (kInvalidArgument) a directory with the sticky bit, such as /tmp: it is
// shared, and closing it would break its other users. kInternal for a failed system call.
Result<void> MakePrivateDir(const std::string& path);

// Creates `path` if it is missing, mode 0600, and sets 0600 if it exists; never follows a
// symbolic link. kInternal naming the path when it cannot.
Result<void> MakePrivateFile(const std::string& path);

// Sets mode 0600 on `path` if it exists (never through a symbolic link); nothing if not.
Result<void> RestrictFileIfPresent(const std::string& path);

// Replaces `path` with `text`, mode 0600 from the first byte: written to a temporary file
// beside it, synced, then renamed over it, so a reader sees the old file or the new one.
// kUnavailable naming the path when it cannot.
Result<void> WritePrivateFileAtomically(const std::string& path, const std::string& text);

}  // namespace cohort
