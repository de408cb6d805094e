// PostWithBodyCap/PutWithBodyCap (common/http.h) on httplib's own server on loopback:
// bodies up to the cap reach the handler, chunked or not; past it the reply is 413 naming
// the cap, sent once the cap is passed (before any byte for a declared length), with
// "Connection: close" since the rest went unread.
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "common/http.h"
#include "raw_http.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;
using testing::ChunkedPost;
using testing::RawUpload;
using testing::ReplyErrorMessage;

constexpr size_t kCap = 64 << 10;

// httplib::Server on a loopback port with POST /echo and PUT /echo behind a 64 KiB cap,
// each answering with the size of the body it was given.
class EchoServer {
 public:
  EchoServer() {
    auto size = [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(std::to_string(req.body.size()), "text/plain");
    };
    PostWithBodyCap(server_, "/echo", size, kCap);
    PutWithBodyCap(server_, "/echo", size, kCap);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~EchoServer() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  httplib::Client Client() const { return httplib::Client("127.0.0.1", port_); }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

// A chunked body of `bytes`, in 4 KiB chunks.
httplib::Result PostChunked(httplib::Client& cli, size_t bytes) {
  size_t sent = 0;
  return cli.Post("/echo", [&, bytes](size_t, httplib::DataSink& sink) {
    if (sent >= bytes) {
      sink.done();
      return true;
    }
    std::string piece(std::min<size_t>(4096, bytes - sent), 'b');
    sent += piece.size();
    return sink.write(piece.data(), piece.size());
  }, "application/json");
}

TEST(BodyCap, PlainAndChunkedBodiesUpToTheCapReachTheHandler) {
  EchoServer s;
  auto cli = s.Client();
  auto plain = cli.Post("/echo", std::string(kCap, 'a'), "application/json");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 200);
  EXPECT_EQ(plain->body, std::to_string(kCap));
  auto put = cli.Put("/echo", std::string(100, 'a'), "application/octet-stream");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->body, "100");
  auto chunked = PostChunked(cli, kCap);
  ASSERT_TRUE(chunked);
  EXPECT_EQ(chunked->status, 200);
  EXPECT_EQ(chunked->body, std::to_string(kCap));
  auto empty = cli.Post("/echo", "", "application/json");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->body, "0");
}

TEST(BodyCap, OverTheCapIs413NamingTheCap) {
  EchoServer s;
  auto plain = s.Client().Post("/echo", std::string(kCap + 1, 'a'), "application/json");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 413);
  EXPECT_THAT(plain->body, HasSubstr("request body is too large (at most 64 KiB)"));
  EXPECT_EQ(plain->get_header_value("Connection"), "close");

  // Chunked: answered once the cap is passed, not after the whole body. httplib's own
  // server keeps the connection open (HttpServer closes it), so do not wait for a close.
  auto chunked = RawUpload(s.port(), ChunkedPost("/echo"), 16 << 20, /*chunked=*/true, /*wait_for_close=*/false);
  EXPECT_EQ(chunked.status, 413) << chunked.text.substr(0, 300);
  EXPECT_EQ(ReplyErrorMessage(chunked.text), "request body is too large (at most 64 KiB)");
  EXPECT_THAT(chunked.text, HasSubstr("Connection: close"));
  EXPECT_LT(chunked.sent, 16 << 20);

  // A declared length past the cap: answered before any body is sent.
  auto declared = RawUpload(s.port(), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 314572800\r\n\r\n", 0,
                            /*chunked=*/false, /*wait_for_close=*/false);
  EXPECT_EQ(declared.status, 413) << declared.text.substr(0, 300);
}

TEST(BodyCap, MultipartAndUnreadableBodiesAreRefused) {
  EchoServer s;
  auto cli = s.Client();
  auto multipart = cli.Post("/echo", httplib::MultipartFormDataItems{{"f", "x", "a.txt", "text/plain"}});
  ASSERT_TRUE(multipart);
  EXPECT_EQ(multipart->status, 415);
  EXPECT_THAT(multipart->body, HasSubstr("not multipart/form-data"));
  // A chunk whose size line is not hexadecimal.
  auto bad = RawUpload(s.port(), ChunkedPost("/echo") + "zz\r\nabc\r\n", 0, /*chunked=*/false, false);
  EXPECT_EQ(bad.status, 400) << bad.text.substr(0, 300);
  EXPECT_THAT(ReplyErrorMessage(bad.text), HasSubstr("request body could not be read whole"));
}

}  // namespace
}  // namespace cohort
