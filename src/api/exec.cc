#include "api/exec.h"

#include <cctype>
#include <charconv>

#include "common/base64.h"

namespace cohort::api {

Result<void> ValidateExecCommand(const std::vector<std::string>& command) {
  if (command.empty() || command[0].empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "command: must name a program", "command");
  }
  if (command.size() > static_cast<size_t>(kMaxExecArgs)) {
    return Errorf(ErrorCode::kInvalidArgument, "command: at most {} arguments, got {}", kMaxExecArgs,
                  command.size());
  }
  for (size_t i = 0; i < command.size(); ++i) {
    if (command[i].size() > kMaxExecArgBytes) {
      return Errorf(ErrorCode::kInvalidArgument, "command[{}]: at most {} bytes, got {}", i, kMaxExecArgBytes,
                    command[i].size());
    }
    if (command[i].find('\0') != std::string::npos) {
      return Errorf(ErrorCode::kInvalidArgument, "command[{}]: contains a NUL byte", i);
    }
  }
  return {};
}

json ToJson(const ExecRequest& r) {
  return json{{"command", r.command}, {"tty", r.tty}, {"stdin", r.stdin_open}, {"rows", r.rows}, {"cols", r.cols}, {"term", r.term}};
}

Result<ExecRequest> ExecRequestFromJson(const json& j, UnknownFields unknown) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  ExecRequest out;
  out.command = COHORT_TRY(r.StringList("command", std::nullopt));
  COHORT_TRY_VOID(ValidateExecCommand(out.command));
  out.tty = COHORT_TRY(r.Bool("tty", false));
  out.stdin_open = COHORT_TRY(r.Bool("stdin", false));
  out.rows = static_cast<int>(COHORT_TRY(r.Int("rows", 24, 1, kMaxTerminalSide)));
  out.cols = static_cast<int>(COHORT_TRY(r.Int("cols", 80, 1, kMaxTerminalSide)));
  out.term = COHORT_TRY(r.String("term", std::string(), 64));
  for (char c : out.term) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_' && c != '+') {
      return MakeError(ErrorCode::kInvalidArgument, "term: letters, digits and -._+ only", "term");
    }
  }
  COHORT_TRY_VOID(r.Finish(unknown));
  return out;
}

json ToJson(const ExecInput& in) {
  json j = json::object();
  if (!in.data.empty()) j["data"] = Base64Encode(in.data);
  if (in.eof) j["eof"] = true;
  if (in.rows) j["rows"] = *in.rows;
  if (in.cols) j["cols"] = *in.cols;
  if (in.close) j["close"] = true;
  return j;
}

Result<ExecInput> ExecInputFromJson(const json& j, UnknownFields unknown) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  ExecInput in;
  const std::string data = COHORT_TRY(r.String("data", std::string(), (kMaxExecInputBytes + 2) / 3 * 4));
  in.data = COHORT_TRY(Base64Decode(data, "data"));
  in.eof = COHORT_TRY(r.Bool("eof", false));
  if (r.Has("rows") != r.Has("cols")) {
    return MakeError(ErrorCode::kInvalidArgument, "rows and cols: give both or neither", r.Has("rows") ? "cols" : "rows");
  }
  if (r.Has("rows")) {
    in.rows = static_cast<int>(COHORT_TRY(r.Int("rows", std::nullopt, 1, kMaxTerminalSide)));
    in.cols = static_cast<int>(COHORT_TRY(r.Int("cols", std::nullopt, 1, kMaxTerminalSide)));
  }
  in.close = COHORT_TRY(r.Bool("close", false));
  COHORT_TRY_VOID(r.Finish(unknown));
  return in;
}

std::string EncodeExecFrame(char stream, std::string_view data) {
  std::string out = fmt::format("{} {}\n", stream, data.size());
  out.append(data);
  return out;
}

Result<std::vector<ExecFrame>> DecodeExecFrames(std::string_view bytes) {
  std::vector<ExecFrame> frames;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t nl = bytes.find('\n', pos);
    const char stream = bytes[pos];
    size_t len = 0;
    const bool header_ok = nl != std::string_view::npos && nl > pos + 2 && nl - pos <= 24 &&
                           (stream == 'o' || stream == 'e') && bytes[pos + 1] == ' ' &&
                           std::from_chars(bytes.data() + pos + 2, bytes.data() + nl, len).ptr == bytes.data() + nl;
    if (!header_ok || len > bytes.size() - nl - 1) {
      return Errorf(ErrorCode::kInternal, "malformed exec output frame at byte {}", pos);
    }
    frames.push_back(ExecFrame{stream, std::string(bytes.substr(nl + 1, len))});
    pos = nl + 1 + len;
  }
  return frames;
}

}  // namespace cohort::api
