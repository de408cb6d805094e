#include <signal.h>

#include <fstream>
#include <limits>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/http.h"
#include "common/json.h"
#include "common/subprocess.h"

namespace cohort {
namespace {

TEST(Json, ParseErrorsSayWhere) {
  auto r = ParseJson("{\"a\": ", "spec");
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("spec is not valid JSON"), std::string::npos) << r.error().message;
}

TEST(Json, NumbersBeyondADoubleNameTheirField) {
  for (const char* number : {"1e400", "-1e400", "1" "000000000000000000000000000000000000000e380"}) {
    std::string body = std::string("{\"tasks\": [{}, {}, {\"rss_bytes\": ") + number + "}]}";
    auto r = ParseJson(body);
    ASSERT_FALSE(r.has_value()) << body;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().field, "tasks[2].rss_bytes") << r.error().message;
    EXPECT_NE(r.error().message.find("tasks[2].rss_bytes: number out of range: "), std::string::npos)
        << r.error().message;
  }
  auto top = ParseJson("1e400", "request body");
  ASSERT_FALSE(top.has_value());
  EXPECT_EQ(top.error().message, "request body: number out of range: 1e400");
  // Tiny numbers round to zero; they are not out of range.
  EXPECT_TRUE(ParseJson("{\"x\": 1e-400}").has_value());
}

TEST(Json, NestingIsBounded) {
  auto nested = [](size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_TRUE(ParseJson(nested(kMaxJsonDepth)).has_value());
  auto deep = ParseJson("{\"nodes\": " + nested(kMaxJsonDepth) + "}");
  ASSERT_FALSE(deep.has_value());
  EXPECT_EQ(deep.error().message, "request body: arrays and objects nested more than 64 levels deep");
  // Far deeper than any stack could walk: still a plain error, not a crash.
  EXPECT_FALSE(ParseJson(nested(2'000'000)).has_value());
}

// A key given twice is refused when asked (a person's document), naming it and where;
// nlohmann alone keeps the last value, so a JSON spec with "nodes" twice ran with whichever
// came last (YAML refused it).
TEST(Json, AKeyGivenTwiceIsRefusedWhenAsked) {
  const std::string twice = R"({"nodes": 2, "name": "a", "nodes": 3})";
  auto top = ParseJsonText(twice, /*refuse_duplicate_keys=*/true);
  ASSERT_FALSE(top.has_value());
  EXPECT_EQ(top.error().field, "");
  EXPECT_EQ(top.error().message, "the key 'nodes' is given twice");
  auto nested = ParseJsonText(R"({"spec": {"tasks": [{"env": {"A": "1", "B": "2", "A": "3"}}]}})", true);
  ASSERT_FALSE(nested.has_value());
  EXPECT_EQ(nested.error().field, "spec.tasks[0].env");
  EXPECT_EQ(nested.error().message, "the key 'A' is given twice");
  // The same key in different objects, and many keys, are fine.
  EXPECT_TRUE(ParseJsonText(R"({"a": {"x": 1}, "b": {"x": 2}, "x": [{"x": 1}, {"x": 2}]})", true).has_value());
  json many;
  for (int i = 0; i < 5000; ++i) many[std::to_string(i)] = i;
  EXPECT_TRUE(ParseJsonText(many.dump(), true).has_value());
  // Elsewhere (a program's output, a request) the last value wins, as in JavaScript.
  auto last = ParseJson(twice);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ((*last)["nodes"], 3);
}

TEST(Json, ValueTextShowsNonFiniteNumbersAndCutsLongValues) {
  EXPECT_EQ(JsonValueText(json(std::numeric_limits<double>::infinity())), "inf");
  EXPECT_EQ(JsonValueText(json(-std::numeric_limits<double>::infinity())), "-inf");
  EXPECT_EQ(JsonValueText(json(std::string(500, 'x')), 10), "\"xxxxxxxxx...");
  json j = {{"n", std::numeric_limits<double>::infinity()}};
  auto r = ObjectReader::Open(j);
  auto n = r->Int("n", std::nullopt, 0, 10);
  ASSERT_FALSE(n.has_value());
  EXPECT_EQ(n.error().message, "n: must be an integer, got number inf");
}

TEST(Json, ReaderChecksTypesRangesAndUnknownFields) {
  json j = {{"n", 5}, {"s", "x"}, {"extra", 1}};
  auto r = ObjectReader::Open(j, "spec");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r->Int("n", std::nullopt, 0, 10), 5);
  EXPECT_FALSE(r->Int("s", std::nullopt, 0, 10).has_value());
  auto out_of_range = r->Int("n", std::nullopt, 6, 10);
  ASSERT_FALSE(out_of_range.has_value());
  EXPECT_EQ(out_of_range.error().field, "spec.n");
  EXPECT_EQ(*r->String("missing", "def"), "def");
  auto fin = r->Finish();
  ASSERT_FALSE(fin.has_value());
  EXPECT_EQ(fin.error().field, "spec.extra");
}

TEST(Json, EditDistance) {
  EXPECT_EQ(EditDistance("gpus", "gpus"), 0u);
  EXPECT_EQ(EditDistance("gpu_per_node", "gpus_per_node"), 1u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
}

TEST(Clock, Durations) {
  EXPECT_EQ(*ParseDurationMs("3s", "x"), 3000);
  EXPECT_EQ(*ParseDurationMs("3", "x"), 3000);
  EXPECT_EQ(*ParseDurationMs("250ms", "x"), 250);
  EXPECT_EQ(*ParseDurationMs("1.5s", "x"), 1500);
  EXPECT_EQ(*ParseDurationMs("2m", "x"), 120000);
  EXPECT_EQ(*ParseDurationMs("1h", "x"), 3600000);
  EXPECT_EQ(*ParseDurationMs("90d", "x"), int64_t{90} * 86'400'000);
  // One syntax everywhere: compound units and Slurm's clock forms.
  EXPECT_EQ(*ParseDurationMs("1d12h", "x"), int64_t{36} * 3'600'000);
  EXPECT_EQ(*ParseDurationMs("1h30m", "x"), 5'400'000);
  EXPECT_EQ(*ParseDurationMs("2m30s", "x"), 150'000);
  EXPECT_EQ(*ParseDurationMs("1s500ms", "x"), 1500);
  EXPECT_EQ(*ParseDurationMs("10:30", "x"), 630'000);
  EXPECT_EQ(*ParseDurationMs("01:30:00", "x"), 5'400'000);
  EXPECT_EQ(*ParseDurationMs("2-00", "x"), int64_t{2} * 86'400'000);
  EXPECT_EQ(*ParseDurationMs("1-02:03:04", "x"), (int64_t{93784}) * 1000);
  for (const char* bad : {"", "s", "3x", "-1s", "1..2s", "abc", "1w", "12000d", "30m1h", "1h1h", "1h 30m",
                          "1:60", "1-24", "1:2:3:4", "-5", "1h30", "10:"}) {
    auto r = ParseDurationMs(bad, "--timeout");
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_NE(r.error().message.find("--timeout"), std::string::npos);
  }
  EXPECT_EQ(FormatDuration(450), "450ms");
  EXPECT_EQ(FormatDuration(3200), "3.2s");
  EXPECT_EQ(FormatDuration(62000), "1m02s");
}

TEST(Http, UrlParsing) {
  auto u = ParseHttpUrl("http://10.0.0.1:8470/");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->host, "10.0.0.1");
  EXPECT_EQ(u->port, 8470);
  EXPECT_FALSE(u->tls);
  auto s = ParseHttpUrl("https://[::1]:8470");
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->tls);
  EXPECT_EQ(s->host, "::1");
  for (const char* bad : {"10.0.0.1:8470", "ftp://a:1", "https://a", "http://a", "http://a:0", "http://a:70000",
                          "http://a:1/x"}) {
    EXPECT_FALSE(ParseHttpUrl(bad).has_value()) << bad;
  }
}

TEST(Http, UnreachableIsUnavailable) {
  HttpClient c("http://127.0.0.1:1", Millis(500));
  auto r = c.Get("/v1/health");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("127.0.0.1:1"), std::string::npos);
}

TEST(Http, ErrorBodiesRoundTrip) {
  Error e{ErrorCode::kUnsatisfiable, "needs 9 GPUs", "gpus_per_node"};
  Error back = ErrorFromResponse(422, ErrorToJson(e).dump());
  EXPECT_EQ(back.code, ErrorCode::kUnsatisfiable);
  EXPECT_EQ(back.message, e.message);
  EXPECT_EQ(back.field, e.field);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kUnsatisfiable), 422);
}

TEST(Subprocess, ExitCodesSignalsAndExecFailures) {
  SpawnOptions o;
  o.argv = {"sh", "-c", "exit 3"};
  auto p = Subprocess::Spawn(o);
  ASSERT_TRUE(p.has_value());
  auto st = p->Wait();
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 3);

  o.argv = {"sleep", "30"};
  auto q = Subprocess::Spawn(o);
  ASSERT_TRUE(q.has_value());
  q->Signal(SIGKILL, /*group=*/true);
  auto qs = q->Wait();
  EXPECT_EQ(qs->signal, SIGKILL);
  EXPECT_EQ(qs->Code(), 137);
  EXPECT_EQ(qs->ToString(), "killed by SIGKILL");

  o.argv = {"/no/such/binary"};
  auto bad = Subprocess::Spawn(o);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("/no/such/binary"), std::string::npos);

  o.argv = {"no-such-program-in-path"};
  auto bad2 = Subprocess::Spawn(o);
  ASSERT_FALSE(bad2.has_value());
  EXPECT_NE(bad2.error().message.find("not found in PATH"), std::string::npos);
}

TEST(Subprocess, EnvironmentAndOutputFile) {
  char tmpl[] = "/tmp/cohort-sp-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  SpawnOptions o;
  o.argv = {"sh", "-c", "echo $FOO; pwd; echo err >&2"};
  o.env = {{"FOO", "bar"}};
  o.cwd = dir;
  o.stdout_path = dir + "/out";
  auto p = Subprocess::Spawn(o);
  ASSERT_TRUE(p.has_value());
  ASSERT_TRUE(p->Wait().has_value());
  std::ifstream in(dir + "/out");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "bar\n" + dir + "\nerr\n");
  auto st = p->WaitFor(Millis(10));
  EXPECT_FALSE(st.has_value());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace cohort
