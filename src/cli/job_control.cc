// `cohort hold JOB...`, `cohort release JOB...`, `cohort update JOB [--time-limit D]
// [--priority P] [--name N] [--throttle N]` and `cohort requeue [--hold] JOB...`: job control,
// like Slurm's `scontrol hold`, `scontrol release`, `scontrol update` and `scontrol requeue`. Each job goes on its own (ForEachName): the
// exit code is that of the first failure, an unreachable head stops at once with 3.
#include "api/job_array.h"
#include "cli/client.h"
#include "common/clock.h"

namespace cohort::cli {
namespace {

// Runs `path_of(id)` for each job with `body` and prints "<verb> job N" (or the jobs, --json).
int ForEachJob(const std::vector<std::string>& ids, const GlobalOptions& global, const char* verb,
               const std::function<std::string(api::JobId)>& path_of, const json& body) {
  HttpClient head = HeadClient(global);
  json done = json::array();
  const int rc = ForEachName(
      ids,
      [&](const std::string& text) -> Result<json> {
        const api::JobId id = COHORT_TRY(ResolveJobRef(head, text));  // "12", or "12_7": an element
        return head.Post(path_of(id), body);
      },
      [&](const std::string& text, json reply) {
        if (global.json) {
          done.push_back(std::move(reply));
        } else {
          auto job = api::JobFromJson(reply);
          // As typed when it names an element ("12_7"), else the id the head changed.
          const bool element = text.find('_') != std::string::npos;
          std::printf("%s job %s", verb,
                      element ? text.c_str() : std::to_string(reply.value("id", int64_t{0})).c_str());
          if (job && job->state == api::JobState::kPending) std::printf(" (%s)", job->reason.c_str());
          std::printf("\n");
          std::fflush(stdout);
        }
        return 0;
      });
  if (global.json) PrintJson(json{{"jobs", std::move(done)}});
  return rc;
}

struct UpdateFlags {
  std::optional<std::string> time_limit;
  std::optional<int> priority;
  std::optional<std::string> name;
  std::optional<int64_t> throttle;  // an array's %N
  std::optional<std::string> begin;  // --begin, as ParseBeginTime reads it
};

}  // namespace

Result<json> UpdateBody(const std::optional<std::string>& time_limit, const std::optional<int>& priority,
                        const std::optional<std::string>& name) {
  json body = json::object();
  if (time_limit) body["time_limit_s"] = COHORT_TRY(ParseTimeLimit(*time_limit));
  if (priority) {
    if (*priority < -api::kMaxPriority || *priority > api::kMaxPriority) {
      return FieldError("--priority", "must be between {} and {}, got {}", -api::kMaxPriority, api::kMaxPriority,
                        *priority);
    }
    body["priority"] = *priority;
  }
  if (name) body["name"] = *name;
  if (body.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "nothing to update: give --time-limit, --priority, --name, --throttle or --begin");
  }
  return body;
}

void AddJobControlCommands(CommandContext& ctx) {
  GlobalOptions& global = ctx.global;
  {
    auto ids = std::make_shared<std::vector<std::string>>();
    auto* sub = ctx.app.add_subcommand("hold", "Keep pending jobs from starting until released, like scontrol hold");
    sub->add_option("JOB", *ids, "Job ids; 12_7 is element 7 of array 12")->required();
    AddClientOptions(sub, global);
    ctx.on_run(sub, [ids, &global] {
      return ForEachJob(*ids, global, "Held", [](api::JobId id) { return api::routes::JobHold(id); }, json::object());
    });
  }
  {
    auto ids = std::make_shared<std::vector<std::string>>();
    auto* sub = ctx.app.add_subcommand("release", "Let held jobs start again, like scontrol release");
    sub->add_option("JOB", *ids, "Job ids; 12_7 is element 7 of array 12")->required();
    AddClientOptions(sub, global);
    ctx.on_run(sub, [ids, &global] {
      return ForEachJob(*ids, global, "Released", [](api::JobId id) { return api::routes::JobRelease(id); },
                        json::object());
    });
  }
  {
    auto ids = std::make_shared<std::vector<std::string>>();
    auto hold = std::make_shared<bool>(false);
    auto* sub = ctx.app.add_subcommand(
        "requeue", "Put running or ended jobs back in the queue as their next attempt (same id, same checkpoint "
                   "directory; not counted as a restart), like scontrol requeue");
    sub->add_option("JOB", *ids, "Job ids; 12_7 is element 7 of array 12 (while it runs)")->required();
    sub->add_flag("--hold", *hold, "Requeue held, like scontrol requeuehold (cohort release lets it start)");
    AddClientOptions(sub, global);
    ctx.on_run(sub, [ids, hold, &global] {
      return ForEachJob(*ids, global, "Requeued", [](api::JobId id) { return api::routes::JobRequeue(id); },
                        *hold ? json{{"hold", true}} : json::object());
    });
  }
  {
    auto ids = std::make_shared<std::vector<std::string>>();
    auto f = std::make_shared<UpdateFlags>();
    auto* sub = ctx.app.add_subcommand(
        "update", "Change a pending job's time limit, priority, name or begin time, or an array's throttle; a running "
        "job's time limit (users: only shorter) or name; like scontrol update");
    sub->add_option("JOB", *ids, "Job ids; 12_7 is element 7 of array 12")->required();
    sub->add_option_function<std::string>("-t,--time-limit", [f](const std::string& v) { f->time_limit = v; },
                                          "New time limit, a duration (2h, 1d12h, HH:MM:SS; 0: unlimited)");
    sub->add_option_function<int>("-p,--priority", [f](const int& v) { f->priority = v; },
                                  "New priority, -1000..1000 (above 0: admins only)");
    sub->add_option_function<std::string>("-J,--name", [f](const std::string& v) { f->name = v; }, "New name");
    sub->add_option_function<int64_t>(
        "--throttle", [f](const int64_t& v) { f->throttle = v; },
        "A job array's new %N: at most N elements at once (0: no limit), like Slurm's ArrayTaskThrottle");
    sub->add_option_function<std::string>(
        "-b,--begin", [f](const std::string& v) { f->begin = v; },
        "A pending job's new begin time, as submit --begin reads it (now: no wait), like scontrol update StartTime");
    AddClientOptions(sub, global);
    ctx.on_run(sub, [ids, f, &global] {
      Result<json> body = json::object();
      if (f->time_limit || f->priority || f->name || (!f->throttle && !f->begin)) {
        body = UpdateBody(f->time_limit, f->priority, f->name);
      }
      if (body && f->begin) {
        if (auto at = ParseBeginTime(*f->begin, "--begin", NowUnixMs())) {
          (*body)["begin_ms"] = *at;
        } else {
          body = std::unexpected(at.error());
        }
      }
      if (body && f->throttle) {
        if (*f->throttle < 0 || *f->throttle > api::kMaxArrayElements) {
          body = FieldError("--throttle", "must be between 0 (no limit) and {}, got {}", api::kMaxArrayElements,
                            *f->throttle);
        } else {
          (*body)["array_throttle"] = *f->throttle;
        }
      }
      if (!body) return ReportError(body.error());
      return ForEachJob(*ids, global, "Updated", [](api::JobId id) { return api::routes::JobUpdate(id); }, *body);
    });
  }
}

}  // namespace cohort::cli
