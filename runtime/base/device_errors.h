// Errors found inside CUDA kernels (e.g. an index out of range) are flagged in mapped host memory
// and raised as IndexError at the next synchronization point, instead of crashing the context.
#pragma once

#include <cstdint>

#include "runtime/base/device.h"

namespace tandem {

// Codes kernels write into the flag (a set flag is not overwritten; when threads race to set it, one of
// their codes stays).
enum class DeviceErrorCode : int32_t { None = 0, IndexOutOfRange = 1, LabelOutOfRange = 2 };

// Device-visible address of the error flag of CUDA device `device` (allocated on first use).
int32_t* device_error_flag(int device);
// Throws IndexError if a kernel on `device` flagged an error since the last check (and clears it).
// Call after synchronizing with the work that could have flagged it.
void raise_device_errors(Device device);

}  // namespace tandem
