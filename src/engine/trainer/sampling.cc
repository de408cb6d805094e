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

Result<std::vector<int32_t>> Generate(const NextTokenLogitsFn& next_logits, int max_window,
                                      std::span<const int32_t> prompt,
                                      const SampleOptions& options, Rng& rng) {
  if (prompt.empty()) return MakeError(ErrorCode::kInvalidArgument, "the prompt is empty");
  if (options.tokens < 0 || options.top_k < 0 || options.temperature < 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "sampling options tokens, top_k and temperature must not be negative");
  }
  if (max_window < 1) {
    return Errorf(ErrorCode::kInvalidArgument, "max_window must be >= 1, got {}", max_window);
  }
  std::vector<int32_t> context(prompt.begin(), prompt.end());
  std::vector<int32_t> out;
  for (int i = 0; i < options.tokens; ++i) {
    const size_t T = std::min<size_t>(context.size(), static_cast<size_t>(max_window));
    std::span<const int32_t> window(context.data() + context.size() - T, T);
    const std::vector<float> logits = COHORT_TRY(next_logits(window));
    const int32_t next = SampleToken(logits, options.temperature, options.top_k, rng);
    context.push_back(next);
    out.push_back(next);
  }
  return out;
}

Result<std::vector<int32_t>> Generate(GptModel& model, std::span<const int32_t> prompt,
                                      const SampleOptions& options, Rng& rng) {
  const GptConfig& c = model.config();
  auto next = [&model, &c](std::span<const int32_t> window) -> Result<std::vector<float>> {
    const int T = static_cast<int>(window.size());
    COHORT_TRY(model.Forward(window, {}, 1, T));
    const size_t vp = c.padded_vocab_size();
    std::span<const float> last = model.logits().subspan((T - 1) * vp, c.vocab_size);
    return std::vector<float>(last.begin(), last.end());
  };
  return Generate(next, c.max_seq_len, prompt, options, rng);
}

}  // namespace cohort::engine
