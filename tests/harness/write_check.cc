// The write check: snapshots of every operand before and after each kernel call, compared with what the
// method's args declare. Device memory is read after synchronizing the call's stream through the CUDA runtime
// directly, so that the stream checker sees no extra ordering.
#include "tests/harness/write_check.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/base/cuda_check.h"
#include "runtime/nn/nn_backend.h"
#include "runtime/tensor/kernel_observer.h"

namespace tandem {
namespace testing {

namespace {

std::vector<uint8_t> bytes_of(const Operand& o, const Stream& s) {
  std::vector<uint8_t> b(o.bytes());
  if (b.empty()) return b;
  if (s.device().is_cuda()) {
    TD_CUDA_CHECK(cudaStreamSynchronize(s.cuda()));
    TD_CUDA_CHECK(cudaMemcpy(b.data(), o.ptr, b.size(), cudaMemcpyDefault));
  } else {
    std::memcpy(b.data(), o.ptr, b.size());
  }
  return b;
}

std::string operand_name(const Operand& o) {
  return o.index < 0 ? o.name : std::string(o.name) + "[" + std::to_string(o.index) + "]";
}

bool is_float(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }

bool all_fresh(const std::vector<uint8_t>& b) {
  for (uint8_t v : b)
    if (v != 0xff) return false;
  return true;
}

// Whether `p` lies in an operand declared written (an in-place op reads and writes the same memory).
bool declared_written(const std::vector<Operand>& operands, const uint8_t* p) {
  for (const Operand& o : operands) {
    const uint8_t* begin = static_cast<const uint8_t*>(o.ptr);
    if (o.written() && begin != nullptr && p >= begin && p < begin + o.bytes()) return true;
  }
  return false;
}

class Snapshots final : public KernelObserver {
 public:
  void before(const char*, const Stream& s, const std::vector<Operand>& operands) override {
    std::vector<std::vector<uint8_t>> taken;
    for (const Operand& o : operands) taken.push_back(o.ptr ? bytes_of(o, s) : std::vector<uint8_t>());
    calls_.push_back(std::move(taken));
  }

  void after(const char* method, const Stream& s, const std::vector<Operand>& operands) override {
    std::vector<std::vector<uint8_t>> before = std::move(calls_.back());
    calls_.pop_back();
    for (size_t i = 0; i < operands.size(); ++i) {
      const Operand& o = operands[i];
      if (o.ptr == nullptr || before[i].empty()) continue;
      const std::vector<uint8_t> now = bytes_of(o, s);
      if (o.use == OperandUse::Read) {
        for (size_t b = 0; b < now.size(); ++b) {
          if (now[b] == before[i][b] || declared_written(operands, static_cast<const uint8_t*>(o.ptr) + b)) continue;
          ADD_FAILURE() << method << ": " << operand_name(o) << " is declared read-only, but the kernel changed byte "
                        << b << " of its " << now.size() << " (on " << s.device() << ")";
          break;
        }
      } else if (o.use == OperandUse::Write && is_float(o.dtype) && all_fresh(before[i]) && now == before[i]) {
        ADD_FAILURE() << method << ": " << operand_name(o) << " is declared written, but the kernel left all "
                      << now.size() << " bytes of it as fresh memory (on " << s.device() << ")";
      }
    }
  }

 private:
  std::vector<std::vector<std::vector<uint8_t>>> calls_;  // per call in progress: its operands' bytes before it
};

}  // namespace

struct WriteCheck::Impl {
  Snapshots snapshots;
  Backend* kernels[2] = {};
  NNBackend* nn_kernels[2] = {};
  std::unique_ptr<Backend> watched[2];
  std::unique_ptr<NNBackend> nn_watched[2];
};

WriteCheck::WriteCheck() : impl_(new Impl) {
  for (DeviceType type : {DeviceType::CPU, DeviceType::CUDA}) {
    const int i = static_cast<int>(type);
    if ((impl_->kernels[i] = registered_backend(type)) != nullptr) {
      impl_->watched[i] = observe_backend(*impl_->kernels[i], impl_->snapshots);
      register_backend(type, impl_->watched[i].get());
    }
    if ((impl_->nn_kernels[i] = registered_nn_backend(type)) != nullptr) {
      impl_->nn_watched[i] = observe_nn_backend(*impl_->nn_kernels[i], impl_->snapshots);
      register_nn_backend(type, impl_->nn_watched[i].get());
    }
  }
}

WriteCheck::~WriteCheck() {
  for (DeviceType type : {DeviceType::CPU, DeviceType::CUDA}) {
    const int i = static_cast<int>(type);
    if (impl_->kernels[i] != nullptr) register_backend(type, impl_->kernels[i]);
    if (impl_->nn_kernels[i] != nullptr) register_nn_backend(type, impl_->nn_kernels[i]);
  }
}

}  // namespace testing
}  // namespace tandem
