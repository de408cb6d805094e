// cohort: parse the subcommand and dispatch (src/cli). The data plane's commands (src/comm
// benchmarks, src/engine training, src/serve inference replicas) run in the data-plane module, loaded only when one of
// them is asked for (data_plane_module.h): the CLI library and this binary never link the
// data plane.
#include "apps/cohort/data_plane_loader.h"
#include "cli/cli.h"
#include "common/tls_buffers.h"

// OpenSSL's record buffers come from a pool (common/tls_buffers.h).
COHORT_TLS_RECORD_BUFFER_POOL_AT_START();

namespace {

cohort::ExternalCommand DataPlaneCommand(const char* name, const char* description) {
  return {name, description, [name](int argc, char** argv) { return cohort::RunDataPlaneCommand(name, argc, argv); }};
}

}  // namespace

int main(int argc, char** argv) {
  // Names and --help lines of the module's commands (the module's own ExternalCommands;
  // DataPlaneModule.ServesEveryCommandTheBinaryLists checks they agree).
  const cohort::ExternalCommand external[] = {
      DataPlaneCommand("bench", "Data-plane benchmarks (allreduce: nccl-tests style, against Gloo's ring)"),
      DataPlaneCommand("train", "Train a GPT-2-style model on CPU or GPU ranks (data parallel, checkpoints)"),
      DataPlaneCommand("tokenize", "Tokenize text into token shards for `cohort train`"),
      // `cohort serve --model PATH` (one replica); `cohort serve deploy|scale|ls|rm` are the
      // CLI's own (cli/serve.cc) and never load the module.
      DataPlaneCommand("serve",
                       "Serve a GPT model over an OpenAI-compatible API (deploy, scale, ls, rm: services on "
                       "the cluster)"),
  };
  return cohort::cli::RunCli(argc, argv, external);
}
