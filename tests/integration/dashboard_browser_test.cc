// The dashboard in a real browser: a headless Chromium, driven through the DevTools
// protocol (cdp_client.h), loads the head's root URL of a live local cluster and the test
// checks what the page shows — nodes and their GPUs, a running job with its progress, a
// pending job with its reason, a job's log — then submits a job through the form and
// cancels one by clicking its Cancel button, and checks both through the API. It saves a
// screenshot into the test's output directory and prints its path.
//
// Skips (with the reason) when no Chromium is installed or it cannot start here.
#include <gtest/gtest.h>

#include "cdp_client.h"
#include "common/tls.h"
#include "harness.h"

namespace cohort::testing {
namespace {

#ifndef COHORT_TEST_OUTPUT_DIR
#define COHORT_TEST_OUTPUT_DIR "/tmp"
#endif

// A job that reports 20 steps of a falling loss at COHORT_REPORT, logs, then keeps running.
const std::string kTrainScript = std::string(kTaskCaFile) +
    "for i in $(seq 1 20); do "
    "  loss=$(awk \"BEGIN{print 4/$i}\"); "
    "  curl -sf --cacert \"$ca\" -o /dev/null -X POST -d \"{\\\"step\\\": $i, \\\"loss\\\": $loss, \\\"tokens_per_s\\\": 12345.5, \\\"total_steps\\\": 40}\" "
    "    \"$COHORT_REPORT\" || exit 9; "
    "  if [ $((i % 5)) = 0 ]; then val=$(awk \"BEGIN{print 5/$i}\"); "
    "    curl -sf --cacert \"$ca\" -o /dev/null -X POST -d \"{\\\"step\\\": $i, \\\"val_loss\\\": $val}\" \"$COHORT_REPORT\" || exit 9; fi; "
    "done; echo 'trained 20 steps <i class=pwned>not markup</i>'; rm -f \"$ca\"; exec sleep 600";

class DashboardBrowserTest : public ::testing::Test {
 protected:
  // Evaluates `js` until it returns true, or fails the test with the last value of `probe`.
  void WaitInPage(CdpSession& cdp, const std::string& js, const std::string& what, const std::string& probe = "") {
    json last;
    bool ok = WaitUntil([&] {
      auto r = cdp.Evaluate(js, After(std::chrono::seconds(5)));
      if (!r) {
        last = r.error().message;
        return false;
      }
      last = *r;
      return r->is_boolean() && r->get<bool>();
    }, std::chrono::seconds(30));
    if (!ok && !probe.empty()) {
      auto p = cdp.Evaluate(probe, After(std::chrono::seconds(5)));
      last = p ? *p : json(p.error().message);
    }
    // Whether the page kept polling the head, and what its last poll said.
    json polling;
    if (!ok) {
      auto p = cdp.Evaluate(
          "JSON.stringify({polls: window.cohortDashboard && window.cohortDashboard.polls, "
          "lastError: window.cohortDashboard && window.cohortDashboard.lastError, "
          "status: document.getElementById('status') && document.getElementById('status').textContent})",
          After(std::chrono::seconds(5)));
      polling = p ? *p : json(p.error().message);
    }
    ASSERT_TRUE(ok) << "the page never showed " << what << "; last: " << last.dump(2) << "; polling: " << polling.dump();
  }

  // Starts `browser` on the cluster's dashboard and logs in with the test token; `skip`
  // says why not when Chromium cannot start here.
  void OpenDashboard(LocalCluster& c, const std::string& binary, HeadlessChromium& browser, std::string& skip) {
    // The head's certificate is from its own authority, which this fresh profile does not
    // know: the browser trusts exactly that certificate's key (as an admin would install
    // the authority), and nothing else it would otherwise refuse.
    auto head_cert = tls::ReadPemFile(c.dir() + "/head/tls/head.crt");
    ASSERT_TRUE(head_cert.has_value()) << head_cert.error().message;
    auto spki = tls::SpkiSha256Base64(*head_cert);
    ASSERT_TRUE(spki.has_value()) << spki.error().message;
    auto started = browser.Start(binary, c.dir() + "/chromium", 1400, 1000,
                                 {"--ignore-certificate-errors-spki-list=" + *spki});
    if (!started) {
      skip = "chromium cannot start here: " + started.error().message;
      return;
    }
    CdpSession& cdp = browser.cdp();
    auto dl = [] { return After(std::chrono::seconds(20)); };
    ASSERT_TRUE(cdp.Call("Page.enable", json::object(), dl()).has_value());
    ASSERT_TRUE(cdp.Call("Runtime.enable", json::object(), dl()).has_value());
    ASSERT_TRUE(cdp.Call("Emulation.setDeviceMetricsOverride",
                         {{"width", 1400}, {"height", 1000}, {"deviceScaleFactor", 1}, {"mobile", false}}, dl())
                    .has_value());
    // Chromium aborts a navigation with net::ERR_NETWORK_CHANGED when the machine's network
    // interfaces change under it (the fault suite beside this test makes and removes network
    // namespaces and their links); a user would reload, and so does the test, a few times.
    Result<json> nav = json::object();
    for (int tries = 0; tries < 5; ++tries) {
      nav = cdp.Call("Page.navigate", {{"url", c.url() + "/"}}, dl());
      if (!nav || nav->value("errorText", "") != "net::ERR_NETWORK_CHANGED") break;
    }
    ASSERT_TRUE(nav.has_value()) << nav.error().message;
    ASSERT_FALSE(nav->contains("errorText")) << nav->dump();
    // Without a token the page asks for one; typed in, it is kept and the dashboard loads.
    ASSERT_NO_FATAL_FAILURE(WaitInPage(cdp, "!document.getElementById('login').hidden", "the token form",
                                       "document.getElementById('status').textContent"));
    auto typed = cdp.Evaluate(fmt::format(R"((() => {{
        document.getElementById('login-token').value = '{}';
        document.getElementById('login').requestSubmit();
        return document.cookie.includes('cohort_token='); }})())", TestToken()), dl());
    ASSERT_TRUE(typed.has_value()) << typed.error().message;
  }

  // Where the screenshots go (created).
  static std::string OutDir() {
    std::string dir = std::string(COHORT_TEST_OUTPUT_DIR) + "/dashboard_browser_test";
    std::filesystem::create_directories(dir);
    return dir;
  }

  // Saves a full-page screenshot as `out_dir`/`name` and prints its path.
  void Screenshot(CdpSession& cdp, const std::string& out_dir, const std::string& name) {
    auto dl = [] { return After(std::chrono::seconds(20)); };
    ASSERT_TRUE(cdp.Evaluate("window.scrollTo(0, 0); true", dl()).has_value());  // the sticky header on top
    auto shot = cdp.Call("Page.captureScreenshot", {{"format", "png"}, {"captureBeyondViewport", true}}, dl());
    ASSERT_TRUE(shot.has_value()) << shot.error().message;
    auto png = Base64Decode((*shot)["data"].get<std::string>());
    ASSERT_TRUE(png.has_value());
    ASSERT_GT(png->size(), 1000u);
    EXPECT_EQ(png->substr(1, 3), "PNG");
    std::string shot_path = out_dir + "/" + name;
    std::ofstream(shot_path, std::ios::binary) << *png;
    std::printf("dashboard screenshot: %s\n", shot_path.c_str());
  }

  // Clicks the element `selector` with real mouse events at its centre.
  void ClickElement(CdpSession& cdp, const std::string& selector) {
    auto rect = cdp.Evaluate(fmt::format(R"((() => {{
      const e = document.querySelector({});
      if (!e) return null;
      e.scrollIntoView({{block: 'center'}});
      const r = e.getBoundingClientRect();
      return {{x: r.left + r.width / 2, y: r.top + r.height / 2}};
    }})())", json(selector).dump()), After(std::chrono::seconds(5)));
    ASSERT_TRUE(rect.has_value()) << rect.error().message;
    ASSERT_TRUE(rect->is_object()) << "no element " << selector;
    auto clicked = cdp.Click((*rect)["x"].get<double>(), (*rect)["y"].get<double>(), After(std::chrono::seconds(5)));
    ASSERT_TRUE(clicked.has_value()) << clicked.error().message;
  }

  // Clicks `selector` until `condition` holds (a poll that redraws the element between the
  // press and the release swallows a click; the next one lands).
  void ClickUntil(CdpSession& cdp, const std::string& selector, const std::string& condition, const std::string& what) {
    for (int attempt = 0; attempt < 4; ++attempt) {
      ClickElement(cdp, selector);
      if (HasFatalFailure()) return;
      bool ok = WaitUntil([&] {
        auto r = cdp.Evaluate(condition, After(std::chrono::seconds(5)));
        return r && r->is_boolean() && r->get<bool>();
      }, std::chrono::milliseconds(2500));
      if (ok) return;
    }
    FAIL() << "clicking " << selector << " never led to " << what;
  }
};

TEST_F(DashboardBrowserTest, ShowsTheClusterAndCancelsAJobFromThePage) {
  std::string binary = HeadlessChromium::FindBinary();
  if (binary.empty()) GTEST_SKIP() << "no chromium in PATH (set COHORT_CHROMIUM to a Chromium or Chrome binary)";

  LocalCluster c;
  c.StartHead();
  c.StartAgent("gpu-a", 4);
  c.StartAgent("gpu-b", 4);
  c.WaitForNodes(2);

  json train = c.Submit({{"name", "train-gpt"}, {"command", {"/bin/sh", "-c", kTrainScript}}, {"gpus_per_node", 4}});
  int64_t train_id = train["id"];
  c.WaitForState(train_id, "RUNNING");
  // Needs all 8 GPUs while train-gpt holds 4: it waits, with a reason. Its command is
  // markup, which the page must show as text.
  json wide = c.Submit({{"name", "wide"}, {"nodes", 2}, {"gpus_per_node", 4},
                        {"command", {"/bin/echo", "<img src=x onerror=\"document.title='pwned'\">"}}});
  int64_t wide_id = wide["id"];
  ASSERT_TRUE(WaitUntil([&] {
    json j = c.Job(train_id);
    return j.contains("progress") && j["progress"]["step"] == 20 && c.Logs(train_id, 0).find("trained") != std::string::npos;
  }, std::chrono::seconds(30))) << "the job did not report its steps: " << c.Job(train_id).dump(2);
  // The scheduler's own reason, not the submit-time placeholder it replaces.
  std::string reason;
  ASSERT_TRUE(WaitUntil([&] {
    reason = c.Job(wide_id)["reason"];
    return !reason.empty() && reason != "waiting for the scheduler";
  }, std::chrono::seconds(10))) << reason;

  const std::string out_dir = OutDir();
  HeadlessChromium browser;
  std::string skip;
  ASSERT_NO_FATAL_FAILURE(OpenDashboard(c, binary, browser, skip));
  if (!skip.empty()) GTEST_SKIP() << skip;
  CdpSession& cdp = browser.cdp();
  auto dl = [] { return After(std::chrono::seconds(20)); };

  const std::string probe = R"(JSON.stringify({
      polls: window.cohortDashboard && window.cohortDashboard.polls,
      error: window.cohortDashboard && window.cohortDashboard.lastError,
      nodes: [...document.querySelectorAll('#nodes .node')].map(n => n.innerText),
      running: [...document.querySelectorAll('#running tbody tr')].map(r => r.innerText),
      queue: [...document.querySelectorAll('#queue tbody tr')].map(r => r.innerText),
      recent: [...document.querySelectorAll('#recent tbody tr')].map(r => r.innerText),
      log: document.getElementById('log') && document.getElementById('log').textContent}))";

  // Nodes with their GPUs.
  WaitInPage(cdp, "!!(window.cohortDashboard && window.cohortDashboard.polls > 0)", "its first poll", probe);
  WaitInPage(cdp, R"((() => {
      const names = [...document.querySelectorAll('#nodes .node')].map(n => n.dataset.node);
      return names.join(',') === 'gpu-a,gpu-b' &&
             document.querySelectorAll('#nodes .node[data-node="gpu-a"] .gpu').length === 4 &&
             document.querySelectorAll('#nodes .gpu').length === 8 &&
             document.querySelectorAll('#nodes .gpu.busy').length === 4 &&
             document.querySelectorAll('#nodes .node svg.util path.line').length === 2 &&
             [...document.querySelectorAll('#nodes .node svg.util text')].some(t => t.textContent === 'GPU util · now');
    })())", "both nodes with 4 GPUs each, 4 of them busy, and each node's utilization chart", probe);

  // The running job with its progress and loss curve.
  std::string row = fmt::format("#running tbody tr[data-job=\"{}\"]", train_id);
  WaitInPage(cdp, fmt::format(R"((() => {{
      const r = document.querySelector('{}');
      if (!r) return false;
      const cells = [...r.cells].map(c => c.textContent);
      return cells[1] === 'train-gpt' && cells[6] === '20' && cells[7] === '0.2000' &&
             cells[8].startsWith('12.') && cells[9].startsWith('50%') && !!r.querySelector('td.progress .bar .fill') &&
             !!r.querySelector('svg.spark path') && r.querySelector('a.job-link').getAttribute('href') === '#job/{}';
    }})())", row, train_id), "the running job with step 20, loss 0.2, 12.3 k tokens/s, 50% of 40 steps, a link and a sparkline",
             probe);

  // The pending job with its reason; its markup command stays text.
  WaitInPage(cdp, fmt::format(R"((() => {{
      const r = document.querySelector('#queue tbody tr[data-job="{}"]');
      return !!r && r.cells[1].textContent === 'wide' && r.querySelector('td.reason').textContent === {} &&
             r.cells[1].title.includes('<img') && !document.querySelector('img') && document.title === 'Cohort';
    }})())", wide_id, json(reason).dump()), "the pending job with reason: " + reason, probe);

  // The job's detail: its loss chart and its log (markup in the log stays text).
  ClickUntil(cdp, row + " td.name", "!document.getElementById('detail-section').hidden", "the job's detail");
  ASSERT_FALSE(HasFatalFailure());
  WaitInPage(cdp, fmt::format(R"((() => {{
      const log = document.getElementById('log').textContent;
      const titles = [...document.querySelectorAll('#detail-chart svg text.axis-title')].map(t => t.textContent);
      return !document.getElementById('detail-section').hidden &&
             !!document.querySelector('#detail-chart svg path.line') &&
             !!document.querySelector('#detail-chart svg path.line.val') && titles.join(',') === 'step,loss' &&
             location.hash === '#job/{}' && document.getElementById('detail-facts').textContent.includes('20 of 40') &&
             log.includes('trained 20 steps <i class=pwned>') && !document.querySelector('i.pwned');
    }})())", train_id), "the job's chart (loss and val loss, axis titles), its URL, and its log", probe);

  ASSERT_NO_FATAL_FAILURE(Screenshot(cdp, out_dir, "dashboard.png"));

  // Submit through the form.
  auto filled = cdp.Evaluate(R"((() => {
      const f = document.getElementById('submit');
      f.command.value = 'echo submitted-from-the-page';
      f.name.value = 'from-page';
      f.nodes.value = '1'; f.tasks_per_node.value = '2'; f.gpus_per_node.value = '0';
      return true;
    })())", dl());
  ASSERT_TRUE(filled.has_value()) << filled.error().message;
  ClickElement(cdp, "#submit button[type=submit]");
  int64_t submitted_id = 0;
  ASSERT_TRUE(WaitUntil([&] {
    auto jobs = c.client().Get("/v1/jobs?state=all");
    if (!jobs) return false;
    for (const auto& j : (*jobs)["jobs"]) {
      if (j["spec"]["name"] == "from-page") submitted_id = j["id"];
    }
    return submitted_id != 0;
  }, std::chrono::seconds(20))) << "the form did not submit";
  json sub = c.WaitForState(submitted_id, "SUCCEEDED");
  EXPECT_EQ(sub["spec"]["command"], json({"/bin/sh", "-c", "echo submitted-from-the-page"}));
  EXPECT_EQ(sub["spec"]["tasks_per_node"], 2);
  EXPECT_NE(c.Logs(submitted_id, 1).find("submitted-from-the-page"), std::string::npos);

  // Cancel the running job: the first click asks for confirmation, the second cancels.
  std::string cancel = fmt::format("button[data-cancel=\"{}\"]", train_id);
  ClickUntil(cdp, cancel, fmt::format("document.querySelector('{}')?.textContent === 'Confirm cancel'", cancel),
             "the confirmation step");
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(c.Job(train_id)["state"], "RUNNING") << "one click must not cancel";
  ClickUntil(cdp, cancel, fmt::format("!document.querySelector('#running tbody tr[data-job=\"{}\"]')", train_id),
             "the job leaving the running list");
  ASSERT_FALSE(HasFatalFailure());
  json cancelled = c.WaitForState(train_id, "CANCELLED");
  EXPECT_EQ(cancelled["reason"], "cancelled by request");
  WaitInPage(cdp, fmt::format(R"((() => {{
      const r = document.querySelector('#recent tbody tr[data-job="{}"]');
      return !!r && r.cells[3].textContent === 'CANCELLED' && !document.querySelector('#running tbody tr[data-job="{}"]');
    }})())", train_id, train_id), "the cancelled job among the recent ones", probe);
  // With train-gpt gone the wide job gets both nodes.
  c.WaitForState(wide_id, "SUCCEEDED");
}

// Issue 18 on the page: each GPU's holders with their parts (two halves of one GPU, one
// over its memory share and marked), their GPU memory, and MIG instances under their parent.
TEST_F(DashboardBrowserTest, ShowsGpuFractionsMemoryAndMigInstances) {
  std::string binary = HeadlessChromium::FindBinary();
  if (binary.empty()) GTEST_SKIP() << "no chromium in PATH (set COHORT_CHROMIUM to a Chromium or Chrome binary)";
  LocalCluster c;
  c.StartHead();
  // GPU 0 carved into three MIG instances (node indices 0-2), GPUs 1 and 2 whole (3, 4).
  c.StartAgent("mig-a", 3, 16, {"--simulated-mig", "1g.10gb:2,3g.40gb:1"});
  c.WaitForNodes(1);
  auto half = [&](const std::string& name, int64_t gib) {
    return c.Submit({{"name", name},
                     {"command", {"sh", "-c",
                                  "echo \"$CUDA_VISIBLE_DEVICES $((" + std::to_string(gib) +
                                      " << 30))\" > \"$COHORT_SIMULATED_GPU_MEMORY_DIR/$$\"; exec sleep 600"}},
                     {"gpus_per_task", 0.5}})["id"].get<int64_t>();
  };
  const int64_t big = half("big", 50), small = half("small", 10);
  const int64_t mig = c.Submit({{"name", "mig"}, {"command", {"sleep", "600"}}, {"gpus", "1g.10gb:1"}})["id"];
  c.WaitForState(mig, "RUNNING");
  // GPU 4: a job of two quarter tasks (half the GPU in all) and a gpu_memory-only job,
  // which holds its memory's part of the GPU (20 of 80 GiB: a quarter).
  const int64_t quarters = c.Submit({{"name", "quarters"}, {"command", {"sleep", "600"}}, {"tasks_per_node", 2},
                                     {"gpus_per_task", 0.25}})["id"];
  const int64_t memory = c.Submit({{"name", "memory"}, {"command", {"sleep", "600"}}, {"gpu_memory", "20GiB"}})["id"];
  c.WaitForState(quarters, "RUNNING");
  c.WaitForState(memory, "RUNNING");
  ASSERT_TRUE(WaitUntil([&] {
    json j = c.Job(big);
    return j.contains("tasks_usage") && j["tasks_usage"].size() == 1 && j["tasks_usage"][0].contains("gpu_memory_warning");
  }, std::chrono::seconds(20))) << c.Job(big).dump(2);

  const std::string out_dir = OutDir();
  HeadlessChromium browser;
  std::string skip;
  ASSERT_NO_FATAL_FAILURE(OpenDashboard(c, binary, browser, skip));
  if (!skip.empty()) GTEST_SKIP() << skip;
  CdpSession& cdp = browser.cdp();
  const std::string probe = R"(JSON.stringify([...document.querySelectorAll('#nodes .node')].map(n => n.innerHTML)))";
  WaitInPage(cdp, fmt::format(R"((() => {{
      const mig = document.querySelector('#nodes .mig[data-mig-parent="0"]');
      if (!mig || mig.querySelectorAll('.gpu').length !== 3) return false;
      const profiles = [...mig.querySelectorAll('.gpu .mig-profile')].map(p => p.textContent).join(',');
      const busyMig = mig.querySelectorAll('.gpu.busy .holder[data-job="{mig}"]').length;
      const whole = document.querySelector('#nodes .gpu[data-gpu="3"]');
      if (!whole || whole.closest('.mig')) return false;
      const b = whole.querySelector('.holder[data-job="{big}"]'), s = whole.querySelector('.holder[data-job="{small}"]');
      return profiles === '1g.10gb,1g.10gb,3g.40gb' && busyMig === 1 && whole.classList.contains('shared') &&
             !!b && !!s && b.textContent.startsWith('j{big} ½') && b.textContent.includes('50.0G') &&
             b.classList.contains('over') && s.textContent.startsWith('j{small} ½') && s.textContent.includes('10.0G') &&
             !s.classList.contains('over') && whole.classList.contains('over') &&
             whole.title.includes('over its share of 40 GiB') &&
             document.querySelector('#running tbody tr[data-job="{big}"]')?.cells[4].textContent === '0.5';
    }})())", fmt::arg("mig", mig), fmt::arg("big", big), fmt::arg("small", small)),
             "GPU 0's three MIG instances under it (one busy), and GPU 3 shared by two halves with their memory, "
             "the one over its share marked, and a half-GPU job counted as 0.5 GPU", probe);
  WaitInPage(cdp, fmt::format(R"((() => {{
      const g = document.querySelector('#nodes .gpu[data-gpu="4"]');
      const q = g && g.querySelector('.holder[data-job="{quarters}"]'), m = g && g.querySelector('.holder[data-job="{memory}"]');
      const cell = (id) => document.querySelector(`#running tbody tr[data-job="${{id}}"]`)?.cells[4].textContent;
      return !!q && !!m && q.textContent.startsWith('j{quarters} ½') && m.textContent.startsWith('j{memory} ¼ 20GiB') &&
             cell({quarters}) === '0.5' && cell({memory}) === '0.25';
    }})())", fmt::arg("quarters", quarters), fmt::arg("memory", memory)),
             "GPU 4 held by two quarter tasks of one job (½ in all) and by a 20GiB job (¼ of the GPU), each counted "
             "as the part it holds in the running table", probe);
  ASSERT_NO_FATAL_FAILURE(Screenshot(cdp, out_dir, "dashboard_gpu_sharing.png"));
}

// An allocation (`cohort alloc`, issue 19) in the page: "(allocation)" for its command, in
// the table's title and the detail, and its steps with their exit codes in the detail.
TEST_F(DashboardBrowserTest, ShowsAnAllocationAndItsSteps) {
  std::string binary = HeadlessChromium::FindBinary();
  if (binary.empty()) GTEST_SKIP() << "no chromium in PATH (set COHORT_CHROMIUM to a Chromium or Chrome binary)";
  LocalCluster c;
  c.StartHead();
  c.StartAgent("alloc-a", 2);
  c.WaitForNodes(1);
  const int64_t id = c.Submit({{"name", "interactive"}, {"kind", "allocation"}, {"gpus_per_node", 1}})["id"];
  c.WaitForState(id, "RUNNING");
  // A step inside it, as `cohort run` in alloc's shell makes one.
  auto step = RunCli(c, {"env", "COHORT_JOB_ID=" + std::to_string(id), COHORT_BINARY, "--head", c.url(), "run",
                         "--", "sh", "-c", "exit 3"});
  ASSERT_EQ(step.status.Code(), 3) << step.output << step.errors;

  HeadlessChromium browser;
  std::string skip;
  ASSERT_NO_FATAL_FAILURE(OpenDashboard(c, binary, browser, skip));
  if (!skip.empty()) GTEST_SKIP() << skip;
  CdpSession& cdp = browser.cdp();
  const std::string probe = R"(JSON.stringify({
      running: [...document.querySelectorAll('#running tbody tr')].map(r => r.innerText),
      facts: document.getElementById('detail-facts') && document.getElementById('detail-facts').innerText}))";
  const std::string row = fmt::format("#running tbody tr[data-job=\"{}\"]", id);
  WaitInPage(cdp, fmt::format(R"((() => {{
      const r = document.querySelector('{}');
      return !!r && r.cells[1].textContent === 'interactive' && r.cells[1].title === '(allocation)';
    }})())", row), "the allocation running, '(allocation)' for its command", probe);
  ClickUntil(cdp, row + " td.name", "!document.getElementById('detail-section').hidden", "the allocation's detail");
  ASSERT_FALSE(HasFatalFailure());
  WaitInPage(cdp, R"((() => {
      const facts = document.getElementById('detail-facts').textContent;
      return facts.includes('(allocation)') && facts.includes("#1 sh -c 'exit 3': exit 3");
    })())", "its detail: '(allocation)' and step #1 with its exit code 3", probe);
  ASSERT_NO_FATAL_FAILURE(Screenshot(cdp, OutDir(), "dashboard_allocation.png"));
}

}  // namespace
}  // namespace cohort::testing
