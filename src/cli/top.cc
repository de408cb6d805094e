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

#include "api/gpu_request.h"
#include "cli/client.h"
#include "cli/table.h"
#include "common/clock.h"

namespace cohort::cli {
namespace {

constexpr const char* kDash = "-";

// The query `top` asks: the latest 8 finished jobs, at most 200 queued, no loss curves
// to speak of (top does not draw them).
std::string DashboardPath() {
  return api::routes::WithQuery(api::routes::kDashboard, {{"recent", "8"}, {"queue", "200"}, {"points", "2"}});
}

// ---- formatting (a value the head does not have shows as "-") ----

std::string OrDash(const std::string& s) { return s.empty() ? kDash : s; }

template <typename T>
std::optional<double> AsDouble(const std::optional<T>& v) {
  return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
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

std::string Duration(int64_t ms) { return ms >= 0 ? FormatDuration(ms) : kDash; }

std::string Health(const api::Gpu& gpu) {
  if (gpu.healthy) return "ok";
  return gpu.health_reason.empty() ? "UNHEALTHY" : "UNHEALTHY: " + gpu.health_reason;
}

const api::GpuTelemetry& Telemetry(const api::Gpu& gpu) {
  static const api::GpuTelemetry kUnknown{};
  return gpu.telemetry ? *gpu.telemetry : kUnknown;
}

// A job holding a GPU and its part of it in share units (kGpuShareUnits: the whole GPU;
// 0: a sharing job whose slices the view lacks).
struct GpuHolder {
  api::JobId job = 0;
  int units = 0;
};

// node name -> GPU index -> the jobs holding it, in job order, from the running jobs'
// allocations: a shared GPU lists every job on it with its tasks' slices added up.
std::map<std::string, std::map<int, std::vector<GpuHolder>>> GpuOwners(const std::vector<api::DashboardJob>& running) {
  std::map<std::string, std::map<int, std::vector<GpuHolder>>> owners;
  for (const auto& d : running) {
    const api::Job& j = d.status.job;
    const bool sharing = j.spec.shares_gpu();
    for (const auto& na : j.allocation.nodes) {
      auto& on_node = owners[na.node];
      auto holder = [&](int g) -> GpuHolder& {
        auto& list = on_node[g];
        for (GpuHolder& h : list) {
          if (h.job == j.id) return h;
        }
        return list.emplace_back(GpuHolder{j.id, sharing ? 0 : api::kGpuShareUnits});
      };
      for (int g : na.gpus) holder(g);
      if (!sharing) continue;
      for (const auto& t : na.tasks) {
        if (!t.gpus.empty()) holder(t.gpus.front()).units += t.gpu_share;
      }
    }
  }
  return owners;
}

// "12" for a whole GPU, "14(0.5),15(0.25)" for a shared one.
std::string HoldersText(const std::vector<GpuHolder>& holders) {
  std::vector<std::string> parts;
  for (const GpuHolder& h : holders) {
    parts.push_back(h.units == 0 || h.units >= api::kGpuShareUnits
                        ? std::to_string(h.job)
                        : fmt::format("{}({:g})", h.job, static_cast<double>(h.units) / api::kGpuShareUnits));
  }
  return parts.empty() ? kDash : Join(parts, ",");
}

std::string Hosts(const api::Job& j) {
  std::vector<std::string> names;
  for (const auto& na : j.allocation.nodes) names.push_back(na.node);
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

// ---- the frame's sections, top to bottom; each returns its lines ----

// The title (head URL, the dashboard's time) and the cluster's counts, then `status`.
std::string SummarySection(const api::Dashboard& d, int64_t now, const TopOptions& o) {
  const api::DashboardSummary& s = d.summary;
  std::string out = fmt::format("cohort top - {} - {}\n", o.head_url, FormatTimestamp(now));
  out += fmt::format("nodes {}/{} up   GPUs {}/{} allocated   running {}   pending {}", s.nodes_up, s.nodes,
                     s.gpus_allocated, s.gpus, s.running, s.pending);
  if (s.unhealthy_gpus > 0) out += fmt::format("   unhealthy GPUs {}", s.unhealthy_gpus);
  out += "\n";
  if (!o.status.empty()) out += o.status + "\n";
  return out;
}

// NODES: one row per node, its GPUs' readings summed up and its unhealthy GPUs counted.
std::string NodesSection(const api::Dashboard& d, size_t width) {
  std::string out = fmt::format("\nNODES ({})\n", d.nodes.size());
  Table t({"NAME", "STATE", "GPUS", "CPUS", "UTIL", "MEM GiB", "TEMP", "HEALTH", "HEARTBEAT", "JOBS"});
  for (const auto& n : d.nodes) {
    double util = 0, mem_used = 0, mem_total = 0, temp = -1;
    int util_n = 0, mem_n = 0;
    for (const auto& g : n.node.gpus) {
      const api::GpuTelemetry& tel = Telemetry(g);
      if (tel.utilization) util += *tel.utilization, ++util_n;
      if (tel.memory_used_bytes) {
        mem_used += static_cast<double>(*tel.memory_used_bytes);
        ++mem_n;
        mem_total += static_cast<double>(tel.memory_total_bytes.value_or(g.memory_bytes));
      }
      if (tel.temperature_celsius) temp = std::max(temp, *tel.temperature_celsius);
    }
    std::vector<std::string> jobs;
    for (auto id : n.jobs) jobs.push_back(std::to_string(id));
    t.AddRow({OrDash(n.node.name), OrDash(n.display_state), fmt::format("{}/{}", n.gpus_allocated, n.node.gpus.size()),
              fmt::format("{}/{}", n.cpus_allocated, n.node.cpus), util_n ? Percent(util / util_n) : kDash,
              mem_n ? fmt::format("{}/{}", Gib(mem_used), Gib(mem_total)) : kDash,
              temp >= 0 ? fmt::format("{:.0f}C", temp) : kDash,
              n.node.gpus.empty() ? kDash : n.unhealthy_gpus ? fmt::format("{} bad", n.unhealthy_gpus) : "ok",
              n.heartbeat_age_ms < 0 ? "never" : FormatDuration(n.heartbeat_age_ms) + " ago", Join(jobs, ",")});
  }
  return out + FitTable(t, {16, 8, 5, 7, 4, 11, 4, 6, 10, 10}, 9, width);
}

// GPUS: one row per GPU with the job on it, its readings and its health; the SM clock
// only on a wide screen.
std::string GpusSection(const api::Dashboard& d, size_t width) {
  size_t gpu_count = 0;
  for (const auto& n : d.nodes) gpu_count += n.node.gpus.size();
  std::string out = fmt::format("\nGPUS ({})\n", gpu_count);
  const bool wide = width >= 110;
  auto owners = GpuOwners(d.running);
  std::vector<std::string> header = {"NODE", "GPU", "JOB", "UTIL", "MEM GiB", "TEMP", "POWER"};
  if (wide) header.push_back("SM MHz");
  header.push_back("HEALTH");
  Table t(header);
  for (const auto& n : d.nodes) {
    const std::string name = OrDash(n.node.name);
    const auto& on_node = owners[n.node.name];
    for (const auto& g : n.node.gpus) {
      const api::GpuTelemetry& tel = Telemetry(g);
      auto owner = on_node.find(g.index);
      double mem_total = static_cast<double>(tel.memory_total_bytes.value_or(g.memory_bytes));
      std::vector<std::string> row = {
          name, std::to_string(g.index), owner == on_node.end() ? kDash : HoldersText(owner->second),
          Percent(tel.utilization), fmt::format("{}/{}", Gib(AsDouble(tel.memory_used_bytes)), Gib(mem_total)),
          tel.temperature_celsius ? fmt::format("{:.0f}C", *tel.temperature_celsius) : kDash,
          tel.power_watts ? fmt::format("{:.0f}W", *tel.power_watts) : kDash};
      if (wide) row.push_back(tel.sm_clock_hz ? fmt::format("{:.0f}", *tel.sm_clock_hz / 1e6) : kDash);
      row.push_back(Health(g));
      t.AddRow(std::move(row));
    }
  }
  std::vector<size_t> w = {16, 3, 6, 4, 11, 4, 5};
  if (wide) w.push_back(6);
  w.push_back(20);
  return out + FitTable(t, w, w.size() - 1, width);
}

// RUNNING: one row per running job with its time so far and latest progress.
std::string RunningSection(const api::Dashboard& d, int64_t now, size_t width) {
  std::string out = fmt::format("\nRUNNING ({})\n", d.running.size());
  Table t({"ID", "NAME", "USER", "GPUS", "TIME", "STEP", "LOSS", "TOK/S", "PROGRESS", "NODES"});
  for (const auto& r : d.running) {
    const api::Job& j = r.status.job;
    const std::optional<api::ProgressPoint>& p = r.progress;
    t.AddRow({std::to_string(j.id), OrDash(j.spec.name), OrDash(j.spec.user), JobGpusText(j),
              Duration(now - j.start_ms), Compact(p ? std::optional<double>(static_cast<double>(p->step)) : std::nullopt),
              Compact(p ? p->loss : std::nullopt), Compact(p ? p->tokens_per_s : std::nullopt),
              r.status.progress_eta ? api::FormatProgressEta(*r.status.progress_eta) : kDash, Hosts(j)});
  }
  if (t.rows() == 0) return out + "  (none)\n";
  return out + FitTable(t, {6, 20, 10, 4, 8, 7, 7, 7, 22, 20}, 9, width);
}

// QUEUE: the pending jobs in queue order, with how long each has waited and why; says
// when the list is cut short of the summary's count.
std::string QueueSection(const api::Dashboard& d, int64_t now, size_t width) {
  const int64_t shown = static_cast<int64_t>(d.queue.size());
  const int64_t pending = std::max(d.summary.pending, shown);
  std::string out = pending > shown ? fmt::format("\nQUEUE ({} of {})\n", shown, pending)
                                    : fmt::format("\nQUEUE ({})\n", pending);
  Table t({"ID", "NAME", "USER", "PRIO", "GPUS", "WAIT", "REASON"});
  for (const auto& q : d.queue) {
    const api::Job& j = q.status.job;
    t.AddRow({std::to_string(j.id), OrDash(j.spec.name), OrDash(j.spec.user), std::to_string(j.spec.priority),
              JobGpusText(j), Duration(now - j.submit_ms), OrDash(j.reason)});
  }
  if (t.rows() == 0) return out + "  (empty)\n";
  return out + FitTable(t, {6, 20, 10, 4, 4, 8, 30}, 6, width);
}

// RECENT: the latest finished jobs, how they ended and when; nothing when there are none.
std::string RecentSection(const api::Dashboard& d, int64_t now, size_t width) {
  if (d.recent.empty()) return "";
  std::string out = "\nRECENT\n";
  Table t({"ID", "NAME", "USER", "STATE", "ENDED", "REASON"});
  for (const auto& r : d.recent) {
    const api::Job& j = r.status.job;
    t.AddRow({std::to_string(j.id), OrDash(j.spec.name), OrDash(j.spec.user), std::string(api::JobStateName(j.state)),
              j.end_ms > 0 ? FormatDuration(now - j.end_ms) + " ago" : kDash, OrDash(j.reason)});
  }
  return out + FitTable(t, {6, 20, 10, 9, 10, 30}, 5, width);
}

// Every line of `text` cut to `width` columns (the tables already fit; the title may not).
std::string CutLines(const std::string& text, size_t width) {
  std::string fitted;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    fitted += Truncate(std::string_view(text).substr(start, end - start), width);
    fitted += '\n';
    start = end + 1;
  }
  return fitted;
}

}  // namespace

std::string RenderTop(const api::Dashboard& d, const TopOptions& o) {
  const int64_t now = d.time_ms > 0 ? d.time_ms : o.now_ms;
  const size_t width = std::max<size_t>(o.width, 40);
  return CutLines(SummarySection(d, now, o) + NodesSection(d, width) + GpusSection(d, width) +
                      RunningSection(d, now, width) + QueueSection(d, now, width) + RecentSection(d, now, width),
                  width);
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
  std::string interval = "2s";  // a duration (cohort help durations)
  bool once = false;
  int width = 0;  // 0: the terminal's
};

int Run(const TopFlags& f, const GlobalOptions& global) {
  auto interval_ms = ParseDurationMs(f.interval, "--interval");
  if (!interval_ms) return ReportError(interval_ms.error());
  if (*interval_ms < 100 || *interval_ms > 3'600'000) {
    return ReportError(
        MakeError(ErrorCode::kInvalidArgument, fmt::format("--interval: must be from 100ms to 1h, got '{}'", f.interval))
            .error());
  }
  HttpClient head = HeadClient(global);
  TopOptions o;
  o.head_url = head.base_url();
  if (f.once) {
    auto reply = head.Get(DashboardPath());
    if (!reply) return ReportError(reply.error());
    if (global.json) {
      PrintJson(*reply);
      return 0;
    }
    auto d = FromHead(api::DashboardFromJson(*reply), "dashboard");
    if (!d) return ReportError(d.error());
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
  api::Dashboard last;  // nothing fetched yet: empty tables
  std::string more;
  auto next_fetch = SteadyClock::now();
  while (!g_quit) {
    if (SteadyClock::now() >= next_fetch) {
      auto reply = head.Get(DashboardPath());
      Result<api::Dashboard> d = reply ? FromHead(api::DashboardFromJson(*reply), "dashboard")
                                       : Result<api::Dashboard>(std::unexpected(reply.error()));
      if (d) {
        last = std::move(*d);
        o.status.clear();
      } else {
        o.status = "cannot refresh: " + d.error().message + " (showing the last data; retrying)";
      }
      next_fetch = SteadyClock::now() + Millis(*interval_ms);
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
  sub->add_option("--interval", f->interval, "Time between refreshes, a duration: 2, 500ms, 5s (default 2s)");
  sub->add_flag("--once", f->once, "Print one frame without escape codes and exit");
  sub->add_option("--width", f->width, "Columns to fit (default: the terminal's)")->check(CLI::Range(40, 1000));
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [f, &global] { return Run(*f, global); });
}

}  // namespace cohort::cli
