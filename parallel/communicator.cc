// Communicator's transfer log, shared by every backend.
#include "parallel/communicator.h"

#include <utility>

#include "runtime/memory/stream.h"

namespace tandem {
namespace parallel {

std::vector<CommRecord> Communicator::take_records() {
  std::lock_guard<std::mutex> lock(records_mu_);
  return std::exchange(records_, {});
}

void Communicator::note(const char* op, int64_t bytes) {
  bytes_moved_ += bytes;
  if (!recording_) return;
  std::lock_guard<std::mutex> lock(records_mu_);
  records_.push_back(CommRecord{host_time_s(), op, bytes});
}

}  // namespace parallel
}  // namespace tandem
