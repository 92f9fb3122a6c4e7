// What the kernel interfaces (backend.h, nn_backend.h) are made of: one args struct per method, which names its
// pointer operands (Operand: the field, whether the kernel reads, writes or updates it, the elements it may
// touch), and the macros that turn a list of (method, Args) into an interface and its overrides. The stream
// checker records each call's operands; the op harness checks every call against them (tests/harness/write_check.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/base/dtype.h"
#include "runtime/memory/stream.h"

namespace tandem {

// Read only; written without being read (every element, unless the method says otherwise); read and updated.
enum class OperandUse : uint8_t { Read, Write, Update };

struct Operand {
  const char* name = "";
  int64_t index = -1;         // the position in a list operand (a fused optimizer step's params[i]); else -1
  const void* ptr = nullptr;  // null: an optional operand that was not given
  DType dtype = DType::U8;
  int64_t elements = 0;  // from ptr: the span of a strided operand, first element to last
  OperandUse use = OperandUse::Read;

  bool written() const { return use != OperandUse::Read; }
  size_t bytes() const { return static_cast<size_t>(elements) * dtype_size(dtype); }

  static Operand read(const char* name, const void* p, DType t, int64_t elements, int64_t index = -1) {
    return Operand{name, index, p, t, elements, OperandUse::Read};
  }
  static Operand write(const char* name, const void* p, DType t, int64_t elements, int64_t index = -1) {
    return Operand{name, index, p, t, elements, OperandUse::Write};
  }
  static Operand update(const char* name, const void* p, DType t, int64_t elements, int64_t index = -1) {
    return Operand{name, index, p, t, elements, OperandUse::Update};
  }
};

}  // namespace tandem

// An interface's method and a backend's override of it, from X(method, Args) of the interface's list. Each method
// queues its work on `s` (the CPU runs it before returning).
#define TD_KERNEL_PURE_VIRTUAL(method, Args) virtual void method(const Args& args, const Stream& s) = 0;
#define TD_KERNEL_OVERRIDE(method, Args) void method(const Args& args, const Stream& s) override;
