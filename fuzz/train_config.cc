// `cohort train`'s config file through engine::LoadTrainConfig, the entry point the
// trainer calls: read from a file named by the first byte ('0' config.yaml, '1'
// config.json, '2' config, whose format is sniffed), then the checks the trainer makes
// on an accepted config.
#include "engine/trainer/config.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort;
  static const char* const kNames[] = {"config.yaml", "config.json", "config"};
  auto [which, text] = fuzz::Select(data, size, 3);
  std::string path = fuzz::ScratchDir() + "/" + kNames[which];
  fuzz::WriteFile(path, text);
  auto config = engine::LoadTrainConfig(path);
  fuzz::CheckError(config, "LoadTrainConfig");
  if (!config) return 0;
  fuzz::CheckError(engine::CheckDeviceBackend(*config), "CheckDeviceBackend");
  for (int world : {1, 3, 4096}) {
    fuzz::CheckError(engine::AccumulationSteps(*config, world), "AccumulationSteps");
  }
  return 0;
}
