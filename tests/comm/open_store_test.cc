// OpenStore: the scheme picks the backend; malformed URLs are kInvalidArgument.
#include <gtest/gtest.h>

#include "comm/store.h"
#include "store_test_util.h"

namespace cohort::comm::testing {
namespace {

TEST(OpenStore, RejectsMalformedUrls) {
  TempDir dir;
  for (std::string url : {"", "localhost:29500", "/abs/path", "tcp://host", "tcp://:29500", "tcp://host:0",
                          "tcp://host:99999", "tcp://host:12/path", "file://relative/dir", "file://", "http://",
                          "foo://bar"}) {
    auto s = OpenStore(url, /*is_server=*/false, Millis(100));
    ASSERT_FALSE(s.has_value()) << url;
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument) << url << ": " << s.error().ToString();
  }
  EXPECT_EQ(OpenStore("foo://bar", false, Millis(100)).error().message,
            "unknown store URL scheme 'foo://' (use http://, https://, tcp:// or file://)");
  EXPECT_EQ(OpenStore("localhost:29500", false, Millis(100)).error().message,
            "store URL 'localhost:29500' has no scheme (use http://, https://, tcp:// or file://)");
}

TEST(OpenStore, OpensEachScheme) {
  TempDir dir;
  auto file = OpenStore("file://" + dir.path() + "/kv", false, Millis(1000));
  ASSERT_TRUE(file.has_value()) << file.error().ToString();
  ASSERT_TRUE((*file)->Set("k", "v").has_value());
  auto file2 = OpenStore("file://" + dir.path() + "/kv", false, Millis(1000));
  ASSERT_TRUE(file2.has_value());
  EXPECT_EQ((*file2)->Get("k", Millis(1000)).value_or("<error>"), "v");

  auto tcp_server = OpenStore("tcp://127.0.0.1:0", /*is_server=*/true, Millis(5000));
  ASSERT_TRUE(tcp_server.has_value()) << tcp_server.error().ToString();
  ASSERT_TRUE((*tcp_server)->Set("k", "v").has_value());

  FakeRendezvousServer fake;
  auto http = OpenStore(fake.BaseUrl(), false, Millis(5000));
  ASSERT_TRUE(http.has_value()) << http.error().ToString();
  ASSERT_TRUE((*http)->Set("k", "v").has_value());
  EXPECT_EQ((*http)->Get("k", Millis(1000)).value_or("<error>"), "v");
}

TEST(OpenStore, TcpClientAndServerMeet) {
  ReservedPort reserved;
  int port = reserved.port();
  reserved.Release();
  auto server = OpenStore(fmt::format("tcp://localhost:{}", port), /*is_server=*/true, Millis(5000));
  ASSERT_TRUE(server.has_value()) << server.error().ToString();
  auto client = OpenStore(fmt::format("tcp://127.0.0.1:{}", port), /*is_server=*/false, Millis(5000));
  ASSERT_TRUE(client.has_value()) << client.error().ToString();
  ASSERT_TRUE((*client)->Set("from", "client").has_value());
  EXPECT_EQ((*server)->Get("from", Millis(1000)).value_or("<error>"), "client");
}

}  // namespace
}  // namespace cohort::comm::testing
