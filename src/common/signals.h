// Termination signals for daemons: block SIGINT/SIGTERM (and SIGPIPE) in every thread,
// then have one thread wait for them synchronously. Call BlockTerminationSignals first
// thing in main, before any thread starts, so threads inherit the mask.
#pragma once

#include "common/clock.h"

namespace cohort {

void BlockTerminationSignals();
// Blocks until SIGINT or SIGTERM arrives; returns the signal number.
int WaitForTerminationSignal();
// Waits up to `timeout` for SIGINT or SIGTERM (blocked by BlockTerminationSignals);
// returns the signal number, or 0 if none came.
int PollTerminationSignal(Millis timeout);

}  // namespace cohort
