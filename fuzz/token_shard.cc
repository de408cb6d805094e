// A token shard through engine::TokenDataset::Open, the first byte naming it ('0'
// shard.bin, llm.c's format; '1' shard.u16, raw tokens), then what the trainer does
// with an opened dataset: read ranges across it and check its ids against a vocabulary.
#include "engine/data/token_shards.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort;
  static const char* const kNames[] = {"shard.bin", "shard.u16"};
  auto [which, bytes] = fuzz::Select(data, size, 2);
  std::string path = fuzz::ScratchDir() + "/" + kNames[which];
  fuzz::WriteFile(path, bytes);
  auto dataset = engine::TokenDataset::Open(path);
  fuzz::CheckError(dataset, "TokenDataset::Open");
  if (!dataset) return 0;
  size_t n = dataset->size();
  if (n == 0 || 2 * n > bytes.size()) fuzz::Fail("{} tokens from {} bytes", n, bytes.size());
  std::vector<int32_t> out(std::min<size_t>(n, 64));
  for (size_t offset : {size_t{0}, n - out.size(), n / 2 - std::min(n / 2, out.size() / 2)}) {
    auto r = dataset->Read(offset, out);
    if (!r) fuzz::Fail("reading [{}, {}) of {} tokens: {}", offset, offset + out.size(), n,
                       r.error().message);
  }
  if (dataset->Read(n, std::span<int32_t>(out.data(), 1))) fuzz::Fail("read past the end");
  fuzz::CheckError(dataset->CheckVocab(256), "CheckVocab");
  fuzz::CheckError(dataset->CheckVocab(50257), "CheckVocab");
  return 0;
}
