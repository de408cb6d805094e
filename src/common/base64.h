// Base64 (RFC 4648, the standard alphabet with '=' padding): how bytes that are not text
// travel inside JSON (an exec session's input, api/exec.h). Pure functions; any thread.
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"

namespace cohort {

std::string Base64Encode(std::string_view bytes);
// The bytes `text` encodes; kInvalidArgument naming `field` for a character outside the
// alphabet, a length that is not a multiple of 4, or padding anywhere but at the end.
Result<std::string> Base64Decode(std::string_view text, std::string_view field);

}  // namespace cohort
