// GET /v1/dashboard: everything the web dashboard and `cohort top` draw, in one reply.
//
//   ?recent=N  finished jobs to include, newest first (0..1000, default 20)
//   ?queue=N   pending jobs to include, in queue order (0..100000, default 500)
//   ?points=N  most points per loss curve (2..2000, default 40)
//
// The reply is the api::Dashboard view (api/dashboard.h): nodes and jobs are the same
// NodeStatus and JobStatus views as GET /v1/nodes and /v1/jobs, so a field added there
// (GPU telemetry and health, usage) appears here too; a job here lacks only what
// GET /v1/jobs/{id} adds ("exits", "history", per-task placement). Each running and
// recent job carries its latest progress point and a downsampled loss curve (losses to 5
// significant digits). "summary" counts what the lists may truncate. An unknown query
// parameter is a 400 naming the ones accepted.
//
// Building the reply for 1,000 nodes x 8 GPUs takes longer than a page poll should wait,
// so replies are served from snapshots: the first request for a query builds one; while a
// query keeps being asked for (within kActiveFor) a background thread rebuilds it every
// kRefresh, and requests get the newest finished snapshot ("time_ms" says when it was
// taken; at most about kRefresh + one build old). Nodes change state at heartbeat pace
// (1 s), so this shows the same cluster a fresh build would. The snapshots
// (DashboardSnapshots, routes.h) belong to the head server, which stops their thread
// before the cluster goes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_map>

#include "api/dashboard.h"
#include "head/progress.h"
#include "head/routes.h"
#include "head/usage.h"

namespace cohort::head {
namespace {

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

// A job with its accounting, as GET /v1/jobs lists it to a caller who does not own it:
// the values of its environment (where secrets go; `submit --export=ALL` sends the
// submitter's whole environment) are hidden, the names kept, and so is a batch script. One snapshot serves every
// caller, so nobody gets them here, its owner and admins included (GET /v1/jobs/{id} has
// them for those).
api::DashboardJob QueuedJob(const api::Job& job, int64_t now_ms, const UsageByJob& usage) {
  auto u = usage.find(job.id);
  api::DashboardJob d{JobStatusAt(job, now_ms, u != usage.end() ? &u->second : nullptr), std::nullopt, std::nullopt};
  for (auto& [name, value] : d.status.job.spec.env) value = kHiddenEnvValue;
  if (!d.status.job.spec.script.empty()) d.status.job.spec.script = kHiddenScript;
  return d;
}

// `v` to 5 significant digits, which print short ("2.3457", not "2.345678901234567").
double Round5(double v) {
  if (v == 0 || !std::isfinite(v)) return v;
  double scale = std::pow(10.0, 4 - static_cast<int>(std::floor(std::log10(std::fabs(v)))));
  return std::round(v * scale) / scale;
}

api::ProgressPoint ToView(const ProgressPoint& p) {
  return api::ProgressPoint{p.time_ms,     p.attempt,         p.rank,         p.step,
                            p.loss,        p.samples_per_s,   p.tokens_per_s, p.checkpoint_step,
                            p.total_steps, p.val_loss};
}

// ... with its latest progress and loss curve.
api::DashboardJob JobWithProgress(Cluster& cluster, const api::Job& job, int64_t now_ms, const UsageByJob& usage,
                                  size_t points) {
  api::DashboardJob d = QueuedJob(job, now_ms, usage);
  auto& progress = cluster.progress();
  if (auto p = progress.Latest(job.id)) d.progress = ToView(*p);
  if (job.state == api::JobState::kRunning) d.status.progress_eta = progress.Eta(job.id, job.attempt);
  LossSeries s = progress.Loss(job.id, points);
  if (!s.points.empty()) {
    api::LossCurve c{s.rank, static_cast<int64_t>(s.total), {}};
    for (const auto& p : s.points) c.points.push_back({p.step, Round5(p.loss)});
    d.loss = std::move(c);
  }
  return d;
}

api::Dashboard BuildDashboard(Cluster& cluster, const DashboardQuery& q) {
  api::Dashboard d;
  const int64_t now = NowUnixMs();
  d.time_ms = now;
  Cluster::Overview o = cluster.GetOverview(q.recent);
  const UsageByJob& usage = o.usage;
  api::DashboardSummary& sum = d.summary;
  d.nodes = std::move(o.nodes);
  for (const auto& s : d.nodes) {
    sum.nodes += 1;
    if (s.display_state == "UP") sum.nodes_up += 1;
    sum.gpus += static_cast<int64_t>(s.node.gpus.size());
    sum.gpus_allocated += s.gpus_allocated;
    sum.unhealthy_gpus += std::count_if(s.node.gpus.begin(), s.node.gpus.end(), [](const api::Gpu& g) { return !g.healthy; });
  }

  // The queue in the order the last scheduling pass considered it (priority, fair share,
  // quotas: `cohort queue --priority`'s order); jobs it passed over (held, waiting for a
  // dependency or an attempt to stop) or that came since, after them by priority.
  auto& pending = o.pending;
  std::unordered_map<api::JobId, size_t> rank;
  for (size_t i = 0; i < o.queue_order.size(); ++i) rank.emplace(o.queue_order[i], i);
  const auto rank_of = [&](const api::Job& j) {
    auto it = rank.find(j.id);
    return it == rank.end() ? o.queue_order.size() : it->second;
  };
  std::stable_sort(pending.begin(), pending.end(), [&](const api::Job& a, const api::Job& b) {
    const size_t ra = rank_of(a), rb = rank_of(b);
    if (ra != rb) return ra < rb;
    return a.spec.priority > b.spec.priority;
  });
  for (size_t i = 0; i < pending.size() && i < q.queue; ++i) d.queue.push_back(QueuedJob(pending[i], now, usage));

  const auto& running_jobs = o.running;
  for (const auto& j : running_jobs) d.running.push_back(JobWithProgress(cluster, j, now, usage, q.points));
  for (auto it = o.recent.rbegin(); it != o.recent.rend(); ++it) {
    d.recent.push_back(JobWithProgress(cluster, *it, now, usage, q.points));
  }

  sum.pending = static_cast<int64_t>(pending.size());
  sum.running = static_cast<int64_t>(running_jobs.size());
  return d;
}

constexpr auto kRefresh = std::chrono::milliseconds(500);
constexpr int64_t kActiveForMs = 10'000;  // keep refreshing a query asked for this recently
constexpr int64_t kForgetAfterMs = 60'000;

std::string Key(const DashboardQuery& q) { return fmt::format("{}/{}/{}", q.recent, q.queue, q.points); }

}  // namespace

DashboardSnapshots::DashboardSnapshots(Cluster& cluster) : cluster_(cluster) {
  thread_ = std::thread([this] { Loop(); });
}

DashboardSnapshots::~DashboardSnapshots() { Stop(); }

void DashboardSnapshots::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<const std::string> DashboardSnapshots::Get(const DashboardQuery& q) {
  const std::string key = Key(q);
  {
    MutexLock lock(mu_);
    if (stop_) {
      lock.Unlock();
      return Build(q);  // nobody refreshes a cached one any more
    }
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.body) {
      it->second.last_request_ms = NowUnixMs();
      return it->second.body;
    }
  }
  auto body = Build(q);  // the first request for this query waits for one build
  MutexLock lock(mu_);
  Entry& e = entries_[key];
  e.query = q;
  e.last_request_ms = NowUnixMs();
  if (!e.body) e.body = body;
  return e.body;
}

std::shared_ptr<const std::string> DashboardSnapshots::Build(const DashboardQuery& q) {
  return std::make_shared<const std::string>(
      api::ToJson(BuildDashboard(cluster_, q)).dump(-1, ' ', false, json::error_handler_t::replace));
}

void DashboardSnapshots::Loop() {
  MutexLock lock(mu_);
  while (!cv_.WaitFor(mu_, kRefresh, [&] {
    mu_.AssertHeld();
    return stop_;
  })) {
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
    lock.Unlock();
    for (const auto& [key, q] : active) {
      auto body = Build(q);
      MutexLock relock(mu_);
      if (auto it = entries_.find(key); it != entries_.end()) it->second.body = std::move(body);
    }
    lock.Lock();
  }
}

void RegisterDashboardRoutes(Router& router, DashboardSnapshots& snapshots) {
  router.Get(api::routes::kDashboard, Access::kViewer, [&snapshots](const httplib::Request& req, httplib::Response& res) {
    auto q = ParseQuery(req);
    if (!q) return SendError(res, q.error());
    res.set_header("Cache-Control", "no-store");
    auto body = snapshots.Get(*q);
    res.set_content(*body, "application/json");
  });
}

}  // namespace cohort::head
