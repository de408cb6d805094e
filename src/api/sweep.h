// Sweeps: the `sweep:` section of a job spec, which makes the job an array whose elements
// each get one point of a hyperparameter space.
//
//   sweep:
//     grid:                           # every combination (the last name varies fastest)
//       train.lr: [3.0e-4, 1.0e-3]
//       train.batch_size: [8, 16]
//     parallel: 4                     # at most 4 elements at once (the array's %4)
//     early_stop:                     # optional: asynchronous successive halving (ASHA)
//       milestones: [100, 200, 400]   # steps at which elements are compared
//       keep: 0.5                     # an element below the best half there is stopped
//       min_elements: 3               # compared only once this many have reached it
//
//   sweep:
//     random:                         # `samples` points drawn from ranges or lists
//       samples: 16
//       seed: 7                       # default 0; the same seed draws the same points
//       params:
//         train.lr: {min: 1.0e-5, max: 1.0e-2, scale: log}   # log or linear (default)
//         train.warmup: {min: 0, max: 100, int: true}
//         train.batch: {min: 16, max: 1024, scale: log, int: true}   # whole numbers, log-uniform
//         model.act: [gelu, relu]     # a list: one of its values
//
// Element i's values are a pure function of the section and i (grid: i in mixed radix;
// random: a hash of seed, i and the parameter), so nothing per element is stored. Each
// element gets every value as COHORT_SWEEP_<NAME> (upper case, '.' and '-' as '_') and, when
// its command is `cohort train`, as `--set NAME=VALUE` for each NAME of the form
// section.key. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "api/types.h"
#include "common/error.h"
#include "common/json.h"

namespace cohort::api {

inline constexpr size_t kMaxSweepParams = 32;
inline constexpr size_t kMaxSweepValues = 1000;  // per grid parameter or list

// Checks `j` (the section) and returns its canonical form; kInvalidArgument naming
// sweep.FIELD. The spec's `array` becomes 0..N-1 (with %parallel) in JobSpecFromJson.
Result<json> ValidateSweep(const json& j);

// How many elements the (valid) section makes.
int64_t SweepSize(const json& sweep);

// Element `index`'s values: (name, value as text) in name order.
std::vector<std::pair<std::string, std::string>> SweepValues(const json& sweep, int64_t index);

// The environment variable a parameter's value goes in: COHORT_SWEEP_TRAIN_LR.
std::string SweepEnvName(const std::string& param);

// Whether `command` is `cohort train ...` (the sweep's values go as --set overrides).
bool IsCohortTrain(const std::vector<std::string>& command);

// The array a sweep makes: "0-{N-1}", with "%{parallel}" when set (canonical text).
std::string SweepArray(const json& sweep);

// Element `index` of a sweep: its values (Job::sweep_values, which the task environment
// carries as COHORT_SWEEP_*), and for `cohort train` its command gains --set NAME=VALUE for
// each NAME of the form section.key.
void ApplySweepElement(const json& sweep, int64_t index, JobSpec& spec, std::map<std::string, std::string>& values);

}  // namespace cohort::api
