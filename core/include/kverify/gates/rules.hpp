/// @file rules.hpp
/// @brief The verdict rules of the gates implemented so far, one source file each under
/// core/src/gates/. Each takes the measurements documented on it and returns a GateResult.
#pragma once

#include "kverify/compare/stats.hpp"
#include "kverify/gates/verdict.hpp"
#include "kverify/tensor/dtype.hpp"

namespace kverify::gates {

/// G01 contract (tolerance-free). Measurements:
/// {"exception": null|"Type: msg",
///  "reference": [{"kind":"tensor","shape":[..],"dtype":"float32","device":"cpu"}, ...],
///  "candidate": [{"kind":"tensor"|"<python type>","shape":[..],"dtype":..,"device":..,
///                 "plain":bool (exactly torch.Tensor), "dense":bool (non-overlapping and dense),
///                 "has_storage":bool}, ...]}
GateResult judge_g01(const json& m);

/// Bounds of G02 for one output, calibrated on the low-precision reference's own error against
/// the oracle (`ref`), with a per-dtype floor:
///   normwise <= max(floor_norm(dtype), kRefFactor * ref.normwise_rel()),
///   |c - o| <= atol + rtol |o|, atol = max(kRefFactor * ref.max_abs_err, floor_elem(dtype) * rms(o)),
///   rtol = floor_elem(dtype).
/// Returns {"normwise":x,"atol":x,"rtol":x}.
json g02_bound(const compare::CompareStats& ref, DType dtype);
constexpr double kRefFactor = 16.0;  ///< how much worse than the reference a candidate may be
double floor_norm(DType t);          ///< fp64 1e-13, fp32 1e-6, fp16 2e-3, bf16 1.6e-2
double floor_elem(DType t);          ///< fp64 1e-11, fp32 1e-5, fp16 1e-2, bf16 6e-2

/// G02 accuracy (tolerance-based). Measurements:
/// {"runs":[{"seed":s,"outputs":[{"index":i,"dtype":"float32","candidate":stats,
///            "reference":stats,"bound":{"normwise","atol","rtol"}}]}]}
GateResult judge_g02(const json& m);

/// G03 nonfinite (tolerance-free). Measurements:
/// {"runs":[{"label":"NaN","seed":s,"outputs":[{"index":i,"candidate":stats,"reference":stats}]}]}
/// A run/output where the low-precision reference itself disagrees with the oracle's non-finite
/// pattern is skipped as ambiguous; all skipped gives N/A.
GateResult judge_g03(const json& m);

/// G04 determinism (tolerance-free). Measurements:
/// {"runs":[["<hex digest of output 0>", ...], ...], "reference_deterministic": bool}
GateResult judge_g04(const json& m);

/// G07 immutability (tolerance-free). Measurements:
/// {"tensors":[{"name":"input 0","before":"<hex>","after":"<hex>","changed":n,"numel":N,
///              "first_changed":i}]}
GateResult judge_g07(const json& m);

/// G08 fresh-output (tolerance-free). Measurements:
/// {"outputs":[{"index":i,"sentinels":n,"first":i,"numel":N}],
///  "rewrite":{"oracle_changed":bool,"output_unchanged":bool,"dist_to_new":x,"dist_to_old":y}}
/// dist_* are normwise distances of the output after the in-place rewrite to oracle(new inputs)
/// and oracle(old inputs).
GateResult judge_g08(const json& m);

}  // namespace kverify::gates
