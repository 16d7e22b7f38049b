// Bindings of the chunked GDN (gdn/include/kverify/gdn/chunk.hpp): DLPack tensors in (CPU or
// CUDA, all on one device), outputs written in place. The torch face, kverify.gdn.chunk,
// allocates the outputs and the workspace and reshapes to the layouts checked here.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "kverify/common/check.hpp"
#include "kverify/gdn/chunk.hpp"
#include "view.hpp"

namespace nb = nanobind;

namespace kverify::bind {

namespace {

using namespace gdn::chunk;
using Opt = std::optional<nb::ndarray<>>;

/// The tensors of one call, checked for device, dtype and layout.
struct Checker {
  Device dev = Device::CPU;
  int dev_id = 0;
  bool first = true;

  TensorView take(const nb::ndarray<>& a, const char* name) {
    const TensorView v = view_of(a);
    if (first) dev = v.device, dev_id = v.device_id, first = false;
    KV_CHECK(v.device == dev && v.device_id == dev_id, "%s is on %s, the other tensors on another device", name,
             v.describe().c_str());
    return v;
  }
  static Dt dt(const TensorView& v, const char* name) {
    switch (v.dtype) {
      case DType::F32: return Dt::F32;
      case DType::F16: return Dt::F16;
      case DType::BF16: return Dt::BF16;
      default: KV_CHECK(false, "%s must be float32, float16 or bfloat16, got %s", name, v.describe().c_str());
    }
    return Dt::F32;
  }
  /// [tokens, heads, dim] input with a contiguous last dimension.
  In in3(const nb::ndarray<>& a, const char* name, int64_t tokens, int64_t heads, int64_t dim, Dt want) {
    const TensorView v = take(a, name);
    KV_CHECK(v.ndim == 3 && v.shape[0] == tokens && v.shape[1] == heads && v.shape[2] == dim,
             "%s must be [%lld, %lld, %lld], got %s", name, (long long)tokens, (long long)heads, (long long)dim,
             v.describe().c_str());
    KV_CHECK(dt(v, name) == want, "%s must have the dtype of its group (q/k/v/do or g/beta), got %s", name,
             v.describe().c_str());
    KV_CHECK(dim == 1 || v.strides[2] == 1, "%s: the last dimension must be contiguous", name);
    return In{v.data, v.strides[0], v.strides[1]};
  }
  /// Contiguous output or state of `numel` elements of dtype `want`.
  void* out(const nb::ndarray<>& a, const char* name, int64_t numel, DType want) {
    const TensorView v = take(a, name);
    KV_CHECK(v.numel() == numel && v.is_contiguous() && v.dtype == want, "%s must be a contiguous %s tensor of %lld elements, got %s",
             name, dtype_name(want), (long long)numel, v.describe().c_str());
    return v.data;
  }
  void* opt(const Opt& a, const char* name, int64_t numel, DType want) {
    return a ? out(*a, name, numel, want) : nullptr;
  }
};

DType dtype_of(Dt t) { return t == Dt::F32 ? DType::F32 : t == Dt::F16 ? DType::F16 : DType::BF16; }

/// Fills the shared part of Args from q [tokens,H,K], k, v [tokens,HV,V], g, beta [tokens,HV,1].
Args common(Checker& c, const nb::ndarray<>& q, const nb::ndarray<>& k, const nb::ndarray<>& v,
            const nb::ndarray<>& g, const nb::ndarray<>& beta, const Opt& h0, const nb::ndarray<>& ws,
            const nb::ndarray<>& cu, const nb::ndarray<>& seq0, const nb::ndarray<>& chunks, double scale, bool bwd) {
  Args a;
  const TensorView qv = c.take(q, "q"), vv = c.take(v, "v"), gv = c.take(g, "g");
  KV_CHECK(qv.ndim == 3 && vv.ndim == 3 && gv.ndim == 3, "q, v, g must be 3-D [tokens, heads, dim]%s", "");
  a.io = Checker::dt(qv, "q");
  a.gate = Checker::dt(gv, "g");
  const TensorView cv = c.take(cu, "cu_seqlens"), sv = c.take(seq0, "seq_chunk0"), chv = c.take(chunks, "chunks");
  KV_CHECK(cv.dtype == DType::I64 && sv.dtype == DType::I64 && chv.dtype == DType::I64 && cv.is_contiguous() &&
               sv.is_contiguous() && chv.is_contiguous() && cv.ndim == 1 && cv.numel() >= 2 && sv.numel() == cv.numel(),
           "cu_seqlens, seq_chunk0, chunks must be contiguous int64 ([N+1], [N+1], [NT*2])%s", "");
  Dims& d = a.d;
  d.tokens = qv.shape[0];
  d.H = int(qv.shape[1]);
  d.K = int(qv.shape[2]);
  d.HV = int(vv.shape[1]);
  d.V = int(vv.shape[2]);
  d.N = int(cv.numel() - 1);
  d.NT = chv.numel() / 2;
  d.scale = float(scale);
  a.cu = static_cast<const int64_t*>(cv.data);
  a.seq_chunk0 = static_cast<const int64_t*>(sv.data);
  a.chunks = static_cast<const int64_t*>(chv.data);
  a.q = c.in3(q, "q", d.tokens, d.H, d.K, a.io);
  a.k = c.in3(k, "k", d.tokens, d.H, d.K, a.io);
  a.v = c.in3(v, "v", d.tokens, d.HV, d.V, a.io);
  a.g = c.in3(g, "g", d.tokens, d.HV, 1, a.gate);
  a.beta = c.in3(beta, "beta", d.tokens, d.HV, 1, a.gate);
  const int64_t state = int64_t(d.N) * d.HV * d.K * d.V;
  a.h0 = static_cast<const float*>(c.opt(h0, "initial_state", state, DType::F32));
  a.ws = static_cast<float*>(c.out(ws, "workspace", int64_t(workspace_floats(d, bwd)), DType::F32));
  return a;
}

void forward(const nb::ndarray<>& q, const nb::ndarray<>& k, const nb::ndarray<>& v, const nb::ndarray<>& g,
             const nb::ndarray<>& beta, const Opt& h0, const nb::ndarray<>& o, const Opt& ht, const nb::ndarray<>& ws,
             const nb::ndarray<>& cu, const nb::ndarray<>& seq0, const nb::ndarray<>& chunks, double scale,
             uintptr_t stream) {
  Checker c;
  Args a = common(c, q, k, v, g, beta, h0, ws, cu, seq0, chunks, scale, false);
  const Dims& d = a.d;
  a.o = c.out(o, "o", d.tokens * d.HV * d.V, dtype_of(a.io));
  a.ht = static_cast<float*>(c.opt(ht, "final_state", int64_t(d.N) * d.HV * d.K * d.V, DType::F32));
  nb::gil_scoped_release nogil;
  if (c.dev == Device::CPU) forward_host(a);
  else forward_cuda(a, reinterpret_cast<void*>(stream));
}

void backward(const nb::ndarray<>& q, const nb::ndarray<>& k, const nb::ndarray<>& v, const nb::ndarray<>& g,
              const nb::ndarray<>& beta, const Opt& h0, const nb::ndarray<>& d_o, const Opt& dht,
              const nb::ndarray<>& dq, const nb::ndarray<>& dk, const nb::ndarray<>& dv, const nb::ndarray<>& dg,
              const nb::ndarray<>& dbeta, const Opt& dh0, const nb::ndarray<>& ws, const nb::ndarray<>& cu,
              const nb::ndarray<>& seq0, const nb::ndarray<>& chunks, double scale, uintptr_t stream) {
  Checker c;
  Args a = common(c, q, k, v, g, beta, h0, ws, cu, seq0, chunks, scale, true);
  const Dims& d = a.d;
  const int64_t state = int64_t(d.N) * d.HV * d.K * d.V;
  a.d_o = c.in3(d_o, "do", d.tokens, d.HV, d.V, a.io);
  a.dht = static_cast<const float*>(c.opt(dht, "dht", state, DType::F32));
  a.dq = c.out(dq, "dq", d.tokens * d.H * d.K, dtype_of(a.io));
  a.dk = c.out(dk, "dk", d.tokens * d.H * d.K, dtype_of(a.io));
  a.dv = c.out(dv, "dv", d.tokens * d.HV * d.V, dtype_of(a.io));
  a.dg = c.out(dg, "dg", d.tokens * d.HV, dtype_of(a.gate));
  a.dbeta = c.out(dbeta, "dbeta", d.tokens * d.HV, dtype_of(a.gate));
  a.dh0 = static_cast<float*>(c.opt(dh0, "dh0", state, DType::F32));
  nb::gil_scoped_release nogil;
  if (c.dev == Device::CPU) backward_host(a);
  else backward_cuda(a, reinterpret_cast<void*>(stream));
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> table(const std::vector<int64_t>& cu) {
  KV_CHECK(cu.size() >= 2, "cu_seqlens needs at least 2 entries, got %zu", cu.size());
  const int N = int(cu.size() - 1);
  std::vector<int64_t> seq0(N + 1);
  std::vector<int64_t> chunks(2 * chunk_table(cu.data(), N, seq0.data(), nullptr));
  chunk_table(cu.data(), N, seq0.data(), chunks.data());
  return {seq0, chunks};
}

size_t workspace(int64_t tokens, int H, int HV, int K, int V, int N, int64_t NT, bool bwd) {
  Dims d;
  d.tokens = tokens, d.H = H, d.HV = HV, d.K = K, d.V = V, d.N = N, d.NT = NT;
  return workspace_floats(d, bwd);
}

}  // namespace

void register_gdn_chunk(nb::module_& m) {
  m.def("gdn_chunk_table", &table, nb::arg("cu_seqlens"),
        "(seq_chunk0 [N+1], chunks [NT*2] as (first token, length)) of the 64-token chunks of the sequences\n"
        "cu_seqlens [N+1]. Raises ValueError if cu_seqlens does not start at 0 or decreases.");
  m.def("gdn_chunk_workspace", &workspace, nb::arg("tokens"), nb::arg("H"), nb::arg("HV"), nb::arg("K"), nb::arg("V"),
        nb::arg("N"), nb::arg("NT"), nb::arg("backward"), "float32 elements of workspace of one chunked GDN call.");
  m.def("gdn_chunk_forward", &forward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"), nb::arg("beta"),
        nb::arg("h0").none(), nb::arg("o"), nb::arg("ht").none(), nb::arg("ws"), nb::arg("cu_seqlens"),
        nb::arg("seq_chunk0"), nb::arg("chunks"), nb::arg("scale"), nb::arg("cuda_stream") = 0,
        "Chunked GDN forward (kverify/gdn/chunk.hpp) on the device of q: q, k [tokens,H,K], v [tokens,HV,V],\n"
        "g, beta [tokens,HV,1] (float32/float16/bfloat16; last dim contiguous), h0 [N,HV,K,V] float32 or None;\n"
        "writes o [tokens,HV,V] (q's dtype, contiguous), ht (float32 or None) and the workspace ws.\n"
        "Raises ValueError naming the tensor for a wrong shape, dtype, device or layout.");
  m.def("gdn_chunk_backward", &backward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"), nb::arg("beta"),
        nb::arg("h0").none(), nb::arg("do"), nb::arg("dht").none(), nb::arg("dq"), nb::arg("dk"), nb::arg("dv"),
        nb::arg("dg"), nb::arg("dbeta"), nb::arg("dh0").none(), nb::arg("ws"), nb::arg("cu_seqlens"),
        nb::arg("seq_chunk0"), nb::arg("chunks"), nb::arg("scale"), nb::arg("cuda_stream") = 0,
        "Chunked GDN backward: recomputes the forward state, writes dq, dk, dv (q's dtype), dg, dbeta (g's dtype)\n"
        "and dh0 (float32 or None). Layouts as gdn_chunk_forward; ws of gdn_chunk_workspace(..., backward=True).");
}

}  // namespace kverify::bind
