#include "api/sweep.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "api/job_array.h"

namespace cohort::api {

namespace {

bool ValidParamName(const std::string& name) {
  if (name.empty() || name.size() > 64 || !std::isalpha(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

// A scalar value as text: strings as they are, numbers as the shortest text that reads back.
std::string ValueText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  return fmt::format("{}", v.get<double>());
}

Result<json> ValueList(const json& list, const std::string& field) {
  if (!list.is_array() || list.empty() || list.size() > kMaxSweepValues) {
    return FieldError(field, "must be a list of 1-{} values", kMaxSweepValues);
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const json& v = list[i];
    if (!(v.is_string() || v.is_number() || v.is_boolean())) {
      return FieldError(fmt::format("{}[{}]", field, i), "must be a number, a string or true/false, got {}",
                        JsonTypeName(v));
    }
    if (v.is_number_float() && !std::isfinite(v.get<double>())) {
      return FieldError(fmt::format("{}[{}]", field, i), "must be finite");
    }
    if (v.is_string() && (v.get<std::string>().size() > 1024 || v.get<std::string>().find('\0') != std::string::npos)) {
      return FieldError(fmt::format("{}[{}]", field, i), "must be at most 1024 bytes with no NUL byte");
    }
  }
  return list;
}

// A range {min, max, scale: linear|log, int: bool}, canonical.
Result<json> Range(const json& j, const std::string& field) {
  auto r = COHORT_TRY(ObjectReader::Open(j, field));
  const double lo = COHORT_TRY(r.Double("min", std::nullopt, -1e300, 1e300));
  const double hi = COHORT_TRY(r.Double("max", std::nullopt, -1e300, 1e300));
  const std::string scale = COHORT_TRY(r.String("scale", "linear"));
  const bool integer = COHORT_TRY(r.Bool("int", false));
  COHORT_TRY_VOID(r.Finish());
  if (!(hi >= lo)) return FieldError(field + ".max", "must be at least min ({}), got {}", lo, hi);
  if (scale != "linear" && scale != "log") return FieldError(field + ".scale", "must be linear or log, got '{}'", scale);
  if (scale == "log" && lo <= 0) return FieldError(field + ".min", "a log scale needs min > 0, got {}", lo);
  if (integer && std::ceil(lo) > std::floor(hi)) {
    return FieldError(field, "with int: true holds no whole number from {} to {}", lo, hi);
  }
  return json{{"min", lo}, {"max", hi}, {"scale", scale}, {"int", integer}};
}

// sweep.early_stop: {milestones: [steps, ascending], keep: 0 < f < 1, min_elements: N}.
Result<json> EarlyStop(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j, "sweep.early_stop"));
  const json* milestones = r.Raw("milestones");
  const double keep = COHORT_TRY(r.Double("keep", 0.5, 0.01, 0.99));
  const int64_t min_elements = COHORT_TRY(r.Int("min_elements", 3, 2, kMaxArrayElements));
  COHORT_TRY_VOID(r.Finish());
  if (!milestones || !milestones->is_array() || milestones->empty() || milestones->size() > 32) {
    return FieldError("sweep.early_stop.milestones", "must list 1-32 steps, ascending");
  }
  int64_t last = 0;
  for (const auto& m : *milestones) {
    if (!m.is_number_integer() || m.get<int64_t>() <= last) {
      return FieldError("sweep.early_stop.milestones", "must be whole steps above 0, ascending, got {}", m.dump());
    }
    last = m.get<int64_t>();
  }
  return json{{"milestones", *milestones}, {"keep", keep}, {"min_elements", min_elements}};
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) for (seed, index, parameter).
double Uniform(int64_t seed, int64_t index, size_t param) {
  uint64_t h = SplitMix(static_cast<uint64_t>(seed));
  h = SplitMix(h ^ static_cast<uint64_t>(index));
  h = SplitMix(h ^ static_cast<uint64_t>(param));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

}  // namespace

Result<json> ValidateSweep(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j, "sweep"));
  const json* grid = r.Raw("grid");
  const json* random = r.Raw("random");
  const int64_t parallel = COHORT_TRY(r.Int("parallel", 0, 0, kMaxArrayElements));
  const json* early = r.Raw("early_stop");
  COHORT_TRY_VOID(r.Finish());
  if ((grid == nullptr) == (random == nullptr)) return FieldError("sweep", "needs exactly one of grid or random");
  json out = json::object();
  if (parallel > 0) out["parallel"] = parallel;
  if (early && !early->is_null()) out["early_stop"] = COHORT_TRY(EarlyStop(*early));
  if (grid) {
    if (!grid->is_object() || grid->empty() || grid->size() > kMaxSweepParams) {
      return FieldError("sweep.grid", "must map 1-{} parameter names to lists of values", kMaxSweepParams);
    }
    int64_t size = 1;
    json g = json::object();
    for (const auto& [name, values] : grid->items()) {
      if (!ValidParamName(name)) {
        return FieldError("sweep.grid." + name.substr(0, 64),
                          "a parameter name is 1-64 characters of letters, digits, '.', '_' or '-', starting with a "
                          "letter (train.lr)");
      }
      g[name] = COHORT_TRY(ValueList(values, "sweep.grid." + name));
      size *= static_cast<int64_t>(values.size());
      if (size > kMaxArrayElements) return FieldError("sweep.grid", "makes more than {} elements", kMaxArrayElements);
    }
    out["grid"] = std::move(g);
    return out;
  }
  auto rr = COHORT_TRY(ObjectReader::Open(*random, "sweep.random"));
  const int64_t samples = COHORT_TRY(rr.Int("samples", std::nullopt, 1, kMaxArrayElements));
  const int64_t seed = COHORT_TRY(rr.Int("seed", 0, 0, INT64_MAX));
  const json* params = rr.Raw("params");
  COHORT_TRY_VOID(rr.Finish());
  if (params == nullptr || !params->is_object() || params->empty() || params->size() > kMaxSweepParams) {
    return FieldError("sweep.random.params", "must map 1-{} parameter names to ranges or lists", kMaxSweepParams);
  }
  json p = json::object();
  for (const auto& [name, spec] : params->items()) {
    const std::string field = "sweep.random.params." + name.substr(0, 64);
    if (!ValidParamName(name)) {
      return FieldError(field, "a parameter name is 1-64 characters of letters, digits, '.', '_' or '-', starting "
                               "with a letter (train.lr)");
    }
    p[name] = spec.is_array() ? COHORT_TRY(ValueList(spec, field)) : COHORT_TRY(Range(spec, field));
  }
  out["random"] = {{"samples", samples}, {"seed", seed}, {"params", std::move(p)}};
  return out;
}

int64_t SweepSize(const json& sweep) {
  if (sweep.contains("grid")) {
    int64_t n = 1;
    for (const auto& [name, values] : sweep["grid"].items()) n *= static_cast<int64_t>(values.size());
    return n;
  }
  if (sweep.contains("random")) return sweep["random"].value("samples", int64_t{0});
  return 0;
}

std::vector<std::pair<std::string, std::string>> SweepValues(const json& sweep, int64_t index) {
  std::vector<std::pair<std::string, std::string>> out;
  if (sweep.contains("grid")) {
    const json& grid = sweep["grid"];
    std::vector<std::pair<std::string, const json*>> params;
    for (const auto& [name, values] : grid.items()) params.emplace_back(name, &values);
    out.resize(params.size());
    int64_t rest = index;
    for (size_t k = params.size(); k-- > 0;) {  // the last name varies fastest
      const json& values = *params[k].second;
      const auto n = static_cast<int64_t>(values.size());
      out[k] = {params[k].first, ValueText(values[static_cast<size_t>(rest % n)])};
      rest /= n;
    }
    return out;
  }
  const json& random = sweep["random"];
  const int64_t seed = random.value("seed", int64_t{0});
  size_t k = 0;
  for (const auto& [name, spec] : random["params"].items()) {
    const double u = Uniform(seed, index, k++);
    if (spec.is_array()) {
      const auto n = static_cast<double>(spec.size());
      out.emplace_back(name, ValueText(spec[static_cast<size_t>(std::min(u * n, n - 1))]));
      continue;
    }
    const double lo = spec["min"].get<double>(), hi = spec["max"].get<double>();
    double v = spec["scale"] == "log" ? std::exp(std::log(lo) + u * (std::log(hi) - std::log(lo))) : lo + u * (hi - lo);
    if (spec.value("int", false)) {
      // The integers a..b: on a linear scale each equally likely; on a log scale k as likely
      // as a log-uniform draw from [a, b + 1) lands in [k, k + 1) (Optuna's int with log).
      const double a = std::ceil(lo), b = std::floor(hi);
      v = spec["scale"] == "log" ? std::exp(std::log(a) + u * (std::log(b + 1) - std::log(a))) : a + u * (b - a + 1);
      out.emplace_back(name, std::to_string(static_cast<int64_t>(std::clamp(std::floor(v), a, b))));
    } else {
      out.emplace_back(name, fmt::format("{:.6g}", v));
    }
  }
  return out;
}

std::string SweepEnvName(const std::string& param) {
  std::string out = "COHORT_SWEEP_";
  for (char c : param) {
    out += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::toupper(static_cast<unsigned char>(c)))
                                                        : '_';
  }
  return out;
}

bool IsCohortTrain(const std::vector<std::string>& command) {
  if (command.size() < 2 || command[1] != "train") return false;
  const std::string& prog = command[0];
  const std::string base = prog.substr(prog.find_last_of('/') + 1);
  return base == "cohort";
}

std::string SweepArray(const json& sweep) {
  ArraySpec a;
  a.indices = *ArrayIndexSet::Parse(fmt::format("0-{}", std::max<int64_t>(SweepSize(sweep), 1) - 1), "array");
  a.throttle = static_cast<int>(sweep.value("parallel", int64_t{0}));
  return a.ToString();
}

void ApplySweepElement(const json& sweep, int64_t index, JobSpec& spec, std::map<std::string, std::string>& values) {
  if (sweep.is_null()) return;
  const bool train = IsCohortTrain(spec.command);
  for (auto& [name, value] : SweepValues(sweep, index)) {
    if (train && name.find('.') != std::string::npos) {
      spec.command.push_back("--set");
      spec.command.push_back(name + "=" + value);
    }
    values[name] = std::move(value);
  }
}

}  // namespace cohort::api
