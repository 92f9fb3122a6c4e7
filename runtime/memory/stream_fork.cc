// StreamFork: one event recorded on the parent for the fork, one per side stream for the join.
#include "runtime/memory/stream_fork.h"

namespace tandem {

StreamFork::StreamFork(const Stream& parent, std::vector<Stream> sides) : parent_(parent), sides_(std::move(sides)) {
  Event forked;
  forked.record(parent_);
  for (const Stream& s : sides_) s.wait(forked);
}

StreamFork::~StreamFork() {
  if (joined_) return;
  try {
    join();
  } catch (...) {  // a destructor never throws; the failure that ended the scope early is already on its way
  }
}

void StreamFork::join() {
  joined_ = true;
  for (const Stream& s : sides_) {
    Event done;
    done.record(s);
    parent_.wait(done);
  }
}

}  // namespace tandem
