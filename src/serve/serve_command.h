// `cohort serve --model PATH`: runs one inference replica (InferenceServer) until SIGINT
// or SIGTERM. Inside a Cohort job (a service replica, COHORT_JOB_ID set) without --port it
// listens on the job contract's MASTER_PORT on every interface, which is where the head's
// gateway reaches it. Prints "serving NAME (...) on http://HOST:PORT" once listening.
// Exit codes as the CLI's: 0 stopped by a signal, 1 failure, 2 bad usage or model.
//
// `cohort serve deploy|scale|ls|rm` are the control plane's (src/cli/serve.cc): RunCli
// hands only the other forms to this command. Runs on the main thread.
#pragma once

#include "common/external_command.h"

namespace cohort::serve {

ExternalCommand ServeCommand();

}  // namespace cohort::serve
