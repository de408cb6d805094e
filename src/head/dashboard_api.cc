// GET /v1/dashboard: everything the web dashboard and `cohort top` draw, in one reply.
//
//   ?recent=N  finished jobs to include, newest first (0..1000, default 20)
//   ?queue=N   pending jobs to include, in queue order (0..100000, default 500)
//   ?points=N  most points per loss curve (2..2000, default 40)
//
// Nodes and jobs are rendered by the same functions as GET /v1/nodes and /v1/jobs, so a
// field added there (GPU telemetry and health, usage) appears here too; a job here lacks
// only what a list does not show and GET /v1/jobs/{id} has: its per-task placement
// ("allocation.nodes[].tasks"), "exits" and "history". Each running and recent job
// carries its latest progress point ("progress") and a downsampled loss curve ("loss":
// {"rank", "total", "points": [[step, loss], ...]}, losses to 5 significant digits).
// "summary" counts what the lists may truncate. An unknown query parameter is a 400
// naming the ones accepted.
//
// Building the reply for 1,000 nodes x 8 GPUs takes longer than a page poll should wait,
// so replies are served from snapshots: the first request for a query builds one; while a
// query keeps being asked for (within kActiveFor) a background thread rebuilds it every
// kRefresh, and requests get the newest finished snapshot ("time_ms" says when it was
// taken; at most about kRefresh + one build old). Nodes change state at heartbeat pace
// (1 s), so this shows the same cluster a fresh build would.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "head/routes.h"
#include "head/usage.h"

namespace cohort::head {
namespace {

struct DashboardQuery {
  size_t recent = 20;
  size_t queue = 500;
  size_t points = 40;
};

Result<DashboardQuery> ParseQuery(const httplib::Request& req) {
  for (const auto& [name, value] : req.params) {
    if (name != "recent" && name != "queue" && name != "points") {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("unknown query parameter '{}' (accepted: recent, queue, points)", name), name);
    }
  }
  DashboardQuery q;
  q.recent = static_cast<size_t>(COHORT_TRY(QueryIntParam(req, "recent", 20, 0, 1000)));
  q.queue = static_cast<size_t>(COHORT_TRY(QueryIntParam(req, "queue", 500, 0, 100'000)));
  q.points = static_cast<size_t>(COHORT_TRY(QueryIntParam(req, "points", 40, 2, 2000)));
  return q;
}

using UsageByJob = std::map<api::JobId, std::vector<TaskUsage>>;

// A job as GET /v1/jobs renders it (with its usage), less what only its detail needs.
json JobJson(const api::Job& job, int64_t now_ms, const UsageByJob& usage) {
  json j = api::ToJson(job);
  auto u = usage.find(job.id);
  AddJobUsageJson(j, job, now_ms, u != usage.end() ? &u->second : nullptr);
  j.erase("exits");
  j.erase("history");
  if (j.contains("allocation") && j["allocation"].contains("nodes")) {
    for (auto& na : j["allocation"]["nodes"]) {
      na.erase("tasks");
      na.erase("version");
    }
  }
  return j;
}

// `v` to 5 significant digits, which print short ("2.3457", not "2.345678901234567").
double Round5(double v) {
  if (v == 0 || !std::isfinite(v)) return v;
  double scale = std::pow(10.0, 4 - static_cast<int>(std::floor(std::log10(std::fabs(v)))));
  return std::round(v * scale) / scale;
}

// ... with its latest progress and loss curve.
json JobWithProgress(Cluster& cluster, const api::Job& job, int64_t now_ms, const UsageByJob& usage,
                     size_t points) {
  json j = JobJson(job, now_ms, usage);
  auto& progress = cluster.progress();
  if (auto p = progress.Latest(job.id)) j["progress"] = ToJson(*p);
  LossSeries s = progress.Loss(job.id, points);
  if (!s.points.empty()) {
    json pts = json::array();
    for (const auto& p : s.points) pts.push_back(json::array({p.step, Round5(p.loss)}));
    j["loss"] = json{{"rank", s.rank}, {"total", s.total}, {"points", std::move(pts)}};
  }
  return j;
}

json BuildDashboard(Cluster& cluster, const DashboardQuery& q) {
  const int64_t now = NowUnixMs();
  const UsageByJob usage = cluster.RunningTaskUsage();
  json summary = {{"nodes", 0}, {"nodes_up", 0}, {"gpus", 0}, {"gpus_allocated", 0}, {"unhealthy_gpus", 0}};
  json nodes = json::array();
  for (const auto& s : cluster.ListNodes()) {
    json n = ToJson(s);
    summary["nodes"] = summary["nodes"].get<int64_t>() + 1;
    if (s.display_state == "UP") summary["nodes_up"] = summary["nodes_up"].get<int64_t>() + 1;
    summary["gpus"] = summary["gpus"].get<int64_t>() + static_cast<int64_t>(s.node.gpus.size());
    summary["gpus_allocated"] = summary["gpus_allocated"].get<int64_t>() + s.gpus_allocated;
    int64_t unhealthy = 0;
    if (n.contains("gpus") && n["gpus"].is_array()) {
      for (const auto& g : n["gpus"]) unhealthy += g.is_object() && g.value("healthy", true) == false;
    }
    summary["unhealthy_gpus"] = summary["unhealthy_gpus"].get<int64_t>() + unhealthy;
    nodes.push_back(std::move(n));
  }

  // The queue in the order the scheduler considers it: priority, then submission.
  auto pending = cluster.ListJobs(JobFilter{{api::JobState::kPending}, "", 0});
  std::stable_sort(pending.begin(), pending.end(), [](const api::Job& a, const api::Job& b) {
    return a.spec.priority > b.spec.priority;
  });
  json queue = json::array();
  for (size_t i = 0; i < pending.size() && i < q.queue; ++i) queue.push_back(JobJson(pending[i], now, usage));

  auto running_jobs = cluster.ListJobs(JobFilter{{api::JobState::kRunning}, "", 0});
  json running = json::array();
  for (const auto& j : running_jobs) running.push_back(JobWithProgress(cluster, j, now, usage, q.points));

  json recent = json::array();
  if (q.recent > 0) {
    JobFilter f{{api::JobState::kSucceeded, api::JobState::kFailed, api::JobState::kCancelled}, "", q.recent};
    auto done = cluster.ListJobs(f);
    for (auto it = done.rbegin(); it != done.rend(); ++it) recent.push_back(JobWithProgress(cluster, *it, now, usage, q.points));
  }

  summary["pending"] = pending.size();
  summary["running"] = running_jobs.size();
  return json{{"time_ms", now},
              {"summary", std::move(summary)},
              {"nodes", std::move(nodes)},
              {"queue", std::move(queue)},
              {"running", std::move(running)},
              {"recent", std::move(recent)}};
}

constexpr auto kRefresh = std::chrono::milliseconds(500);
constexpr int64_t kActiveForMs = 10'000;  // keep refreshing a query asked for this recently
constexpr int64_t kForgetAfterMs = 60'000;

// Serialized dashboards per query, kept fresh while they are being asked for. Get() is
// called from HTTP threads; one refresher thread rebuilds. The destructor stops the
// thread; it must run before `cluster` goes (the server, which owns this through its
// handler, is destroyed before the cluster).
class DashboardSnapshots {
 public:
  explicit DashboardSnapshots(Cluster& cluster) : cluster_(cluster) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~DashboardSnapshots() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  std::shared_ptr<const std::string> Get(const DashboardQuery& q) {
    const std::string key = Key(q);
    {
      std::lock_guard lock(mu_);
      auto it = entries_.find(key);
      if (it != entries_.end() && it->second.body) {
        it->second.last_request_ms = NowUnixMs();
        return it->second.body;
      }
    }
    auto body = Build(q);  // the first request for this query waits for one build
    std::lock_guard lock(mu_);
    Entry& e = entries_[key];
    e.query = q;
    e.last_request_ms = NowUnixMs();
    if (!e.body) e.body = body;
    return e.body;
  }

 private:
  struct Entry {
    DashboardQuery query;
    std::shared_ptr<const std::string> body;
    int64_t last_request_ms = 0;
  };

  static std::string Key(const DashboardQuery& q) {
    return fmt::format("{}/{}/{}", q.recent, q.queue, q.points);
  }

  std::shared_ptr<const std::string> Build(const DashboardQuery& q) {
    return std::make_shared<const std::string>(
        BuildDashboard(cluster_, q).dump(-1, ' ', false, json::error_handler_t::replace));
  }

  void Loop() {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, kRefresh, [&] { return stop_; })) {
      const int64_t now = NowUnixMs();
      std::vector<std::pair<std::string, DashboardQuery>> active;
      for (auto it = entries_.begin(); it != entries_.end();) {
        if (now - it->second.last_request_ms > kForgetAfterMs) {
          it = entries_.erase(it);
          continue;
        }
        if (now - it->second.last_request_ms <= kActiveForMs) active.emplace_back(it->first, it->second.query);
        ++it;
      }
      lock.unlock();
      for (const auto& [key, q] : active) {
        auto body = Build(q);
        std::lock_guard relock(mu_);
        if (auto it = entries_.find(key); it != entries_.end()) it->second.body = std::move(body);
      }
      lock.lock();
    }
  }

  Cluster& cluster_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Entry> entries_;  // guarded by mu_
  bool stop_ = false;                     // guarded by mu_
  std::thread thread_;
};

}  // namespace

void RegisterDashboardRoutes(httplib::Server& server, Cluster& cluster) {
  auto snapshots = std::make_shared<DashboardSnapshots>(cluster);
  server.Get("/v1/dashboard", [snapshots](const httplib::Request& req, httplib::Response& res) {
    auto q = ParseQuery(req);
    if (!q) return SendError(res, q.error());
    res.set_header("Cache-Control", "no-store");
    auto body = snapshots->Get(*q);
    res.set_content(*body, "application/json");
  });
}

}  // namespace cohort::head
