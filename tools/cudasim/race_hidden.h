// The simulator's own bookkeeping hidden from ThreadSanitizer (a no-op in other builds). In the TSan build every
// CUDA thread runs as a TSan fiber, which it takes for a thread of its own; what the engine does for a block's
// threads (scheduling them, counting their work) runs one fiber at a time on one host thread and is not a race.
#pragma once

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_ignore_thread_begin();  // in TSan's runtime, not in GCC 12's headers
extern "C" void __tsan_ignore_thread_end();
#endif

namespace cudasim {

// While in scope, ThreadSanitizer ignores the calling thread's (or fiber's) memory accesses.
struct RaceHidden {
#if defined(__SANITIZE_THREAD__)
  RaceHidden() { __tsan_ignore_thread_begin(); }
  ~RaceHidden() { __tsan_ignore_thread_end(); }
#else
  RaceHidden() {}  // user-provided, so that a scope's guard is not an unused variable
#endif
  RaceHidden(const RaceHidden&) = delete;
  RaceHidden& operator=(const RaceHidden&) = delete;
};

}  // namespace cudasim
