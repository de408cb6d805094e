#include "engine/trainer/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace cohort::engine {

int32_t SampleToken(std::span<const float> logits, double temperature, int top_k, Rng& rng) {
  const int n = static_cast<int>(logits.size());
  if (temperature <= 0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  std::vector<int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  int k = (top_k <= 0 || top_k > n) ? n : top_k;
  // Highest logits first; ties broken by id so the choice is deterministic.
  auto higher = [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  };
  if (k < n) std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), higher);
  else std::sort(ids.begin(), ids.end(), higher);
  const double top = logits[ids[0]];
  std::vector<double> p(k);
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[i] = std::exp((logits[ids[i]] - top) / temperature);
  double u = rng.Uniform() * sum;
  for (int i = 0; i < k; ++i) {
    if ((u -= p[i]) < 0) return ids[i];
  }
  return ids[k - 1];
}

Result<std::vector<int32_t>> Generate(GptModel& model, std::span<const int32_t> prompt,
                                      const SampleOptions& options, Rng& rng) {
  if (prompt.empty()) return MakeError(ErrorCode::kInvalidArgument, "the prompt is empty");
  if (options.tokens < 0 || options.top_k < 0 || options.temperature < 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "sampling options tokens, top_k and temperature must not be negative");
  }
  const GptConfig& c = model.config();
  std::vector<int32_t> context(prompt.begin(), prompt.end());
  std::vector<int32_t> out;
  for (int i = 0; i < options.tokens; ++i) {
    const size_t T = std::min<size_t>(context.size(), c.max_seq_len);
    std::span<const int32_t> window(context.data() + context.size() - T, T);
    COHORT_TRY(model.Forward(window, {}, 1, static_cast<int>(T)));
    const size_t vp = c.padded_vocab_size();
    std::span<const float> last = model.logits().subspan((T - 1) * vp, c.vocab_size);
    const int32_t next = SampleToken(last, options.temperature, options.top_k, rng);
    context.push_back(next);
    out.push_back(next);
  }
  return out;
}

}  // namespace cohort::engine
