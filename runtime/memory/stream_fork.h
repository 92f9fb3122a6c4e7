// StreamFork: fork and join of streams as a scope (as tiny-cuda-nn's SyncedMultiStream, for streams the caller
// owns): at construction the side streams wait for the work queued on the parent so far; join() makes the parent
// wait for the work queued on each side stream since. Events order them, so it is declared to the stream checker
// and holds on a GPU; on the CPU, where streams are tags, it is that declaration alone.
#pragma once

#include <vector>

#include "runtime/base/non_copyable.h"
#include "runtime/memory/stream.h"

namespace tandem {

class StreamFork : NonCopyable {
 public:
  StreamFork(const Stream& parent, std::vector<Stream> sides);
  // Joins if join() was not called (a scope left early by an exception); errors there are dropped, as a destructor
  // cannot raise them: call join() where the scope ends normally.
  ~StreamFork();
  // The parent waits for every side stream's work queued so far. Throws what Event::record or Stream::wait throw.
  void join();

 private:
  Stream parent_;
  std::vector<Stream> sides_;
  bool joined_ = false;
};

}  // namespace tandem
