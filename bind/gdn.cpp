// Bindings of the fp64 GDN oracle (gdn/include/kverify/gdn/oracle.hpp): CPU float64 arrays in
// (any DLPack producer: torch CPU tensors, NumPy), NumPy float64 arrays out.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <optional>

#include "kverify/common/check.hpp"
#include "kverify/gdn/oracle.hpp"

namespace nb = nanobind;

namespace kverify::bind {

namespace {

using Arr = nb::ndarray<const double, nb::c_contig, nb::device::cpu>;
using Out = nb::ndarray<nb::numpy, double>;

/// Shape from q [B,T,H,K] and v [B,T,HV,V]; checks every other array's shape.
gdn::Shape shape_of(const Arr& q, const Arr& k, const Arr& v, const Arr& g, const Arr& beta) {
  KV_CHECK(q.ndim() == 4 && k.ndim() == 4 && v.ndim() == 4, "q, k, v must be 4-D ([B,T,H,K], [B,T,HV,V]); got %zu, %zu, %zu dims",
           q.ndim(), k.ndim(), v.ndim());
  gdn::Shape s{(int64_t)q.shape(0), (int64_t)q.shape(1), (int64_t)q.shape(2), (int64_t)v.shape(2),
               (int64_t)q.shape(3), (int64_t)v.shape(3)};
  for (size_t d = 0; d < 4; ++d) KV_CHECK(k.shape(d) == q.shape(d), "k must have q's shape (dim %zu)", d);
  KV_CHECK(v.shape(0) == q.shape(0) && v.shape(1) == q.shape(1), "v must be [B,T,HV,V] with q's B and T%s", "");
  for (const Arr* x : {&g, &beta})
    KV_CHECK(x->ndim() == 3 && (int64_t)x->shape(0) == s.B && (int64_t)x->shape(1) == s.T && (int64_t)x->shape(2) == s.HV,
             "%s must be [B,T,HV] = [%lld,%lld,%lld]", x == &g ? "g" : "beta", (long long)s.B, (long long)s.T, (long long)s.HV);
  return s;
}

gdn::Options options_of(std::optional<double> scale, bool l2norm, const std::optional<std::vector<int64_t>>& cu) {
  gdn::Options o;
  o.scale = scale;
  o.l2norm_qk = l2norm;
  if (cu) o.cu_seqlens = *cu;
  return o;
}

Out to_numpy(std::vector<double>&& data, std::vector<size_t> shape) {
  auto* heap = new std::vector<double>(std::move(data));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<double>*>(p); });
  return Out(heap->data(), shape.size(), shape.data(), owner);
}

void check_state(const std::optional<Arr>& x, const char* name, int64_t N, const gdn::Shape& s) {
  if (!x) return;
  KV_CHECK(x->ndim() == 4 && (int64_t)x->shape(0) == N && (int64_t)x->shape(1) == s.HV && (int64_t)x->shape(2) == s.K &&
               (int64_t)x->shape(3) == s.V,
           "%s must be [N,HV,K,V] = [%lld,%lld,%lld,%lld]", name, (long long)N, (long long)s.HV, (long long)s.K,
           (long long)s.V);
}

/// One call's shape, options, sequence count and input pointers, every array checked.
struct Call {
  gdn::Shape s;
  gdn::Options o;
  int64_t N;
  gdn::Inputs in;
};

Call prepare(const Arr& q, const Arr& k, const Arr& v, const Arr& g, const Arr& beta, const std::optional<Arr>& h0,
             std::optional<double> scale, bool l2norm, const std::optional<std::vector<int64_t>>& cu_seqlens) {
  Call c{shape_of(q, k, v, g, beta), options_of(scale, l2norm, cu_seqlens), 0, {}};
  c.N = gdn::num_sequences(c.s, c.o);
  check_state(h0, "h0", c.N, c.s);
  c.in = {q.data(), k.data(), v.data(), g.data(), beta.data(), h0 ? h0->data() : nullptr};
  return c;
}

std::tuple<Out, Out> forward(const Arr& q, const Arr& k, const Arr& v, const Arr& g, const Arr& beta,
                             const std::optional<Arr>& h0, std::optional<double> scale, bool l2norm,
                             const std::optional<std::vector<int64_t>>& cu_seqlens) {
  const Call c = prepare(q, k, v, g, beta, h0, scale, l2norm, cu_seqlens);
  gdn::Forward f = gdn::forward(c.s, c.o, c.in);
  const size_t B = c.s.B, T = c.s.T, HV = c.s.HV, K = c.s.K, V = c.s.V, N = c.N;
  return {to_numpy(std::move(f.o), {B, T, HV, V}), to_numpy(std::move(f.ht), {N, HV, K, V})};
}

std::tuple<Out, Out, Out, Out, Out, Out> backward(const Arr& q, const Arr& k, const Arr& v, const Arr& g,
                                                  const Arr& beta, const std::optional<Arr>& h0, const Arr& d_o,
                                                  const std::optional<Arr>& dht, std::optional<double> scale, bool l2norm,
                                                  const std::optional<std::vector<int64_t>>& cu_seqlens) {
  const Call c = prepare(q, k, v, g, beta, h0, scale, l2norm, cu_seqlens);
  check_state(dht, "dht", c.N, c.s);
  KV_CHECK(d_o.ndim() == 4 && (int64_t)d_o.shape(0) == c.s.B && (int64_t)d_o.shape(1) == c.s.T &&
               (int64_t)d_o.shape(2) == c.s.HV && (int64_t)d_o.shape(3) == c.s.V,
           "do must be [B,T,HV,V] like o%s", "");
  gdn::Grads r = gdn::backward(c.s, c.o, c.in, d_o.data(), dht ? dht->data() : nullptr);
  const size_t B = c.s.B, T = c.s.T, H = c.s.H, HV = c.s.HV, K = c.s.K, V = c.s.V, N = c.N;
  return {to_numpy(std::move(r.dq), {B, T, H, K}),   to_numpy(std::move(r.dk), {B, T, H, K}),
          to_numpy(std::move(r.dv), {B, T, HV, V}),  to_numpy(std::move(r.dg), {B, T, HV}),
          to_numpy(std::move(r.dbeta), {B, T, HV}), to_numpy(std::move(r.dh0), {N, HV, K, V})};
}

}  // namespace

void register_gdn(nb::module_& m) {
  m.def("gdn_oracle_forward", &forward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"), nb::arg("beta"),
        nb::arg("h0").none(), nb::arg("scale").none() = nb::none(), nb::arg("l2norm") = false, nb::arg("cu_seqlens").none() = nb::none(),
        "fp64 GDN recurrence (gdn/include/kverify/gdn/oracle.hpp). q, k [B,T,H,K], v [B,T,HV,V], g, beta [B,T,HV],\n"
        "h0 [N,HV,K,V] or None: contiguous float64 CPU arrays; scale None means K**-0.5. Returns (o [B,T,HV,V],\n"
        "ht [N,HV,K,V]) as NumPy float64. Raises ValueError naming the field for bad shapes or cu_seqlens.");
  m.def("gdn_oracle_backward", &backward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"), nb::arg("beta"),
        nb::arg("h0").none(), nb::arg("do"), nb::arg("dht").none(), nb::arg("scale").none() = nb::none(), nb::arg("l2norm") = false,
        nb::arg("cu_seqlens").none() = nb::none(),
        "Reverse pass of gdn_oracle_forward for L = sum(do*o) + sum(dht*ht); returns (dq, dk, dv, dg, dbeta, dh0)\n"
        "as NumPy float64 with the shapes of q, k, v, g, beta and [N,HV,K,V]. Raises ValueError as forward.");
}

}  // namespace kverify::bind
