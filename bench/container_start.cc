// Container start overhead: the same one-GPU `true` job as a bare process and in a
// container image (Podman, the image cached on the node), one job at a time on one agent,
// from submit to the head's record of its end (the head's own timestamps).
//
//   bench_container_start [JOBS=20]
//
// The image is made here from Debian's busybox-static (`podman import`, no registry) and
// removed at the end. Target (issue 20): under 1 s more than the bare process.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "bench_cluster.h"
#include "common/subprocess.h"

using namespace cohort;

namespace {

int RunQuiet(const std::string& shell) {
  SpawnOptions o;
  o.argv = {"sh", "-c", shell + " >/dev/null 2>&1"};
  auto p = Subprocess::Spawn(o);
  if (!p) return -1;
  auto st = p->Wait();
  return st ? st->Code() : -1;
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

// Submit-to-end of `jobs` jobs with this spec, one after another; seconds each.
std::vector<double> RunJobs(bench::BenchCluster& c, const json& spec, int jobs) {
  HttpClient client = c.Client(Millis(30000));
  std::vector<double> out;
  for (int i = 0; i < jobs; ++i) {
    auto r = client.Post("/v1/jobs", spec);
    if (!r) bench::BenchCluster::Die("submit: " + r.error().message);
    const std::string path = "/v1/jobs/" + std::to_string((*r)["id"].get<int64_t>());
    while (true) {
      auto j = client.Get(path);
      if (!j) bench::BenchCluster::Die(j.error().message);
      const std::string state = (*j)["state"];
      if (state == "SUCCEEDED") {
        out.push_back(((*j)["end_ms"].get<int64_t>() - (*j)["submit_ms"].get<int64_t>()) / 1000.0);
        break;
      }
      if (state != "PENDING" && state != "RUNNING") bench::BenchCluster::Die("job ended " + j->dump());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int jobs = argc > 1 ? std::atoi(argv[1]) : 20;
  if (jobs < 1) bench::BenchCluster::Die("usage: bench_container_start [JOBS>=1]");
  const std::string image = "localhost/cohort-bench-busybox:" + std::to_string(getpid());
  const std::string root = std::filesystem::temp_directory_path() / ("cohort-bench-rootfs-" + std::to_string(getpid()));
  std::filesystem::create_directories(root + "/bin");
  std::filesystem::copy_file("/bin/busybox", root + "/bin/busybox");
  std::filesystem::create_symlink("busybox", root + "/bin/true");
  if (RunQuiet("tar -C '" + root + "' -c . | podman import - " + image) != 0 ||
      RunQuiet("podman run --rm --network=host " + image + " /bin/true") != 0) {
    bench::BenchCluster::Die("podman cannot run a container here (scripts/setup-podman.sh configures it)");
  }
  std::filesystem::remove_all(root);

  std::vector<double> bare, contained;
  {
    bench::BenchCluster c;
    c.StartHead();
    c.StartAgent("node-1", 8);
    c.WaitForNodes(1);
    RunJobs(c, json{{"command", {"true"}}, {"container", {{"image", image}}}}, 1);  // warm the page cache
    bare = RunJobs(c, json{{"command", {"true"}}, {"gpus_per_node", 1}}, jobs);
    contained = RunJobs(c, json{{"command", {"true"}}, {"gpus_per_node", 1}, {"container", {{"image", image}}}}, jobs);
  }
  RunQuiet("podman rmi --force " + image);

  const double overhead = Percentile(contained, 0.5) - Percentile(bare, 0.5);
  std::printf("container start: %d one-GPU `true` jobs each way, one at a time, 1 agent (Podman, image cached)\n", jobs);
  std::printf("  submit -> end, bare process:  p50 %6.3f s  p90 %6.3f s\n", Percentile(bare, 0.5), Percentile(bare, 0.9));
  std::printf("  submit -> end, in container:  p50 %6.3f s  p90 %6.3f s\n", Percentile(contained, 0.5),
              Percentile(contained, 0.9));
  std::printf("  container overhead (p50):     %6.3f s   target < 1 s   %s\n", overhead, overhead < 1 ? "OK" : "MISSED");
  return 0;
}
