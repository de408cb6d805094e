// `cohort top [--interval S] [--once] [--width N]`: a live terminal view of the cluster —
// nodes, their GPUs (utilization, memory, temperature, health), running jobs with their
// progress, the queue with its reasons, and the latest finished jobs — from one
// GET /v1/dashboard per refresh.
//
// Live mode draws on the terminal's alternate screen: each frame moves the cursor home and
// rewrites the lines in place (no flicker), cut to the terminal's width and height, and
// redraws at once when the window is resized. q, Q, Esc or Ctrl-C quits; SIGINT and
// SIGTERM quit too; the terminal is restored either way. --once prints one frame without
// escape codes and exits (for scripts and tests); --json --once prints the reply itself.
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "cli/client.h"
#include "cli/table.h"
#include "common/clock.h"

namespace cohort::cli {
namespace {

constexpr const char* kDash = "-";
constexpr const char* kDashboardQuery = "/v1/dashboard?recent=8&queue=200&points=2";

// ---- reading the reply (fields may be absent or null: show "-") ----

std::string Str(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return kDash;
  const auto& s = j[key].get_ref<const std::string&>();
  return s.empty() ? kDash : s;
}

std::optional<double> Num(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

int64_t Int(const json& j, const char* key, int64_t def = 0) {
  auto v = Num(j, key);
  return v ? static_cast<int64_t>(*v) : def;
}

std::string Percent(std::optional<double> ratio) {
  return ratio ? fmt::format("{:.0f}%", std::clamp(*ratio, 0.0, 1.0) * 100) : kDash;
}

std::string Gib(std::optional<double> bytes) {
  if (!bytes) return kDash;
  double g = *bytes / 1073741824.0;
  return g >= 100 ? fmt::format("{:.0f}", g) : fmt::format("{:.1f}", g);
}

std::string Compact(std::optional<double> v, int digits = 4) {
  if (!v) return kDash;
  double a = std::fabs(*v);
  if (a >= 1e9) return fmt::format("{:.2f}G", *v / 1e9);
  if (a >= 1e6) return fmt::format("{:.2f}M", *v / 1e6);
  if (a >= 1e4) return fmt::format("{:.1f}k", *v / 1e3);
  if (*v == std::floor(*v) && a < 1e4) return fmt::format("{:.0f}", *v);
  return fmt::format("{:.{}g}", *v, digits);
}

std::string Duration(std::optional<int64_t> ms) { return ms && *ms >= 0 ? FormatDuration(*ms) : kDash; }

const json& Telemetry(const json& gpu) {
  static const json kNull;
  if (gpu.is_object() && gpu.contains("telemetry") && gpu["telemetry"].is_object()) return gpu["telemetry"];
  return kNull;
}

std::string Health(const json& gpu) {
  if (!gpu.is_object() || !gpu.contains("healthy") || !gpu["healthy"].is_boolean()) return kDash;
  if (gpu["healthy"].get<bool>()) return "ok";
  std::string why = Str(gpu, "health_reason");
  return why == kDash ? "UNHEALTHY" : "UNHEALTHY: " + why;
}

// node name -> GPU index -> job id, from the running jobs' allocations.
std::map<std::string, std::map<int, int64_t>> GpuOwners(const json& running) {
  std::map<std::string, std::map<int, int64_t>> owners;
  for (const auto& j : running) {
    if (!j.contains("allocation") || !j["allocation"].contains("nodes")) continue;
    for (const auto& na : j["allocation"]["nodes"]) {
      for (const auto& g : na.value("gpus", json::array())) owners[na.value("node", "")][g.get<int>()] = Int(j, "id");
    }
  }
  return owners;
}

const json& Array(const json& d, const char* key) {
  static const json kEmpty = json::array();
  return d.is_object() && d.contains(key) && d[key].is_array() ? d[key] : kEmpty;
}

std::string JobName(const json& j) { return j.contains("spec") ? Str(j["spec"], "name") : kDash; }
std::string JobUser(const json& j) { return j.contains("spec") ? Str(j["spec"], "user") : kDash; }
int64_t JobGpus(const json& j) {
  return j.contains("spec") ? Int(j["spec"], "nodes") * Int(j["spec"], "gpus_per_node") : 0;
}

std::string Hosts(const json& j) {
  std::vector<std::string> names;
  if (j.contains("allocation") && j["allocation"].contains("nodes")) {
    for (const auto& na : j["allocation"]["nodes"]) names.push_back(na.value("node", "?"));
  }
  return FormatHostList(names);
}

// Renders a table whose column `flex` takes what the terminal's width leaves over.
std::string FitTable(Table& t, const std::vector<size_t>& widths, size_t flex, size_t width) {
  size_t used = 0;
  for (size_t i = 0; i < widths.size(); ++i) {
    if (i != flex) used += widths[i] + 2;
  }
  t.SetMaxWidth(flex, width > used + 12 ? width - used : 12);
  return t.Render();
}

}  // namespace

std::string RenderTop(const json& d, const TopOptions& o) {
  const int64_t now = d.is_object() && d.contains("time_ms") ? Int(d, "time_ms") : o.now_ms;
  const size_t width = std::max<size_t>(o.width, 40);
  std::string out;
  const json& s = d.is_object() && d.contains("summary") ? d["summary"] : json::object();
  out += fmt::format("cohort top - {} - {}\n", o.head_url, FormatTimestamp(now));
  std::string summary = fmt::format("nodes {}/{} up   GPUs {}/{} allocated   running {}   pending {}",
                                    Int(s, "nodes_up"), Int(s, "nodes"), Int(s, "gpus_allocated"), Int(s, "gpus"),
                                    Int(s, "running"), Int(s, "pending"));
  if (Int(s, "unhealthy_gpus") > 0) summary += fmt::format("   unhealthy GPUs {}", Int(s, "unhealthy_gpus"));
  out += summary + "\n";
  if (!o.status.empty()) out += o.status + "\n";

  const json& nodes = Array(d, "nodes");
  const json& running = Array(d, "running");
  auto owners = GpuOwners(running);
  const bool wide = width >= 110;

  // Nodes, one row each, with their GPUs summed up.
  out += fmt::format("\nNODES ({})\n", nodes.size());
  {
    Table t({"NAME", "STATE", "GPUS", "CPUS", "UTIL", "MEM GiB", "TEMP", "HEALTH", "HEARTBEAT", "JOBS"});
    for (const auto& n : nodes) {
      const json& gpus = Array(n, "gpus");
      double util = 0, mem_used = 0, mem_total = 0, temp = -1;
      int util_n = 0, mem_n = 0;
      for (const auto& g : gpus) {
        const json& tel = Telemetry(g);
        if (auto u = Num(tel, "utilization")) util += *u, ++util_n;
        if (auto m = Num(tel, "memory_used_bytes")) {
          mem_used += *m;
          ++mem_n;
          mem_total += Num(tel, "memory_total_bytes").value_or(Num(g, "memory_bytes").value_or(0));
        }
        if (auto c = Num(tel, "temperature_celsius")) temp = std::max(temp, *c);
      }
      int64_t unhealthy = 0;
      bool health_known = false;
      for (const auto& g : gpus) {
        if (g.contains("healthy") && g["healthy"].is_boolean()) {
          health_known = true;
          unhealthy += !g["healthy"].get<bool>();
        }
      }
      std::vector<std::string> jobs;
      for (const auto& id : Array(n, "jobs")) jobs.push_back(id.dump());
      int64_t hb = Int(n, "heartbeat_age_ms", -1);
      t.AddRow({Str(n, "name"), Str(n, "display_state"), fmt::format("{}/{}", Int(n, "gpus_allocated"), gpus.size()),
                fmt::format("{}/{}", Int(n, "cpus_allocated"), Int(n, "cpus")),
                util_n ? Percent(util / util_n) : kDash,
                mem_n ? fmt::format("{}/{}", Gib(mem_used), Gib(mem_total)) : kDash,
                temp >= 0 ? fmt::format("{:.0f}C", temp) : kDash,
                !health_known ? kDash : unhealthy ? fmt::format("{} bad", unhealthy) : "ok",
                hb < 0 ? "never" : FormatDuration(hb) + " ago", Join(jobs, ",")});
    }
    out += FitTable(t, {16, 8, 5, 7, 4, 11, 4, 6, 10, 10}, 9, width);
  }

  // GPUs, one row each.
  size_t gpu_count = 0;
  for (const auto& n : nodes) gpu_count += Array(n, "gpus").size();
  out += fmt::format("\nGPUS ({})\n", gpu_count);
  {
    std::vector<std::string> header = {"NODE", "GPU", "JOB", "UTIL", "MEM GiB", "TEMP", "POWER"};
    if (wide) header.push_back("SM MHz");
    header.push_back("HEALTH");
    Table t(header);
    for (const auto& n : nodes) {
      std::string name = Str(n, "name");
      for (const auto& g : Array(n, "gpus")) {
        const json& tel = Telemetry(g);
        int index = static_cast<int>(Int(g, "index"));
        auto owner = owners[name].find(index);
        auto mem_total = Num(tel, "memory_total_bytes");
        if (!mem_total) mem_total = Num(g, "memory_bytes");
        auto power = Num(tel, "power_watts");
        auto temp = Num(tel, "temperature_celsius");
        auto clock = Num(tel, "sm_clock_hz");
        std::vector<std::string> row = {
            name, std::to_string(index), owner == owners[name].end() ? kDash : std::to_string(owner->second),
            Percent(Num(tel, "utilization")), fmt::format("{}/{}", Gib(Num(tel, "memory_used_bytes")), Gib(mem_total)),
            temp ? fmt::format("{:.0f}C", *temp) : kDash, power ? fmt::format("{:.0f}W", *power) : kDash};
        if (wide) row.push_back(clock ? fmt::format("{:.0f}", *clock / 1e6) : kDash);
        row.push_back(Health(g));
        t.AddRow(std::move(row));
      }
    }
    std::vector<size_t> w = {16, 3, 6, 4, 11, 4, 5};
    if (wide) w.push_back(6);
    w.push_back(20);
    out += FitTable(t, w, w.size() - 1, width);
  }

  out += fmt::format("\nRUNNING ({})\n", running.size());
  {
    Table t({"ID", "NAME", "USER", "GPUS", "TIME", "STEP", "LOSS", "TOK/S", "NODES"});
    for (const auto& j : running) {
      const json& p = j.contains("progress") ? j["progress"] : json::object();
      t.AddRow({std::to_string(Int(j, "id")), JobName(j), JobUser(j), std::to_string(JobGpus(j)),
                Duration(now - Int(j, "start_ms")), Compact(Num(p, "step")), Compact(Num(p, "loss")),
                Compact(Num(p, "tokens_per_s")), Hosts(j)});
    }
    if (t.rows() == 0) out += "  (none)\n";
    else out += FitTable(t, {6, 20, 10, 4, 8, 7, 7, 7, 20}, 8, width);
  }

  const json& queue = Array(d, "queue");
  int64_t pending = Int(s, "pending", static_cast<int64_t>(queue.size()));
  out += pending > static_cast<int64_t>(queue.size()) ? fmt::format("\nQUEUE ({} of {})\n", queue.size(), pending)
                                                      : fmt::format("\nQUEUE ({})\n", pending);
  {
    Table t({"ID", "NAME", "USER", "PRIO", "GPUS", "WAIT", "REASON"});
    for (const auto& j : queue) {
      t.AddRow({std::to_string(Int(j, "id")), JobName(j), JobUser(j),
                j.contains("spec") ? std::to_string(Int(j["spec"], "priority")) : kDash, std::to_string(JobGpus(j)),
                Duration(now - Int(j, "submit_ms")), Str(j, "reason")});
    }
    if (t.rows() == 0) out += "  (empty)\n";
    else out += FitTable(t, {6, 20, 10, 4, 4, 8, 30}, 6, width);
  }

  const json& recent = Array(d, "recent");
  if (!recent.empty()) {
    out += "\nRECENT\n";
    Table t({"ID", "NAME", "USER", "STATE", "ENDED", "REASON"});
    for (const auto& j : recent) {
      int64_t end = Int(j, "end_ms");
      t.AddRow({std::to_string(Int(j, "id")), JobName(j), JobUser(j), Str(j, "state"),
                end > 0 ? FormatDuration(now - end) + " ago" : kDash, Str(j, "reason")});
    }
    out += FitTable(t, {6, 20, 10, 9, 10, 30}, 5, width);
  }

  // Every line cut to the width (the tables already fit; the header lines may not).
  std::string fitted;
  size_t start = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    fitted += Truncate(std::string_view(out).substr(start, end - start), width);
    fitted += '\n';
    start = end + 1;
  }
  return fitted;
}

namespace {

volatile std::sig_atomic_t g_quit = 0;
volatile std::sig_atomic_t g_resized = 0;

void OnQuit(int) { g_quit = 1; }
void OnResize(int) { g_resized = 1; }

// Raw keyboard input and the alternate screen while alive; restores both on destruction.
class TerminalSession {
 public:
  TerminalSession() {
    struct sigaction sa {};
    sa.sa_handler = OnQuit;  // no SA_RESTART: poll() returns EINTR and the loop sees the flag
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
    sa.sa_handler = OnResize;
    sigaction(SIGWINCH, &sa, &old_winch_);
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      raw.c_lflag &= ~(ICANON | ECHO | ISIG);  // keys one by one; Ctrl-C arrives as a byte
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      raw_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    watch_stdin_ = raw_;
    std::fputs("\x1b[?1049h\x1b[?25l", stdout);  // alternate screen, hide the cursor
    std::fflush(stdout);
  }
  ~TerminalSession() {
    std::fputs("\x1b[?25h\x1b[?1049l", stdout);
    std::fflush(stdout);
    if (raw_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGWINCH, &old_winch_, nullptr);
  }

  // Waits up to `timeout` for a key; true when it asks to quit (q, Q, Esc, Ctrl-C).
  bool WaitForQuitKey(Millis timeout) {
    auto deadline = SteadyClock::now() + timeout;
    while (!g_quit && !g_resized) {
      auto left = std::chrono::duration_cast<Millis>(deadline - SteadyClock::now()).count();
      if (left <= 0) return false;
      pollfd p{STDIN_FILENO, POLLIN, 0};
      int r = poll(&p, watch_stdin_ ? 1 : 0, static_cast<int>(left));
      if (r > 0 && (p.revents & POLLIN)) {
        char buf[64];
        ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
        if (n == 0) {
          watch_stdin_ = false;  // stdin closed: stop watching it
          continue;
        }
        for (ssize_t i = 0; i < n; ++i) {
          if (buf[i] == 'q' || buf[i] == 'Q' || buf[i] == 0x03 || (buf[i] == 0x1b && n == 1)) return true;
        }
      }
    }
    return g_quit;
  }

 private:
  termios saved_{};
  bool raw_ = false;          // the terminal's settings are changed (restore them)
  bool watch_stdin_ = false;  // keys are read from stdin
  struct sigaction old_int_ {}, old_term_ {}, old_winch_ {};
};

void TerminalSize(size_t& width, size_t& height) {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    width = ws.ws_col;
    height = ws.ws_row;
    return;
  }
  if (const char* c = std::getenv("COLUMNS")) width = std::max(40, std::atoi(c));
  if (const char* l = std::getenv("LINES")) height = std::max(10, std::atoi(l));
}

struct TopFlags {
  double interval_s = 2;
  bool once = false;
  int width = 0;  // 0: the terminal's
};

int Run(const TopFlags& f, const GlobalOptions& global) {
  if (!(f.interval_s >= 0.1 && f.interval_s <= 3600)) {
    return ReportError(MakeError(ErrorCode::kInvalidArgument, "--interval: must be from 0.1 to 3600 seconds").error());
  }
  HttpClient head = HeadClient(global);
  TopOptions o;
  o.head_url = head.base_url();
  if (f.once) {
    auto d = head.Get(kDashboardQuery);
    if (!d) return ReportError(d.error());
    if (global.json) {
      PrintJson(*d);
      return 0;
    }
    size_t width = 120, height = 0;
    TerminalSize(width, height);
    o.width = f.width > 0 ? static_cast<size_t>(f.width) : width;
    o.now_ms = NowUnixMs();
    std::fputs(RenderTop(*d, o).c_str(), stdout);
    return 0;
  }
  if (global.json) return ReportError(MakeError(ErrorCode::kInvalidArgument, "--json needs --once").error());

  g_quit = 0;
  TerminalSession term;
  json last;
  std::string more;
  auto next_fetch = SteadyClock::now();
  while (!g_quit) {
    if (SteadyClock::now() >= next_fetch) {
      auto d = head.Get(kDashboardQuery);
      if (d) {
        last = std::move(*d);
        o.status.clear();
      } else {
        o.status = "cannot refresh: " + d.error().message + " (showing the last data; retrying)";
      }
      next_fetch = SteadyClock::now() + Millis(static_cast<int64_t>(f.interval_s * 1000));
    }
    g_resized = 0;
    size_t width = 80, height = 24;
    TerminalSize(width, height);
    o.width = f.width > 0 ? static_cast<size_t>(f.width) : width;
    o.now_ms = NowUnixMs();
    std::string frame = RenderTop(last, o);
    // Cut to the screen's height, keeping a last line that says what was cut.
    std::vector<std::string_view> lines;
    for (size_t start = 0; start < frame.size();) {
      size_t end = frame.find('\n', start);
      lines.push_back(std::string_view(frame).substr(start, end - start));
      start = end + 1;
    }
    if (height >= 2 && lines.size() > height - 1) {
      size_t cut = lines.size() - (height - 2);
      lines.resize(height - 2);
      more = fmt::format("... {} more lines (widen or heighten the terminal, or use --once)", cut);
      lines.push_back(more);
    }
    std::string screen = "\x1b[H";
    for (auto l : lines) {
      screen += l;
      screen += "\x1b[K\r\n";  // clear what the previous frame left on the line
    }
    screen += "q: quit\x1b[K\x1b[J";
    std::fwrite(screen.data(), 1, screen.size(), stdout);
    std::fflush(stdout);
    auto wait = std::chrono::duration_cast<Millis>(next_fetch - SteadyClock::now());
    if (term.WaitForQuitKey(std::max(wait, Millis(0)))) break;
  }
  return 0;
}

}  // namespace

void AddTopCommand(CommandContext& ctx) {
  auto f = std::make_shared<TopFlags>();
  auto* sub = ctx.app.add_subcommand("top", "Live view of nodes, GPUs and jobs (q quits)");
  sub->add_option("--interval", f->interval_s, "Seconds between refreshes (default 2)");
  sub->add_flag("--once", f->once, "Print one frame without escape codes and exit");
  sub->add_option("--width", f->width, "Columns to fit (default: the terminal's)")->check(CLI::Range(40, 1000));
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [f, &global] { return Run(*f, global); });
}

}  // namespace cohort::cli
