// One rank of a collective-communication check, run as a real process inside a Cohort
// job (or under `cohort run`): it finds its place from the environment, rendezvous
// through whatever store that gives (the head's COHORT_RENDEZVOUS in a job), and checks
// all_reduce, all_gather with uneven counts, broadcast and a sub-group all_reduce
// against the exact answers. Prints "comm ok rank R/W via SOURCE" and exits 0 on success.
#include <cstdio>
#include <numeric>
#include <vector>

#include "comm/communicator.h"
#include "comm/launch_env.h"
#include "comm/store.h"

using namespace cohort;

#define CHECK_OK(expr)                                                                    \
  do {                                                                                    \
    auto _r = (expr);                                                                     \
    if (!_r) {                                                                            \
      std::fprintf(stderr, "comm FAILED %s: %s\n", #expr, _r.error().message.c_str());   \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

int main() {
  auto env = comm::DetectLaunchEnv();
  if (!env) {
    std::fprintf(stderr, "comm FAILED env: %s\n", env.error().message.c_str());
    return 2;
  }
  auto store = comm::OpenStore(env->store_url, env->hosts_store(), Millis(30000));
  if (!store) {
    std::fprintf(stderr, "comm FAILED store: %s\n", store.error().message.c_str());
    return 1;
  }
  comm::CommOptions o;
  o.backend = "gloo";
  o.rank = env->rank;
  o.world_size = env->world_size;
  o.store = std::shared_ptr<comm::Store>(std::move(*store));
  o.timeout = Millis(20000);
  auto c = comm::CreateCommunicator(o);
  if (!c) {
    std::fprintf(stderr, "comm FAILED create: %s\n", c.error().message.c_str());
    return 1;
  }
  comm::Communicator& comm = **c;
  const int r = env->rank, w = env->world_size;

  // all_reduce: sum of (rank + 1) * i over ranks = i * w(w+1)/2.
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((r + 1) * i);
  CHECK_OK(comm.AllReduce(v.data(), v.data(), v.size(), comm::DataType::kFloat32, comm::ReduceOp::kSum));
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != static_cast<float>(i * w * (w + 1) / 2)) {
      std::fprintf(stderr, "comm FAILED all_reduce[%zu] = %f\n", i, v[i]);
      return 1;
    }
  }
  // all_gather with uneven counts: rank k contributes k + 1 copies of k.
  std::vector<size_t> counts(w);
  std::iota(counts.begin(), counts.end(), 1);
  std::vector<int64_t> mine(r + 1, r), all(static_cast<size_t>(w * (w + 1) / 2));
  CHECK_OK(comm.AllGather(mine.data(), all.data(), counts, comm::DataType::kInt64));
  size_t pos = 0;
  for (int k = 0; k < w; ++k) {
    for (int j = 0; j <= k; ++j) {
      if (all[pos++] != k) {
        std::fprintf(stderr, "comm FAILED all_gather at %zu\n", pos - 1);
        return 1;
      }
    }
  }
  // broadcast from the last rank.
  int32_t token = r == w - 1 ? 4242 : -1;
  CHECK_OK(comm.Broadcast(&token, 1, comm::DataType::kInt32, w - 1));
  if (token != 4242) {
    std::fprintf(stderr, "comm FAILED broadcast got %d\n", token);
    return 1;
  }
  // A sub-group of the even ranks (when there are at least two ranks).
  if (w >= 2) {
    std::vector<int> members;
    for (int k = r % 2; k < w; k += 2) members.push_back(k);
    auto group = comm.Split(members);
    if (!group) {
      std::fprintf(stderr, "comm FAILED split: %s\n", group.error().message.c_str());
      return 1;
    }
    int64_t x = r, want = 0;
    for (int k : members) want += k;
    CHECK_OK((*group)->AllReduce(&x, &x, 1, comm::DataType::kInt64, comm::ReduceOp::kSum));
    if (x != want) {
      std::fprintf(stderr, "comm FAILED group all_reduce %lld != %lld\n", (long long)x, (long long)want);
      return 1;
    }
  }
  CHECK_OK(comm.Barrier());
  std::printf("comm ok rank %d/%d via %s\n", r, w, env->source.c_str());
  return 0;
}
