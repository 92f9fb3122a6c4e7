// Simulator: times a Schedule from its instructions' costs (cost_s), honouring program order per lane,
// dependencies, send -> receive pairing and collectives, to project scales without the hardware.
#pragma once

#include <vector>

#include "parallel/executor.h"
#include "parallel/schedule.h"

namespace tandem {
namespace parallel {

struct SimResult {
  std::vector<InstrTime> times;  // every instruction's simulated start and end
  double makespan_s = 0;         // end of the last instruction
  std::vector<double> busy_s;    // per worker: compute-lane time spent in instructions (not waiting)
  double busy_fraction(int worker) const { return makespan_s > 0 ? busy_s[worker] / makespan_s : 0; }
};

// How point-to-point messages complete.
enum class SendModel {
  Buffered,    // a Send ends after its cost whether or not the receiver has reached its Recv (MPI, local)
  Rendezvous,  // a Send starts only together with its Recv, each at the head of its lane (NCCL holds a send's
               // stream until the message is received): two workers that each send to the other first deadlock
};

// Model: an instruction starts when its lane is free and its dependencies ended. A Recv ends no earlier
// than its matching Send ends (the transfer is the send's cost); members of one collective start together,
// when the last is ready, and end together after the largest member cost. Throws ValueError on deadlock.
SimResult simulate(const Schedule& schedule, SendModel sends = SendModel::Buffered);

}  // namespace parallel
}  // namespace tandem
