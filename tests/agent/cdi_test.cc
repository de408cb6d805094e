// The CDI spec the agent writes for its real GPUs (agent/cdi.h), over a fake root: device
// nodes by the driver's minor numbers, the control nodes, driver libraries and tools that
// exist, no device for a simulated GPU, and the --device names.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "agent/cdi.h"

namespace cohort::agent {
namespace {

namespace fs = std::filesystem;

class CdiTest : public ::testing::Test {
 protected:
  CdiTest() {
    char tmpl[] = "/tmp/cohort-cdi-XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  ~CdiTest() override { fs::remove_all(root_); }
  void Touch(const std::string& path, const std::string& text = "") {
    fs::create_directories(fs::path(root_ + path).parent_path());
    std::ofstream(root_ + path) << text;
  }
  // /proc/driver/nvidia/gpus/<bus>/information as the driver writes it.
  void DriverGpu(const std::string& bus, const std::string& uuid, int minor) {
    Touch("/proc/driver/nvidia/gpus/" + bus + "/information",
          "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 123\nGPU UUID: \t " + uuid +
              "\nVideo BIOS: \t 96.00.74.00.01\nDevice Minor: \t " + std::to_string(minor) + "\n");
  }
  std::string root_;
};

GpuInfo Gpu(int index, std::string uuid, bool simulated = false) {
  GpuInfo g;
  g.index = index;
  g.uuid = std::move(uuid);
  g.simulated = simulated;
  return g;
}

TEST_F(CdiTest, OneDevicePerGpuByMinorNumberAndTheDriversFiles) {
  DriverGpu("0000:1b:00.0", "GPU-aaaa", 3);  // index 0 is minor 3: indices and minors differ
  DriverGpu("0000:2c:00.0", "GPU-bbbb", 0);
  Touch("/dev/nvidiactl");
  Touch("/dev/nvidia-uvm");
  Touch("/usr/lib/x86_64-linux-gnu/libcuda.so.1");
  Touch("/usr/lib64/libnvidia-ml.so.1");
  Touch("/usr/bin/nvidia-smi");
  const CdiHostFiles host = DiscoverCdiHostFiles(root_);
  EXPECT_EQ(host.control_nodes, (std::vector<std::string>{"/dev/nvidiactl", "/dev/nvidia-uvm"}));
  EXPECT_EQ(host.libraries,
            (std::vector<std::string>{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libnvidia-ml.so.1"}));
  EXPECT_EQ(host.binaries, (std::vector<std::string>{"/usr/bin/nvidia-smi"}));

  auto spec = MakeCdiSpec({Gpu(0, "GPU-aaaa"), Gpu(1, "GPU-bbbb"), Gpu(2, "GPU-sim", true)}, host, root_);
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ((*spec)["kind"], "cohort.dev/gpu");
  EXPECT_EQ((*spec)["cdiVersion"], "0.5.0");
  const json& devices = (*spec)["devices"];
  ASSERT_EQ(devices.size(), 2u) << "a simulated GPU has no device";
  EXPECT_EQ(devices[0]["name"], "0");
  EXPECT_EQ(devices[0]["containerEdits"]["deviceNodes"][0]["path"], "/dev/nvidia3");
  EXPECT_EQ(devices[1]["name"], "1");
  EXPECT_EQ(devices[1]["containerEdits"]["deviceNodes"][0]["path"], "/dev/nvidia0");
  const json& edits = (*spec)["containerEdits"];
  EXPECT_EQ(edits["deviceNodes"], json::parse(R"([{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}])"));
  ASSERT_EQ(edits["mounts"].size(), 3u);
  EXPECT_EQ(edits["mounts"][0]["hostPath"], "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
  EXPECT_EQ(edits["mounts"][0]["containerPath"], "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
  EXPECT_EQ(edits["mounts"][0]["options"], json::parse(R"(["ro", "nosuid", "nodev", "bind"])"));
  EXPECT_EQ(edits["mounts"][2]["hostPath"], "/usr/bin/nvidia-smi");

  EXPECT_EQ(CdiDeviceNames({1, 0}), (std::vector<std::string>{"cohort.dev/gpu=1", "cohort.dev/gpu=0"}));
  auto path = WriteCdiSpec(root_ + "/etc/cdi", *spec);
  ASSERT_TRUE(path) << path.error().message;
  std::ifstream in(*path);
  EXPECT_EQ(json::parse(in), *spec);
}

TEST_F(CdiTest, AGpuTheDriverDoesNotListIsAnError) {
  DriverGpu("0000:1b:00.0", "GPU-aaaa", 0);
  auto spec = MakeCdiSpec({Gpu(0, "GPU-zzzz")}, CdiHostFiles{}, root_);
  ASSERT_FALSE(spec);
  EXPECT_EQ(spec.error().code, ErrorCode::kNotFound);
  EXPECT_NE(spec.error().message.find("GPU-zzzz"), std::string::npos);
  // Only simulated GPUs: a spec without devices.
  auto none = MakeCdiSpec({Gpu(0, "GPU-sim", true)}, CdiHostFiles{}, root_);
  ASSERT_TRUE(none);
  EXPECT_TRUE((*none)["devices"].empty());
}

}  // namespace
}  // namespace cohort::agent
