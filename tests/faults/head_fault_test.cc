// kill -9 of the head under a running 2-node training job. Agents keep their tasks while
// the head refuses connections (--head-down-grace); the restarted head reloads its state
// and the job completes with a loss record that has every step exactly once.
#include <signal.h>

#include <gtest/gtest.h>

#include "fault_cluster.h"

namespace cohort::testing {
namespace {

TEST(HeadFault, KillHeadAndRestartTheJobCompletes) {
  FaultCluster c;
  TrainJob t;
  ASSERT_NO_FATAL_FAILURE(StartTraining(c, t, TrainJobSpec{400, 10, "", 3}));
  const int64_t recorded = LastRecordedStep(t.record);
  c.KillHead(SIGKILL);
  // Training goes on without the head (the agents keep their tasks while it refuses
  // connections): another checkpoint lands before the head is back.
  ASSERT_NO_FATAL_FAILURE(WaitForRecordedStep(c, t, recorded + t.spec.checkpoint_every));
  ASSERT_NO_FATAL_FAILURE(c.StartHead());
  ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(3));
  json done = c.WaitForState(t.id, "SUCCEEDED", std::chrono::seconds(120));
  auto first = ExpectConsistentRecord(t, 1, recorded);
  for (const auto& [attempt, step] : first) {
    if (attempt > 0) ExpectResumedFrom(c, t, attempt, step - 1);
  }
  std::printf("attempts after the head's restart: %d\n", done.value("attempt", -1) + 1);
}

}  // namespace
}  // namespace cohort::testing
