// Accounting views of cyclic-DP timelines: stored stage activations over time (the unit-time model, and the
// same curve with bytes), measured activation bytes aligned on a timeline, and communication over time.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/cyclic/timeline.h"
#include "parallel/executor.h"
#include "runtime/memory/memory.h"

namespace tandem {
namespace parallel {
namespace cyclic {

// A step function: value v[i] on [t[i], t[i + 1]) (the last one onwards); 0 before t[0].
struct Curve {
  std::vector<double> t, v;
  double peak() const;
  double at(double time) const;
  // Time-average over [from, to).
  double mean(double from, double to) const;
  void push(double time, double value);  // appends (replaces the last point at the same time)
};
// The pointwise sum of step functions.
Curve sum_curves(const std::vector<Curve>& curves);

struct ActivationProfile {
  std::vector<Curve> per_worker;
  Curve total;
};

// The model of the notes: the activations of (round, micro, stage) are stored from the start of that stage's
// forward to the end of its backward, on the worker that runs them, and weigh stage_bytes[stage] (1 per stage:
// a count of stored stage activations). `times` are instruction times by id (simulate()'s, or executed ones).
// With `transient` (forward_extra and backward_extra bytes per stage, or empty), each forward and backward also
// holds that much more while it runs (its temporaries, the gradients flowing through a backward): what a
// measurement of the peak during each instruction sees on top of the stored activations.
struct Transients {
  std::vector<double> forward_extra, backward_extra;
};
ActivationProfile stored_activations(const Timeline& timeline, const std::vector<InstrTime>& times,
                                     const std::vector<double>& stage_bytes, const Transients& transient = {});

// Measured activation bytes (each worker's Activations samples, starting from `base_bytes`) placed on the
// timeline's simulated time axis: during each compute instruction a worker holds the peak it reached while
// executing it, between instructions what it held at the end of the previous one. Summing the workers on this
// common axis gives the total the timeline implies, free of how the host happened to interleave the threads.
ActivationProfile aligned_activations(const Timeline& timeline, const std::vector<InstrTime>& simulated,
                                      const std::vector<std::vector<InstrTime>>& executed,
                                      const std::vector<std::vector<MemorySample>>& samples,
                                      const std::vector<int64_t>& base_bytes);

// Activation bytes of each worker in wall-clock time (from its samples) and their sum.
ActivationProfile wall_clock_activations(const std::vector<std::vector<MemorySample>>& samples,
                                         const std::vector<int64_t>& base_bytes);

// Bytes moved per bin of `bin_s` from time `origin`, summed over the records of all workers.
std::vector<double> comm_bytes_per_bin(const std::vector<std::vector<CommRecord>>& records, double origin, double bin_s,
                                       int bins);
// The same for a timeline: each Send and AllReduce's bytes at its (simulated) start, summed over workers.
std::vector<double> scheduled_bytes_per_bin(const Timeline& timeline, const std::vector<InstrTime>& times, double bin_s,
                                            int bins);

// What a timeline's transfers carry, in bytes summed over its sends and all-reduces (sizes from its costs,
// an all-reduce counting what each worker moves in a ring: 2(N-1)/N of the stage's gradient).
struct MessageBytes {
  double activations = 0;           // mp: stage outputs (the policy's activation dtype)
  double activation_gradients = 0;  // mp: input gradients sent back (the same dtype)
  double gradients = 0;             // weight gradients: all-reduces, chain sums and means (f32)
  double parameters = 0;            // zero: parameter copies and relays (f32 masters)
  double total() const { return activations + activation_gradients + gradients + parameters; }
};
MessageBytes message_bytes(const Timeline& timeline);

}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
