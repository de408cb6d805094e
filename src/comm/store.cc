// OpenStore: picks the Store backend from the URL's scheme.
#include "comm/store.h"

#include "comm/file_store.h"
#include "comm/http_store.h"
#include "comm/store_util.h"
#include "comm/tcp_store.h"

namespace cohort::comm {
namespace {

constexpr std::string_view kSchemes = "(use http://, https://, tcp:// or file://)";

Result<std::unique_ptr<Store>> OpenTcp(const std::string& url, bool is_server, Millis timeout) {
  std::string_view rest = std::string_view(url).substr(6);  // after "tcp://"
  while (rest.ends_with('/')) rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos) {
    return Errorf(ErrorCode::kInvalidArgument, "store URL '{}' must be tcp://host:port with no path", url);
  }
  HostPort hp = COHORT_TRY(ParseHostPort(rest, url, /*allow_zero_port=*/is_server));
  TcpStoreOptions options;
  options.timeout = timeout;
  if (is_server) return COHORT_TRY(TcpStore::Listen(hp.port, std::move(options)));
  return COHORT_TRY(TcpStore::Connect(hp.host, hp.port, std::move(options)));
}

}  // namespace

Result<std::unique_ptr<Store>> OpenStore(const std::string& url, bool is_server, Millis timeout) {
  if (url.starts_with("http://") || url.starts_with("https://")) return COHORT_TRY(HttpStore::Open(url, timeout));
  if (url.starts_with("tcp://")) return OpenTcp(url, is_server, timeout);
  if (url.starts_with("file://")) {
    std::string path = url.substr(7);
    if (!path.starts_with('/')) {
      return Errorf(ErrorCode::kInvalidArgument,
                    "store URL '{}' must name an absolute directory: file:///abs/path (three slashes)", url);
    }
    return COHORT_TRY(FileStore::Open(path));
  }
  size_t sep = url.find("://");
  if (sep == std::string::npos || sep == 0) {
    return Errorf(ErrorCode::kInvalidArgument, "store URL '{}' has no scheme {}", url, kSchemes);
  }
  return Errorf(ErrorCode::kInvalidArgument, "unknown store URL scheme '{}://' {}", url.substr(0, sep), kSchemes);
}

}  // namespace cohort::comm
