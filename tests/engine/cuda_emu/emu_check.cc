// Fails the test process when the emulator saw a shared-memory hazard: a race between
// barriers, an access to a word with a cp.async in flight, a read of never-written
// (poisoned) shared memory, a misaligned or out-of-range access, or cp.async work left
// unretired at the end of a block. The kernels' numbers are checked by the test itself.
#include <gtest/gtest.h>

#include "emu.h"

namespace {

class EmulatorHazards : public ::testing::Environment {
 public:
  void TearDown() override {
    const auto& s = emu::g_stats;
    EXPECT_EQ(s.races.load(), 0) << "shared-memory races (see the messages above)";
    EXPECT_EQ(s.pending_access.load(), 0) << "accesses to words with a cp.async in flight";
    EXPECT_EQ(s.poison_reads.load(), 0) << "reads of shared memory nothing wrote";
    EXPECT_EQ(s.misaligned.load(), 0) << "misaligned accesses";
    EXPECT_EQ(s.oob.load(), 0) << "out-of-range shared-memory accesses";
    EXPECT_EQ(s.leftover_async.load(), 0) << "cp.async copies never waited for";
  }
};

const auto* const kRegistered = ::testing::AddGlobalTestEnvironment(new EmulatorHazards);

}  // namespace
