// GPT-2's BPE tokenizer through engine::LoadGpt2BpeTokenizer: an input is vocab.json,
// merges.txt and a text, separated by lines reading "%%". A tokenizer that loads must
// encode the text to ids inside its vocabulary that decode to the text again (byte-level
// BPE loses nothing), and decode any ids without failing.
#include <cstring>

#include "engine/data/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort;
  auto parts = fuzz::SplitParts(fuzz::AsText(data, size), 3);
  std::string vocab = fuzz::ScratchDir() + "/vocab.json";
  std::string merges = fuzz::ScratchDir() + "/merges.txt";
  fuzz::WriteFile(vocab, parts[0]);
  fuzz::WriteFile(merges, parts[1]);
  auto tok = engine::LoadGpt2BpeTokenizer(vocab, merges);
  fuzz::CheckError(tok, "LoadGpt2BpeTokenizer");
  if (!tok) return 0;
  const engine::Tokenizer& t = **tok;
  std::string_view text = parts[2];
  std::vector<int32_t> ids = t.Encode(text);
  for (int32_t id : ids) {
    if (id < 0 || id >= t.vocab_size()) fuzz::Fail("id {} outside [0, {})", id, t.vocab_size());
  }
  std::string back = t.Decode(ids);
  if (back != text) {
    fuzz::Fail("decoding the encoding of {:?} gives {:?}", std::string(text), back);
  }
  // Ids from the text's bytes, in range or not, decode without failing.
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 4 <= text.size(); i += 4) {
    int32_t id;
    std::memcpy(&id, text.data() + i, 4);
    raw.push_back(id);
  }
  (void)t.Decode(raw);
  return 0;
}
