// Termination signals for daemons: block SIGINT/SIGTERM (and SIGPIPE) in every thread,
// then have one thread wait for them synchronously. Call BlockTerminationSignals first
// thing in main, before any thread starts, so threads inherit the mask.
#pragma once

namespace cohort {

void BlockTerminationSignals();
// Blocks until SIGINT or SIGTERM arrives; returns the signal number.
int WaitForTerminationSignal();

}  // namespace cohort
