// DType: the element types a Tensor can hold, their sizes and names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace tandem {

enum class DType : uint8_t { F32, F64, F16, BF16, I32, I64, U8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);          // "f32", "f64", ...
DType parse_dtype(const std::string& s);  // inverse of dtype_name; throws ValueError
bool is_floating(DType t);                // f32, f64, f16, bf16
// Types the math kernels compute in (f16/bf16 are storage types: convert with .to(F32)).
inline bool is_compute_float(DType t) { return t == DType::F32 || t == DType::F64; }
// Types a gradient flows through: the compute types and bf16 (elementwise kernels and casts take it, computing
// in f32).
inline bool carries_grad(DType t) { return is_compute_float(t) || t == DType::BF16; }

// C++ type -> DType.
template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> : std::integral_constant<DType, DType::F32> {};
template <>
struct dtype_of<double> : std::integral_constant<DType, DType::F64> {};
template <>
struct dtype_of<int32_t> : std::integral_constant<DType, DType::I32> {};
template <>
struct dtype_of<int64_t> : std::integral_constant<DType, DType::I64> {};
template <>
struct dtype_of<uint8_t> : std::integral_constant<DType, DType::U8> {};

}  // namespace tandem
