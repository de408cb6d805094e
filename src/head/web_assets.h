// The dashboard's files (web/), embedded into the binary at build time.
//
// cmake/embed_files.cmake generates the definition of WebAssets() from the files in web/;
// web_api.cc serves them at the head's root URL. The table and the bytes are constants:
// any thread may read them.
#pragma once

#include <string_view>
#include <vector>

namespace cohort::head {

struct WebAsset {
  std::string_view path;          // URL path: "/index.html", "/app.js"
  std::string_view content_type;  // "text/html; charset=utf-8"
  std::string_view etag;          // strong validator, quoted: "\"3f2a...\""
  std::string_view bytes;
};

// Every embedded file, sorted by path.
const std::vector<WebAsset>& WebAssets();

// The asset served at `path` ("/" is "/index.html"), or nullptr.
const WebAsset* FindWebAsset(std::string_view path);

}  // namespace cohort::head
