#include "cli/step.h"

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>

#include "cli/client.h"
#include "cli/exec_stream.h"
#include "common/signals.h"

namespace cohort::cli {
namespace {

struct TaskOutcome {
  ExecSession session;
  std::optional<int> exit_code;
  std::string error;
  std::string out, err;  // --json only
};

Result<std::vector<ExecSession>> StartStep(const HttpClient& head, api::JobId job, const api::StepRequest& req,
                                           int* step_id) {
  json reply = COHORT_TRY(head.Post(api::routes::JobSteps(job), api::ToJson(req)));
  auto r = COHORT_TRY(FromHead(ObjectReader::Open(reply), "step reply"));
  *step_id = static_cast<int>(COHORT_TRY(FromHead(r.Int("step", std::nullopt, 1, INT32_MAX), "step reply")));
  const int attempt = static_cast<int>(COHORT_TRY(FromHead(r.Int("attempt", std::nullopt, 0, INT32_MAX), "step reply")));
  const json* sessions = r.Raw("sessions");
  if (!sessions || !sessions->is_array() || sessions->empty()) {
    return Errorf(ErrorCode::kInternal, "the head's step reply has no sessions");
  }
  std::vector<ExecSession> out;
  for (const auto& s : *sessions) {
    auto sr = COHORT_TRY(FromHead(ObjectReader::Open(s, "sessions[]"), "step reply"));
    ExecSession e;
    e.job = job;
    e.attempt = attempt;
    e.rank = static_cast<int>(COHORT_TRY(FromHead(sr.Int("rank", std::nullopt, 0, INT32_MAX), "step reply")));
    e.node = COHORT_TRY(FromHead(sr.String("node", std::string()), "step reply"));
    e.id = COHORT_TRY(FromHead(sr.String("session", std::nullopt, 64), "step reply"));
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

std::string StepAllocationFromEnvironment() {
  const char* id = std::getenv("COHORT_JOB_ID");
  if (!id || !*id) return {};
  if (const char* rank = std::getenv("RANK"); rank && *rank) return {};
  return id;
}

int RunStep(const std::string& allocation, const api::StepRequest& req, const GlobalOptions& global) {
  auto job = ParseJobId(allocation);
  if (!job) return ReportError(WithContext(job.error(), "COHORT_JOB_ID"));
  if (req.command.empty()) {
    return ReportError(MakeError(ErrorCode::kInvalidArgument,
                                 "give the program to run after --, e.g. cohort run -N 2 -- hostname", "command")
                           .error());
  }
  HttpClient head = HeadClient(global);
  int step_id = 0;
  auto sessions = StartStep(head, *job, req, &step_id);
  if (!sessions) {
    return ReportError(WithContext(sessions.error(), fmt::format("a step of allocation {} (COHORT_JOB_ID)", *job)));
  }

  std::vector<TaskOutcome> outcomes(sessions->size());
  std::mutex out_mu;  // one frame is written whole before another task's
  std::atomic<size_t> finished{0};
  std::vector<std::thread> pumps;
  for (size_t i = 0; i < sessions->size(); ++i) {
    outcomes[i].session = (*sessions)[i];
    pumps.emplace_back([&, i] {
      TaskOutcome& o = outcomes[i];
      HttpClient client = HeadClient(global);
      auto code = PumpExecOutput(client, o.session, [&](const api::ExecFrame& fr) {
        std::lock_guard<std::mutex> lock(out_mu);
        if (global.json) {
          (fr.stream == 'e' ? o.err : o.out) += fr.data;
        } else {
          WriteAll(fr.stream == 'e' ? 2 : 1, fr.data);
        }
      });
      if (code) {
        o.exit_code = *code;
      } else {
        o.error = code.error().message;
      }
      finished.fetch_add(1);
    });
  }
  int interrupted = 0;
  while (finished.load() < pumps.size()) {
    if (int sig = PollTerminationSignal(Millis(100)); sig && !interrupted) {
      interrupted = sig;
      std::fprintf(stderr, "cohort run: %s, ending step %d of allocation %lld\n",
                   sig == SIGINT ? "interrupted" : "terminated", step_id, static_cast<long long>(*job));
      api::ExecInput close;
      close.close = true;
      for (const auto& o : outcomes) (void)SendExecInput(head, o.session, close);
    }
  }
  for (auto& t : pumps) t.join();

  int rc = 0;
  json tasks = json::array();
  for (const auto& o : outcomes) {
    const int code = o.exit_code.value_or(1);
    rc = std::max(rc, code);
    if (!o.error.empty()) {
      std::fprintf(stderr, "cohort run: rank %d on %s: %s\n", o.session.rank, o.session.node.c_str(), o.error.c_str());
    } else if (code != 0 && !global.json) {
      std::fprintf(stderr, "cohort run: rank %d on %s exited %d\n", o.session.rank, o.session.node.c_str(), code);
    }
    tasks.push_back({{"rank", o.session.rank},
                     {"node", o.session.node},
                     {"exit_code", o.exit_code ? json(*o.exit_code) : json(nullptr)},
                     {"stdout", o.out},
                     {"stderr", o.err}});
  }
  if (interrupted) rc = 128 + interrupted;
  if (global.json) PrintJson(json{{"job", *job}, {"step", step_id}, {"exit_code", rc}, {"tasks", tasks}});
  return rc;
}

}  // namespace cohort::cli
