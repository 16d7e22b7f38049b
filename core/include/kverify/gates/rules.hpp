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

/// The accuracy rule shared by G02, G05 (per variant), G06 and G10: every run/output within its
/// normwise bound and every element within its elementwise bound; a class mismatch the reference
/// does not make is unbounded. Optional "label" per run (named in the summary) and "skipped":
/// [reasons] (all skipped gives N/A).
GateResult judge_accuracy(const json& m, const char* gate, const char* name);

/// G02 accuracy (tolerance-based). Measurements:
/// {"runs":[{"seed":s,"outputs":[{"index":i,"dtype":"float32","candidate":stats,
///            "reference":stats,"bound":{"normwise","atol","rtol"}}]}]}
GateResult judge_g02(const json& m);

/// G03 nonfinite (tolerance-free). Measurements:
/// {"runs":[{"label":"NaN","seed":s,"outputs":[{"index":i,"candidate":stats,"reference":stats,
///            "indeterminate":n}]}]}
/// A run/output where the low-precision reference itself disagrees with the oracle's non-finite
/// pattern is skipped as ambiguous; all skipped gives N/A. Any class mismatch of the candidate
/// fails. `indeterminate` (optional) counts oracle NaNs that the measuring side replaced by their
/// ±Inf limit before comparing (g03_nonfinite.py); it is summed into the evidence.
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

/// G05 shapes (tolerance-based). Measurements:
/// {"variants":[{"binding":{..},"elements":n,"verdict":"PASS"|"FAIL"|"UNSUPPORTED"|"SKIPPED",
///               "reason":"..","bound_ratio":x}],
///  "shrunk":{"binding":{..},"elements":n,"from":{..},"steps":k,"reason":".."}   (when a variant failed)}
GateResult judge_g05(const json& m);

/// G06 accumulation (tolerance-based): the accuracy rule over runs labelled by input class.
GateResult judge_g06(const json& m);

/// G09 sensitivity (tolerance-free on the candidate). Measurements:
/// {"perturbations":[{"name":"input 0","reference_changed":n,"ignored":k,"first":i} or
///                   {"name":"training mode","failed":"the candidate raised ..."}],
///  "sequence":{"calls":N,"inconsistent_call":k (-1 none),"label":"A"|"B"},
///  "left_out":"why a perturbation was not made" (optional)}
/// `reference_changed` counts elements the perturbation moves in the fp64 oracle's output (beyond
/// a threshold of the candidate's dtype, kverify.gates.g09_sensitivity._moved), `ignored` those of
/// them where the candidate's output did not change (any bit). A "failed" perturbation fails.
GateResult judge_g09(const json& m);

/// G10 range (tolerance-based): the accuracy rule over runs labelled by input scale.
GateResult judge_g10(const json& m);

/// G11 memory-safety (tolerance-free). Measurements:
/// {"sanitizer":{"not_applicable":"why"} | {"tools":[{"tool":"memcheck","errors":n,"first":"..."}, ...]},
///  "guard":{"band_writes":n,"tensor":"input 0","output_depends_on_bands":bool}}
/// A tool record may instead carry "not_applicable" (the tool checks only the candidate's own
/// kernels and it has none: skipped) or, with errors 0, "unfinished" (timed out under the tool).
/// FAIL: a guard band written or read, or any tool's errors > 0. ERROR: otherwise, when a tool is
/// unfinished (memory safety not established). PASS otherwise.
GateResult judge_g11(const json& m);

/// G12 stream (tolerance-free). Measurements:
/// {"stream":{"not_applicable":"why"} | {"pending_writes_seen":bool,"complete_after_stream_sync":bool},
///  "threads_added":n, "patched":["torch.cuda.synchronize", ...]}
GateResult judge_g12(const json& m);

}  // namespace kverify::gates
