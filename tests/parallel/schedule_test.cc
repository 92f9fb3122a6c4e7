// Tests of schedules: validation, the simulator, the trace writer, and the executor on CPU workers.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "parallel/communicator.h"
#include "parallel/executor.h"
#include "parallel/schedule.h"
#include "parallel/simulator.h"
#include "parallel/trace.h"
#include "parallel/worker.h"
#include "runtime/base/error.h"
#include "runtime/base/parallel_for.h"
#include "runtime/formats/json.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace {

Instr make(int worker, OpKind kind, const std::string& label, double cost, std::vector<int> deps = {}) {
  Instr i;
  i.worker = worker;
  i.kind = kind;
  i.label = label;
  i.cost_s = cost;
  i.deps = std::move(deps);
  return i;
}

Instr comm(int worker, OpKind kind, int peer, double cost) {
  Instr i = make(worker, kind, kind == OpKind::Send ? "send" : "recv", cost);
  i.peer = peer;
  return i;
}

// Two-stage pipeline over 3 steps: worker 0 computes (a) then sends; worker 1 receives then computes (b).
Schedule pipeline(double a, double xfer, double b) {
  Schedule s(2);
  for (int step = 0; step < 3; ++step) {
    s.add(make(0, OpKind::Forward, "a", a));
    s.add(comm(0, OpKind::Send, 1, xfer));
    s.add(comm(1, OpKind::Recv, 0, 0));
    s.add(make(1, OpKind::ForwardBackward, "b", b));
  }
  return s;
}

TEST(Schedule, ValidateAcceptsPipelinesAndRejectsBrokenSchedules) {
  pipeline(1, 0.5, 2).validate();

  Schedule unpaired(2);
  unpaired.add(comm(0, OpKind::Send, 1, 0));
  EXPECT_THROW(unpaired.validate(), ValueError);

  Schedule cycle(2);  // each worker receives before it sends
  cycle.add(comm(0, OpKind::Recv, 1, 0));
  cycle.add(comm(0, OpKind::Send, 1, 0));
  cycle.add(comm(1, OpKind::Recv, 0, 0));
  cycle.add(comm(1, OpKind::Send, 0, 0));
  try {
    cycle.validate();
    FAIL() << "a receive-receive cycle must be rejected";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
  }

  Schedule bad_dep(1);
  bad_dep.add(make(0, OpKind::Other, "x", 0, {5}));
  EXPECT_THROW(bad_dep.validate(), ValueError);
  EXPECT_THROW(bad_dep.add(make(3, OpKind::Other, "y", 0)), ValueError);
}

TEST(Simulator, PipelineBottleneckAndBusyFractions) {
  // Stage b (2 s) is the bottleneck: after the first a (1 s) and transfer (0.5 s), b runs back to back.
  SimResult r = simulate(pipeline(1, 0.5, 2));
  EXPECT_DOUBLE_EQ(r.makespan_s, 1 + 0.5 + 3 * 2);
  EXPECT_DOUBLE_EQ(r.busy_s[1], 6.0);
  EXPECT_DOUBLE_EQ(r.busy_s[0], 3.0 + 3 * 0.5);
  EXPECT_NEAR(r.busy_fraction(1), 6.0 / 7.5, 1e-12);
}

TEST(Simulator, CollectivesStartTogetherAndCrossWorkerDepsHold) {
  Schedule s(3);
  int a = s.add(make(0, OpKind::Forward, "slow", 3));
  s.add(make(1, OpKind::Forward, "fast", 1));
  for (int w = 0; w < 3; ++w) {
    Instr ar = make(w, OpKind::AllReduce, "ar", w == 2 ? 0.25 : 0.5);
    ar.collective = 7;
    s.add(ar);
  }
  int late = s.add(make(2, OpKind::Other, "after slow", 1, {a}));
  s.validate();
  SimResult r = simulate(s);
  for (const InstrTime& t : r.times) {
    const Instr& i = s.at(t.id);
    if (i.kind == OpKind::AllReduce) {
      EXPECT_DOUBLE_EQ(t.start_s, 3.0);
      EXPECT_DOUBLE_EQ(t.end_s, 3.5);
    }
    if (t.id == late) {
      EXPECT_DOUBLE_EQ(t.start_s, 3.5);  // after the all-reduce on its own lane
    }
  }
}

TEST(Simulator, RendezvousSendsWaitForTheirReceiverAndCrossedSendsDeadlock) {
  // Each worker sends to the other first, then receives: fine when sends are buffered, a deadlock when a send
  // completes only with its receive (as an NCCL send holds its stream).
  Schedule crossed(2);
  crossed.add(comm(0, OpKind::Send, 1, 1));
  crossed.add(comm(1, OpKind::Send, 0, 1));
  crossed.add(comm(0, OpKind::Recv, 1, 0));
  crossed.add(comm(1, OpKind::Recv, 0, 0));
  crossed.validate();
  EXPECT_DOUBLE_EQ(simulate(crossed).makespan_s, 1.0);
  try {
    simulate(crossed, SendModel::Rendezvous);
    ADD_FAILURE() << "crossed rendezvous sends did not deadlock";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlocks"), std::string::npos) << e.what();
  }
  // One order for both: worker 0 sends first, worker 1 receives first. Worker 1 is busy for 3 before it
  // receives: the rendezvous send waits for it, the buffered one does not.
  Schedule ordered(2);
  int busy = ordered.add(make(1, OpKind::Forward, "busy", 3));
  int s0 = ordered.add(comm(0, OpKind::Send, 1, 1));
  int r1 = ordered.add(comm(1, OpKind::Recv, 0, 0));
  int s1 = ordered.add(comm(1, OpKind::Send, 0, 1));
  int r0 = ordered.add(comm(0, OpKind::Recv, 1, 0));
  ordered.validate();
  (void)busy;
  SimResult buffered = simulate(ordered), rendezvous = simulate(ordered, SendModel::Rendezvous);
  EXPECT_DOUBLE_EQ(buffered.times[s0].start_s, 0.0);
  EXPECT_DOUBLE_EQ(buffered.times[r1].end_s, 3.0);
  EXPECT_DOUBLE_EQ(rendezvous.times[s0].start_s, 3.0);
  EXPECT_DOUBLE_EQ(rendezvous.times[r1].end_s, 4.0);
  EXPECT_DOUBLE_EQ(rendezvous.times[s1].start_s, 4.0);
  EXPECT_DOUBLE_EQ(rendezvous.times[r0].end_s, 5.0);
  EXPECT_DOUBLE_EQ(rendezvous.makespan_s, 5.0);
}

TEST(Trace, JsonHasOneEventPerInstructionAndRelayFlows) {
  Schedule s = pipeline(1, 0.5, 2);
  SimResult r = simulate(s);
  Json j = parse_json(trace_json(s, r.times, {"w0", "w1"}));
  int complete = 0, flows = 0, meta = 0;
  for (const Json& e : json_array(json_at(j, "traceEvents"), "traceEvents")) {
    const std::string& ph = json_string(json_at(e, "ph"), "ph");
    if (ph == "X") {
      ++complete;
      EXPECT_GE(json_number(json_at(e, "dur"), "dur"), 0.0);
    } else if (ph == "s" || ph == "f") {
      ++flows;
    } else if (ph == "M") {
      ++meta;
    }
  }
  EXPECT_EQ(complete, static_cast<int>(s.size()));
  EXPECT_EQ(flows, 2 * 3);  // one arrow (two events) per relay
  EXPECT_EQ(meta, 2 * 3);   // process name + 2 thread names per worker
}

// Every field of the events against the schedule and times given (written by hand, not from the writer):
// microseconds from the earliest start, to the nanosecond; labels and worker names with quotes, backslashes
// and control characters come back as they were.
TEST(Trace, EventsCarryTheScheduleTimesAndNames) {
  Schedule s(2);
  Instr a = make(0, OpKind::Forward, "a \"quoted\" \\ label\n\x01", 0);
  a.step = 3;
  a.block = 1;
  a.stage = 0;
  a.micro = 2;
  const int ia = s.add(a);
  const int send = s.add(comm(0, OpKind::Send, 1, 0));
  Instr recv = comm(1, OpKind::Recv, 0, 0);
  recv.bytes = int64_t{1} << 40;
  const int irecv = s.add(recv);
  s.validate();
  const std::vector<InstrTime> times = {
      {ia, 10.0, 10.0000012344}, {send, 10.5, 10.25}, {irecv, 11.25, 12.5}};  // a send ending early: dur 0
  const std::vector<std::string> names = {"w\"0\\", "cpu#1"};
  Json j = parse_json(trace_json(s, times, names));
  EXPECT_EQ(json_string(json_at(j, "displayTimeUnit"), "unit"), "ms");
  const Json& events = json_array(json_at(j, "traceEvents"), "traceEvents");
  std::vector<std::string> process_names;
  std::map<int, const Json*> complete;
  std::vector<const Json*> flows;
  for (const Json& e : events) {
    const std::string& ph = json_string(json_at(e, "ph"), "ph");
    if (ph == "M" && json_string(json_at(e, "name"), "name") == "process_name")
      process_names.push_back(json_string(json_at(json_at(e, "args"), "name"), "args.name"));
    if (ph == "X") complete[static_cast<int>(json_int(json_at(json_at(e, "args"), "id"), "id"))] = &e;
    if (ph == "s" || ph == "f") flows.push_back(&e);
  }
  EXPECT_EQ(process_names, names);
  ASSERT_EQ(complete.size(), 3u);
  const Json& ea = *complete.at(ia);
  EXPECT_EQ(json_string(json_at(ea, "name"), "name"), "a \"quoted\" \\ label\n\x01");
  EXPECT_EQ(json_string(json_at(ea, "cat"), "cat"), op_kind_name(OpKind::Forward));
  EXPECT_EQ(json_int(json_at(ea, "pid"), "pid"), 0);
  EXPECT_EQ(json_int(json_at(ea, "tid"), "tid"), kComputeLane);
  EXPECT_EQ(json_number(json_at(ea, "ts"), "ts"), 0.0);
  EXPECT_NEAR(json_number(json_at(ea, "dur"), "dur"), 1.234, 1e-9);  // 1.2344 us to the nanosecond
  const Json& args = json_at(ea, "args");
  EXPECT_EQ(json_int(json_at(args, "step"), "step"), 3);
  EXPECT_EQ(json_int(json_at(args, "block"), "block"), 1);
  EXPECT_EQ(json_int(json_at(args, "stage"), "stage"), 0);
  EXPECT_EQ(json_int(json_at(args, "micro"), "micro"), 2);
  EXPECT_EQ(json_number(json_at(*complete.at(send), "dur"), "dur"), 0.0);
  EXPECT_NEAR(json_number(json_at(*complete.at(irecv), "ts"), "ts"), 1.25e6, 1e-6);
  EXPECT_NEAR(json_number(json_at(*complete.at(irecv), "dur"), "dur"), 1.25e6, 1e-6);
  EXPECT_EQ(json_int(json_at(json_at(*complete.at(irecv), "args"), "bytes"), "bytes"), int64_t{1} << 40);
  EXPECT_EQ(json_int(json_at(*complete.at(irecv), "pid"), "pid"), 1);
  // The relay: an arrow from the send's start on worker 0 to the receive's end on worker 1.
  ASSERT_EQ(flows.size(), 2u);
  const Json& from = json_string(json_at(*flows[0], "ph"), "ph") == "s" ? *flows[0] : *flows[1];
  const Json& to = &from == flows[0] ? *flows[1] : *flows[0];
  EXPECT_EQ(json_int(json_at(from, "pid"), "pid"), 0);
  EXPECT_NEAR(json_number(json_at(from, "ts"), "ts"), 0.5e6, 1e-6);
  EXPECT_EQ(json_int(json_at(to, "pid"), "pid"), 1);
  EXPECT_NEAR(json_number(json_at(to, "ts"), "ts"), 2.5e6, 1e-6);
  EXPECT_EQ(json_string(json_at(to, "bp"), "bp"), "e");
  EXPECT_EQ(json_int(json_at(from, "id"), "id"), json_int(json_at(to, "id"), "id"));
}

TEST(Executor, RunsProgramsInOrderWithCrossWorkerAndCrossLaneDependencies) {
  auto workers = make_workers("cpu:2");
  auto comms = make_local_group(workers);
  Schedule s(2);
  int w0_first = s.add(make(0, OpKind::Forward, "w0 first", 0));
  s.add(make(1, OpKind::Forward, "w1 needs w0", 0, {w0_first}));
  Instr bg = make(0, OpKind::Send, "w0 comm lane", 0);
  bg.lane = kCommLane;
  bg.kind = OpKind::Other;
  int bg_id = s.add(bg);
  s.add(make(0, OpKind::Update, "w0 after comm lane", 0, {bg_id}));
  s.validate();

  std::mutex mu;
  std::vector<std::string> log;
  std::vector<std::vector<InstrTime>> times(2);
  run_on_workers(workers, [&](Worker& w) {
    Executor ex(s, w, comms[w.rank].get());
    ex.run([&](const Instr& i) {
      if (i.label == "w0 first") std::this_thread::sleep_for(std::chrono::milliseconds(30));
      std::lock_guard<std::mutex> lock(mu);
      log.push_back(i.label);
    });
    times[w.rank] = ex.timings();
  });
  ASSERT_EQ(log.size(), 4u);
  auto pos = [&](const std::string& l) { return std::find(log.begin(), log.end(), l) - log.begin(); };
  EXPECT_LT(pos("w0 first"), pos("w1 needs w0"));
  EXPECT_LT(pos("w0 comm lane"), pos("w0 after comm lane"));
  // The timings agree: worker 1's instruction started after worker 0's ended.
  double w0_end = 0, w1_start = 0;
  for (auto& t : times[0])
    if (t.id == w0_first) w0_end = t.end_s;
  for (auto& t : times[1]) w1_start = t.start_s;
  EXPECT_GE(w1_start, w0_end);
}

// The comm lane's thread works as the compute lane's does: grad mode, memory category and scope, device and
// stream, intra-op threads, and the run its peers' failures are seen through.
TEST(Executor, TheCommLaneRunsWithTheCallingThreadsState) {
  auto workers = make_workers("cpu:1");
  Schedule s(1);
  const int first = s.add(make(0, OpKind::Forward, "compute", 0));
  Instr relay = make(0, OpKind::Other, "comm lane", 0, {first});
  relay.lane = kCommLane;
  const int second = s.add(relay);
  s.validate();
  struct Seen {
    std::thread::id thread;
    bool grad = true;
    MemoryCategory category = MemoryCategory::Activations;
    std::vector<std::shared_ptr<MemoryTracker>> scopes;
    Device device;
    int threads = 0;
    bool in_run = false;
  };
  std::vector<Seen> seen(2);
  run_on_workers(workers, [&](Worker& w) {
    autograd::NoGradGuard no_grad;
    MemoryCategoryGuard category(MemoryCategory::OptimizerState);
    Executor ex(s, w, nullptr);
    ex.run([&](const Instr& i) {
      seen[i.id] = Seen{std::this_thread::get_id(),    autograd::grad_enabled(), current_memory_category(),
                        current_memory_scopes(),       current_device(),         intra_op_threads(),
                        current_run_state() != nullptr};
    });
  });
  const Seen& lane = seen[second];
  EXPECT_NE(lane.thread, seen[first].thread) << "the comm lane has a thread of its own";
  EXPECT_FALSE(lane.grad);
  EXPECT_EQ(lane.category, MemoryCategory::OptimizerState);
  ASSERT_EQ(lane.scopes.size(), 1u);
  EXPECT_EQ(lane.scopes[0], workers[0].memory);
  EXPECT_EQ(lane.device, workers[0].device);
  EXPECT_EQ(lane.threads, 1);
  EXPECT_TRUE(lane.in_run);
}

TEST(Executor, OneIssuerRunsBothLanesOnTheCallingThreadInIdOrder) {
  auto workers = make_workers("cpu:2");
  auto comms = make_local_group(workers);
  // Worker 0: compute, comm-lane send, compute, comm-lane send; worker 1 receives both.
  Schedule s(2);
  Generator rng(tandem::testing::fresh_seed());
  std::vector<float> values = {static_cast<float>(rng.uniform()), static_cast<float>(rng.uniform())};
  for (int k = 0; k < 2; ++k) {
    int f = s.add(make(0, OpKind::Forward, "f" + std::to_string(k), 0));
    Instr send = comm(0, OpKind::Send, 1, 0);
    send.lane = kCommLane;
    send.deps = {f};
    s.add(send);
    s.add(comm(1, OpKind::Recv, 0, 0));
  }
  s.validate();
  std::vector<int> order;
  std::vector<float> got;
  std::atomic<bool> other_thread{false};
  run_on_workers(workers, [&](Worker& w) {
    Executor ex(s, w, comms[w.rank].get(), /*one_issuer=*/true);
    const std::thread::id me = std::this_thread::get_id();
    int sent = 0;
    ex.run([&](const Instr& i) {
      if (std::this_thread::get_id() != me) other_thread = true;
      if (i.worker == 0) order.push_back(i.id);
      if (i.kind == OpKind::Send) comms[w.rank]->send(from_vector<float>({values[sent++]}, {1}), i.peer);
      if (i.kind == OpKind::Recv) {
        Tensor t = empty({1});
        comms[w.rank]->recv(t, i.peer);
        got.push_back(t.item<float>());
      }
    });
  });
  EXPECT_FALSE(other_thread) << "an instruction ran on another thread than the worker's";
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
  EXPECT_EQ(order.size(), 4u);
  EXPECT_EQ(got, values);

  // A compute-lane instruction that waits for a later comm-lane one cannot be issued in id order.
  Schedule bad(1);
  Instr later = make(0, OpKind::Other, "later", 0);
  bad.add(make(0, OpKind::Forward, "needs later", 0, {1}));
  later.lane = kCommLane;
  bad.add(later);
  bad.validate();
  Worker& w0 = workers[0];
  EXPECT_NO_THROW(Executor ex(bad, w0, nullptr));
  try {
    Executor ex(bad, w0, nullptr, /*one_issuer=*/true);
    ADD_FAILURE() << "no error for a dependency on a later instruction";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("depends on the later"), std::string::npos) << e.what();
  }
}

TEST(Executor, DeclaresTheOrderOfItsLanesAndWorkersToTheStreamChecker) {
  tandem::testing::StreamCheckOn on;
  auto workers = make_workers("cpu:2");
  auto comms = make_local_group(workers);
  Generator gen(tandem::testing::fresh_seed());
  Tensor x = empty({32}), y = empty({32}), z = empty({32});  // allocated by the host
  // Worker 0 writes x on its compute lane, then reads it on its comm lane; worker 1 reads it too.
  auto schedule = [](bool with_deps) {
    Schedule s(2);
    const int write = s.add(make(0, OpKind::Forward, "write x", 0));
    Instr read = make(0, OpKind::Other, "read x on the comm lane", 0);
    read.lane = kCommLane;
    if (with_deps) read.deps = {write};
    s.add(read);
    if (with_deps) s.add(make(1, OpKind::Forward, "read x on worker 1", 0, {write}));
    s.validate();
    return s;
  };
  // One issuing thread per worker: without a dependency the lanes still run one after the other on the host,
  // so only the declared order is missing.
  auto run = [&](const Schedule& s) {
    run_on_workers(workers, [&](Worker& w) {
      Executor ex(s, w, comms[w.rank].get(), /*one_issuer=*/true);
      ex.run([&](const Instr& i) {
        if (i.label == "write x") normal_(x, 0, 1, gen);
        if (i.label == "read x on the comm lane") y.copy_(mul(x, 2.0));
        if (i.label == "read x on worker 1") z.copy_(x);
      });
    });
  };
  run(schedule(true));
  tandem::testing::expect_bitwise_equal(y, add(x, x));
  tandem::testing::expect_bitwise_equal(z, x);
  try {
    run(schedule(false));
    ADD_FAILURE() << "the comm lane's unordered read of x was not reported";
  } catch (const StreamOrderError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("read after write"), std::string::npos) << what;
    EXPECT_NE(what.find("'read x on the comm lane'"), std::string::npos) << what;
    EXPECT_NE(what.find("'write x'"), std::string::npos) << what;
  }
}

// A dependency on another worker's comm-lane instruction travels as a signal message sent from that lane. The
// signal tensor is filled before the lanes start; the comm lane's send must be ordered after that fill even
// when the caller's current stream is not the worker's compute stream.
TEST(Executor, SignalsFromTheCommLaneAreOrderedAfterTheirFill) {
  tandem::testing::StreamCheckOn on;
  auto workers = make_workers("cpu:2");
  auto comms = make_local_group(workers);
  Schedule s(2);
  Instr c0 = make(0, OpKind::Other, "worker 0 comm lane", 0);
  c0.lane = kCommLane;
  const int c0_id = s.add(c0);
  s.add(make(1, OpKind::Forward, "worker 1 after it", 0, {c0_id}));
  s.validate();
  std::atomic<int> ran{0};
  run_on_workers(workers, [&](Worker& w) {
    StreamGuard side(Stream::create(Device::cpu()));  // the caller works on a stream of its own
    Executor ex(s, w, comms[w.rank].get());
    ex.run([&](const Instr&) { ++ran; });
  });
  EXPECT_EQ(ran.load(), 2);
}

TEST(Executor, AFailingInstructionSurfacesAsItsError) {
  auto workers = make_workers("cpu:1");
  Schedule s(1);
  s.add(make(0, OpKind::Forward, "boom", 0));
  EXPECT_THROW(run_on_workers(workers,
                              [&](Worker& w) {
                                Executor ex(s, w, nullptr);
                                ex.run([](const Instr&) { TD_THROW(ShapeError, "bad shape in the step"); });
                              }),
               ShapeError);
}

TEST(Executor, AFailureDoesNotLeaveACommLaneOrAPeerBlocked) {
  // Worker 0's compute lane fails before the instruction worker 1 waits for; worker 0's comm lane waits for
  // a message worker 1 only sends after that. Both must stop with the original error, not hang.
  auto workers = make_workers("cpu:2");
  auto comms = make_local_group(workers);
  Schedule s(2);
  int boom = s.add(make(0, OpKind::Forward, "boom", 0));
  Instr send = comm(1, OpKind::Send, 0, 0);
  send.deps = {boom};
  s.add(send);
  Instr recv = comm(0, OpKind::Recv, 1, 0);
  recv.lane = kCommLane;
  s.add(recv);
  s.validate();
  Tensor payload = zeros({1});
  EXPECT_THROW(run_on_workers(workers,
                              [&](Worker& w) {
                                Executor ex(s, w, comms[w.rank].get());
                                ex.run([&](const Instr& i) {
                                  if (i.label == "boom") TD_THROW(ShapeError, "the step failed");
                                  Tensor t = zeros({1});
                                  if (i.kind == OpKind::Send) comms[w.rank]->send(payload, i.peer);
                                  if (i.kind == OpKind::Recv) comms[w.rank]->recv(t, i.peer);
                                });
                              }),
               ShapeError);
}

}  // namespace
}  // namespace parallel
}  // namespace tandem
