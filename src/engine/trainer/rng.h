// The trainer's generator (text sampling) is the engine's Xoshiro256 (engine/rng.h); its
// state is saved in checkpoints so that a resumed run samples the same text.
#pragma once

#include "engine/rng.h"

namespace cohort::engine {

using Rng = Xoshiro256;

}  // namespace cohort::engine
