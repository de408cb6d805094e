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

// Sets SIGPIPE to SIG_IGN when it is still at its default action (leaves a handler the
// program installed alone). For libraries that write to sockets without MSG_NOSIGNAL
// (Gloo's tcp transport uses writev): a peer that died must become an error, not end
// this process.
void IgnoreSigpipeIfDefault();

}  // namespace cohort
