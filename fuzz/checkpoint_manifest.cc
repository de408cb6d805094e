// A checkpoint directory through engine::LoadLatestCheckpoint, as a restarted trainer
// loads it. A small valid checkpoint is saved once; each input then replaces, by its first
// byte, either its MANIFEST ('0'), or its state.json ('1', with a MANIFEST whose sizes and
// checksums match, so the state's fields are what is tested, not the checksum).
#include <zlib.h>

#include "engine/checkpoint/checkpoint.h"
#include "fuzz_util.h"

namespace {

using namespace cohort;

struct Fixture {
  std::string dir;        // the checkpoint directory the trainer would be given
  std::string step_dir;   // its one step directory
  std::string manifest;   // the saved MANIFEST and state.json
  std::string state;
  engine::GptConfig config;
};

std::string ReadAll(const std::string& path) {
  std::string out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) fuzz::Fail("cannot read {}", path);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

const Fixture& Saved() {
  static const Fixture fixture = [] {
    Fixture f;
    f.dir = fuzz::ScratchDir() + "/checkpoints";
    f.config = engine::GptConfig{.vocab_size = 8, .max_seq_len = 4, .n_layer = 1, .n_head = 1,
                                 .n_embd = 4};
    std::vector<float> params(f.config.num_parameters(), 0.5f);
    engine::CheckpointView view;
    view.config = f.config;
    view.params = params;
    view.adam_m = params;
    view.adam_v = params;
    view.adam_t = 1;
    view.progress = {.step = 1, .next_batch = 1, .tokens_seen = 16, .rng_state = {1, 2}};
    auto saved = engine::SaveCheckpoint(f.dir, view, 0);
    if (!saved) fuzz::Fail("saving the fixture: {}", saved.error().message);
    f.step_dir = *saved;
    f.manifest = ReadAll(f.step_dir + "/MANIFEST");
    f.state = ReadAll(f.step_dir + "/state.json");
    return f;
  }();
  return fixture;
}

// A MANIFEST that matches the step directory's files as they are now.
std::string MatchingManifest(const std::string& step_dir) {
  json files = json::object();
  for (const char* name : {"params.bin", "optim.bin", "state.json"}) {
    std::string bytes = ReadAll(step_dir + "/" + name);
    uLong crc = crc32_z(crc32(0, nullptr, 0), reinterpret_cast<const Bytef*>(bytes.data()),
                        bytes.size());
    files[name] = {{"bytes", bytes.size()}, {"crc32", fmt::format("{:08x}", crc)}};
  }
  return json{{"format", "cohort-checkpoint"}, {"version", 1}, {"files", files}}.dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Fixture& f = Saved();
  auto [which, text] = fuzz::Select(data, size, 2);
  if (which == 0) {
    fuzz::WriteFile(f.step_dir + "/state.json", f.state);
    fuzz::WriteFile(f.step_dir + "/MANIFEST", text);
  } else {
    fuzz::WriteFile(f.step_dir + "/state.json", text);
    fuzz::WriteFile(f.step_dir + "/MANIFEST", MatchingManifest(f.step_dir));
  }
  auto ck = engine::LoadLatestCheckpoint(f.dir, f.config);
  fuzz::CheckError(ck, "LoadLatestCheckpoint");
  if (ck && ck->params.size() != f.config.num_parameters()) {
    fuzz::Fail("loaded {} parameters, the config has {}", ck->params.size(),
               f.config.num_parameters());
  }
  return 0;
}
