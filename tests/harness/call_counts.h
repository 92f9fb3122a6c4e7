// CallCounts: while in scope, counts each kernel method called on one device type (Backend and NNBackend), for a
// test that an op or a model takes a given path (a fused kernel in place of several), and the bytes those calls
// declare they move (the op benchmarks' least traffic of a pass).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/device.h"
#include "runtime/base/non_copyable.h"
#include "runtime/nn/nn_backend.h"
#include "runtime/tensor/kernel_observer.h"

namespace tandem {
namespace testing {

class CallCounts final : public KernelObserver, NonCopyable {
 public:
  explicit CallCounts(DeviceType type);  // wraps the kernels registered now; the destructor registers them again
  ~CallCounts() override;
  void before(const char* method, const Stream&, const std::vector<Operand>& operands) override;

  int of(const std::string& method) const;  // calls of one method so far
  int total() const;                        // calls of every method so far
  // The bytes the calls so far declare: each operand they read or write once, one they update twice (read and
  // written), optional operands not given none.
  double bytes() const { return bytes_; }
  void clear() {
    counts_.clear();
    bytes_ = 0;
  }

 private:
  DeviceType type_;
  Backend* kernels_;
  NNBackend* nn_kernels_;
  std::unique_ptr<Backend> watched_;
  std::unique_ptr<NNBackend> nn_watched_;
  std::map<std::string, int> counts_;
  double bytes_ = 0;
};

}  // namespace testing
}  // namespace tandem
