/// @file dtype.hpp
/// @brief Element types the core understands, with DLPack (code, bits) mapping.
#pragma once

#include <cstdint>
#include <string>

#include "kverify/common/check.hpp"

namespace kverify {

/// Element type of a tensor view. Float types are compared; integer types are only digested,
/// synthesised, poisoned and counted.
enum class DType : uint8_t { F64, F32, F16, BF16, I8, I16, I32, I64, U8, Bool };

/// Where the memory of a view lives (DLPack kDLCPU = 1, kDLCUDA = 2).
enum class Device : uint8_t { CPU, CUDA };

/// Bytes per element.
KV_HD int dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: case DType::I16: return 2;
    default: return 1;
  }
}

KV_HD bool is_float(DType t) {
  return t == DType::F64 || t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

/// Name as PyTorch spells it (float32, bfloat16, ...).
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F64: return "float64";
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    case DType::I8: return "int8";
    case DType::I16: return "int16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
    case DType::Bool: return "bool";
  }
  return "?";
}

/// Map a DLPack dtype (code: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool; bits; lanes must be 1).
/// @throws kverify::Error for vector lanes, complex or unknown types.
inline DType dtype_from_dlpack(int code, int bits, int lanes) {
  KV_CHECK(lanes == 1, "vector dtypes are not supported: lanes=%d", lanes);
  if (code == 2 && bits == 64) return DType::F64;
  if (code == 2 && bits == 32) return DType::F32;
  if (code == 2 && bits == 16) return DType::F16;
  if (code == 4 && bits == 16) return DType::BF16;
  if (code == 0 && bits == 8) return DType::I8;
  if (code == 0 && bits == 16) return DType::I16;
  if (code == 0 && bits == 32) return DType::I32;
  if (code == 0 && bits == 64) return DType::I64;
  if (code == 1 && bits == 8) return DType::U8;
  if (code == 6 && bits == 8) return DType::Bool;
  KV_CHECK(false, "unsupported DLPack dtype code=%d bits=%d", code, bits);
  return DType::F32;
}

}  // namespace kverify
