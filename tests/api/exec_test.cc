// Exec sessions' wire types (api/exec.h) and the base64 they carry input in.
#include <gtest/gtest.h>

#include "api/exec.h"
#include "common/base64.h"

namespace cohort::api {
namespace {

TEST(Base64Test, RoundTripsEveryByteAndLength) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n <= all.size(); n += (n < 8 ? 1 : 37)) {
    const std::string bytes = all.substr(0, n);
    auto back = Base64Decode(Base64Encode(bytes), "data");
    ASSERT_TRUE(back.has_value()) << n;
    EXPECT_EQ(*back, bytes) << n;
  }
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");  // RFC 4648's vectors
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
}

TEST(Base64Test, MalformedTextIsRefusedNamingTheField) {
  for (const char* bad : {"Zm8", "Zm9v!mFy", "Zg=a", "Z===", "Zg==Zg=="}) {
    auto r = Base64Decode(bad, "data");
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_NE(r.error().message.find("data:"), std::string::npos) << r.error().message;
  }
}

TEST(ExecRequestTest, RoundTripsAndChecksEachField) {
  ExecRequest req;
  req.command = {"sh", "-c", "echo hi"};
  req.tty = true;
  req.stdin_open = true;
  req.rows = 40;
  req.cols = 120;
  req.term = "xterm-256color";
  auto back = ExecRequestFromJson(ToJson(req), UnknownFields::kRefuse);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(back->command, req.command);
  EXPECT_TRUE(back->tty && back->stdin_open);
  EXPECT_EQ(back->rows, 40);
  EXPECT_EQ(back->cols, 120);
  EXPECT_EQ(back->term, "xterm-256color");

  const std::vector<std::pair<json, std::string>> bad = {
      {json{{"command", json::array()}}, "command: must name a program"},
      {json{{"command", {""}}}, "command: must name a program"},
      {json::object(), "command"},
      {json{{"command", {"ls"}}, {"rows", 0}}, "rows"},
      {json{{"command", {"ls"}}, {"cols", 10'001}}, "cols"},
      {json{{"command", {"ls"}}, {"term", "xterm; rm -rf"}}, "term"},
      {json{{"command", {"ls"}}, {"user", "root"}}, "user"},
      {json{{"command", {"ls", std::string("a\0b", 3)}}}, "command[1]: contains a NUL byte"},
  };
  for (const auto& [j, want] : bad) {
    auto r = ExecRequestFromJson(j, UnknownFields::kRefuse);
    ASSERT_FALSE(r.has_value()) << j.dump();
    EXPECT_NE(r.error().message.find(want), std::string::npos) << r.error().message;
  }
}

TEST(ExecInputTest, CarriesBytesEofSizeAndClose) {
  ExecInput in;
  in.data = std::string("\x03\x00\xff", 3);
  in.eof = true;
  in.rows = 24;
  in.cols = 80;
  in.close = true;
  auto back = ExecInputFromJson(ToJson(in), UnknownFields::kRefuse);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(back->data, in.data);
  EXPECT_TRUE(back->eof && back->close);
  EXPECT_EQ(back->rows, 24);
  EXPECT_EQ(back->cols, 80);
  auto half = ExecInputFromJson(json{{"rows", 3}}, UnknownFields::kRefuse);
  ASSERT_FALSE(half.has_value());
  EXPECT_NE(half.error().message.find("give both or neither"), std::string::npos);
  EXPECT_FALSE(ExecInputFromJson(json{{"data", "not base64!"}}, UnknownFields::kRefuse).has_value());
}

// The agent reads what the head relays leniently (a newer head's field is dropped), the
// head what the CLI sends strictly; a known field is checked and named either way.
TEST(ExecRequestTest, TheAgentIgnoresANewerHeadsFieldsAndStillChecksKnownOnes) {
  const json newer = {{"command", {"ls"}}, {"rows", 30}, {"cols", 90}, {"tty", true}, {"cgroup_weight", 50}};
  auto agent = ExecRequestFromJson(newer, UnknownFields::kIgnore);
  ASSERT_TRUE(agent.has_value()) << agent.error().message;
  EXPECT_EQ(agent->command, std::vector<std::string>{"ls"});
  EXPECT_EQ(agent->rows, 30);
  EXPECT_TRUE(agent->tty);
  auto head = ExecRequestFromJson(newer, UnknownFields::kRefuse);
  ASSERT_FALSE(head.has_value());
  EXPECT_NE(head.error().message.find("cgroup_weight"), std::string::npos) << head.error().message;

  json wrong = newer;
  wrong["rows"] = "thirty";
  auto r = ExecRequestFromJson(wrong, UnknownFields::kIgnore);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().field, "rows");
  auto missing = ExecRequestFromJson(json{{"tty", true}, {"cgroup_weight", 50}}, UnknownFields::kIgnore);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().field, "command");

  auto in = ExecInputFromJson(json{{"eof", true}, {"signal", "INT"}}, UnknownFields::kIgnore);
  ASSERT_TRUE(in.has_value()) << in.error().message;
  EXPECT_TRUE(in->eof);
  EXPECT_FALSE(ExecInputFromJson(json{{"eof", true}, {"signal", "INT"}}, UnknownFields::kRefuse).has_value());
  auto bad_in = ExecInputFromJson(json{{"eof", "yes"}, {"signal", "INT"}}, UnknownFields::kIgnore);
  ASSERT_FALSE(bad_in.has_value());
  EXPECT_EQ(bad_in.error().field, "eof");
}

TEST(ExecFrameTest, FramesRoundTripAndATruncatedOneIsMalformed) {
  const std::string stream = EncodeExecFrame('o', "hello\n") + EncodeExecFrame('e', std::string("\0x\n", 3)) +
                             EncodeExecFrame('o', "");
  auto frames = DecodeExecFrames(stream);
  ASSERT_TRUE(frames.has_value()) << frames.error().message;
  ASSERT_EQ(frames->size(), 3u);
  EXPECT_EQ((*frames)[0].stream, 'o');
  EXPECT_EQ((*frames)[0].data, "hello\n");
  EXPECT_EQ((*frames)[1].stream, 'e');
  EXPECT_EQ((*frames)[1].data, std::string("\0x\n", 3));
  EXPECT_EQ((*frames)[2].data, "");
  for (const std::string& bad : {stream.substr(0, stream.size() - 6), std::string("x 1\na"), std::string("o -1\n"),
                                 std::string("o 5"), std::string("o 99999999999999999999999\n")}) {
    EXPECT_FALSE(DecodeExecFrames(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace cohort::api
