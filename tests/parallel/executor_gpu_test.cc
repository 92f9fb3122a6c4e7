// The executor on a GPU worker: instruction timings from CUDA events of both lanes. Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <thread>
#include <vector>

#include "parallel/executor.h"
#include "parallel/schedule.h"
#include "parallel/worker.h"
#include "runtime/base/cuda_check.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace {

// Holds the stream that runs it for 30 ms: work still queued when the host asks for timings.
void CUDART_CB slow(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }

TEST(ExecutorGpu, TimingsWaitForTheWorkOfBothLanes) {
  TD_REQUIRE_GPU();
  std::vector<Worker> workers = make_workers("cuda:0");
  Schedule s(1);
  Instr first;
  first.label = "compute";
  const int a = s.add(first);
  Instr relay;
  relay.label = "comm lane";
  relay.lane = kCommLane;
  relay.deps = {a};
  const int b = s.add(relay);
  Instr last;
  last.label = "compute again";
  const int c = s.add(last);
  s.validate();
  std::vector<InstrTime> times;
  run_on_workers(workers, [&](Worker& w) {
    Executor ex(s, w, nullptr);
    ex.run([&](const Instr&) { TD_CUDA_CHECK(cudaLaunchHostFunc(current_stream(w.device).cuda(), slow, nullptr)); });
    times = ex.timings();  // the lanes' work is still queued: timings must wait for it
  });
  ASSERT_EQ(times.size(), 3u);
  std::vector<InstrTime> by_id(3);
  for (const InstrTime& t : times) by_id.at(static_cast<size_t>(t.id)) = t;
  for (const InstrTime& t : by_id) EXPECT_GE(t.end_s - t.start_s, 0.025) << "instruction " << t.id;
  EXPECT_GE(by_id[b].start_s, by_id[a].end_s - 1e-3) << "the comm lane waited for its dependency";
  EXPECT_GE(by_id[c].start_s, by_id[a].end_s - 1e-3) << "the compute lane runs in order";
}

}  // namespace
}  // namespace parallel
}  // namespace tandem
