// A safetensors file through engine::ReadSafeTensors: all of it, and the header alone (a
// filter that accepts no tensor), as the GPT-2 import reads it first. What is read must
// agree with its shape.
#include "engine/checkpoint/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort;
  std::string path = fuzz::ScratchDir() + "/model.safetensors";
  fuzz::WriteFile(path, fuzz::AsText(data, size));
  auto header = engine::ReadSafeTensors(path, [](const std::string&) { return false; });
  fuzz::CheckError(header, "ReadSafeTensors (header)");
  auto file = engine::ReadSafeTensors(path);
  fuzz::CheckError(file, "ReadSafeTensors");
  if (!file) return 0;
  if (!header) fuzz::Fail("the whole file reads but its header alone does not");
  for (const auto& [name, t] : file->tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    if (numel != t.data.size()) {
      fuzz::Fail("tensor '{}' has {} floats for a shape of {}", name, t.data.size(), numel);
    }
  }
  return 0;
}
