// The fp64 GDN oracle: token-by-token recurrence and its reverse pass (formulas in oracle.hpp).
#include "kverify/gdn/oracle.hpp"

#include <algorithm>
#include <cmath>

#include "kverify/common/check.hpp"

namespace kverify::gdn {
namespace {

constexpr int64_t kSegment = 64;  // tokens between state checkpoints in the reverse pass

struct Seq {
  int64_t batch, t0, t1;  // tokens [t0, t1) of batch row `batch`
};

std::vector<Seq> sequences(const Shape& s, const Options& opt) {
  KV_CHECK(s.B >= 1 && s.T >= 1 && s.H >= 1 && s.HV >= 1 && s.K >= 1 && s.V >= 1,
           "shape B=%lld T=%lld H=%lld HV=%lld K=%lld V=%lld: every size must be >= 1", (long long)s.B,
           (long long)s.T, (long long)s.H, (long long)s.HV, (long long)s.K, (long long)s.V);
  KV_CHECK(s.HV % s.H == 0, "HV=%lld must be a multiple of H=%lld (grouped value heads)", (long long)s.HV,
           (long long)s.H);
  std::vector<Seq> out;
  if (opt.cu_seqlens.empty()) {
    for (int64_t b = 0; b < s.B; ++b) out.push_back({b, 0, s.T});
    return out;
  }
  const auto& cu = opt.cu_seqlens;
  KV_CHECK(s.B == 1, "cu_seqlens needs B == 1 (sequences packed along T), got B=%lld", (long long)s.B);
  KV_CHECK(cu.size() >= 2, "cu_seqlens needs at least 2 offsets, got %zu", cu.size());
  KV_CHECK(cu.front() == 0 && cu.back() == s.T, "cu_seqlens must start at 0 and end at T=%lld (got %lld .. %lld)",
           (long long)s.T, (long long)cu.front(), (long long)cu.back());
  for (size_t n = 0; n + 1 < cu.size(); ++n) {
    KV_CHECK(cu[n] <= cu[n + 1], "cu_seqlens must not decrease (offset %zu: %lld > %lld)", n, (long long)cu[n],
             (long long)cu[n + 1]);
    out.push_back({0, cu[n], cu[n + 1]});
  }
  return out;
}

void check_inputs(const Inputs& in) {
  KV_CHECK(in.q && in.k && in.v && in.g && in.beta, "q, k, v, g and beta are required (h0 is optional)%s", "");
}

/// q̂ or k̂ for every (b, t, h): x itself, or x r with r = (xᵀx + eps)^{-1/2} (r kept for the
/// reverse pass; 1 without the norm).
struct Normed {
  std::vector<double> x, r;
};

Normed normalise(const double* x, int64_t rows, int64_t K, bool on, double eps) {
  Normed n{std::vector<double>(x, x + rows * K), std::vector<double>(rows, 1.0)};
  if (!on) return n;
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < K; ++i) ss += x[r * K + i] * x[r * K + i];
    n.r[r] = 1.0 / std::sqrt(ss + eps);
    for (int64_t i = 0; i < K; ++i) n.x[r * K + i] *= n.r[r];
  }
  return n;
}

/// dx = r (dy − y (yᵀ dy)) per row, in place of dy (identity without the norm).
void normalise_backward(std::vector<double>& dy, const Normed& n, int64_t K, bool on) {
  if (!on) return;
  const int64_t rows = static_cast<int64_t>(n.r.size());
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0.0;
    for (int64_t i = 0; i < K; ++i) dot += n.x[r * K + i] * dy[r * K + i];
    for (int64_t i = 0; i < K; ++i) dy[r * K + i] = n.r[r] * (dy[r * K + i] - n.x[r * K + i] * dot);
  }
}

/// Everything one (sequence, value head) needs: pointers to its token rows and sizes.
struct Head {
  const Shape& s;
  const double *qn, *kn, *v, *g, *beta;
  int64_t batch, hv, h;
  int64_t qk_row(int64_t t) const { return ((batch * s.T + t) * s.H + h) * s.K; }
  int64_t v_row(int64_t t) const { return ((batch * s.T + t) * s.HV + hv) * s.V; }
  int64_t gate(int64_t t) const { return (batch * s.T + t) * s.HV + hv; }
};

/// S <- e^{g}(I − β k kᵀ) S + β k vᵀ for token t (u = Sᵀk is scratch of size V).
void step(const Head& hd, int64_t t, std::vector<double>& S, std::vector<double>& u) {
  const int64_t K = hd.s.K, V = hd.s.V;
  const double* k = hd.kn + hd.qk_row(t);
  const double* v = hd.v + hd.v_row(t);
  const double a = std::exp(hd.g[hd.gate(t)]), b = hd.beta[hd.gate(t)];
  std::fill(u.begin(), u.end(), 0.0);
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < V; ++j) u[j] += k[i] * S[i * V + j];
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < V; ++j) S[i * V + j] = a * (S[i * V + j] - b * k[i] * u[j]) + b * k[i] * v[j];
}

double resolved_scale(const Shape& s, const Options& opt) {
  return opt.scale.value_or(1.0 / std::sqrt(static_cast<double>(s.K)));
}

}  // namespace

int64_t num_sequences(const Shape& s, const Options& opt) { return static_cast<int64_t>(sequences(s, opt).size()); }

Forward forward(const Shape& s, const Options& opt, const Inputs& in) {
  const auto seqs = sequences(s, opt);
  check_inputs(in);
  const int64_t K = s.K, V = s.V, G = s.HV / s.H, N = static_cast<int64_t>(seqs.size());
  const double scale = resolved_scale(s, opt);
  const Normed qn = normalise(in.q, s.B * s.T * s.H, K, opt.l2norm_qk, opt.l2_eps);
  const Normed kn = normalise(in.k, s.B * s.T * s.H, K, opt.l2norm_qk, opt.l2_eps);
  Forward f{std::vector<double>(s.B * s.T * s.HV * V, 0.0), std::vector<double>(N * s.HV * K * V, 0.0)};
  std::vector<double> S(K * V), u(V);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t hv = 0; hv < s.HV; ++hv) {
      const Head hd{s, qn.x.data(), kn.x.data(), in.v, in.g, in.beta, seqs[n].batch, hv, hv / G};
      const int64_t st = (n * s.HV + hv) * K * V;
      if (in.h0) std::copy(in.h0 + st, in.h0 + st + K * V, S.begin());
      else std::fill(S.begin(), S.end(), 0.0);
      for (int64_t t = seqs[n].t0; t < seqs[n].t1; ++t) {
        step(hd, t, S, u);
        const double* q = hd.qn + hd.qk_row(t);
        double* o = f.o.data() + hd.v_row(t);
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < V; ++j) o[j] += scale * q[i] * S[i * V + j];
      }
      std::copy(S.begin(), S.end(), f.ht.begin() + st);
    }
  }
  return f;
}

Grads backward(const Shape& s, const Options& opt, const Inputs& in, const double* d_o, const double* dht) {
  const auto seqs = sequences(s, opt);
  check_inputs(in);
  KV_CHECK(d_o != nullptr, "do (the gradient of o) is required%s", "");
  const int64_t K = s.K, V = s.V, G = s.HV / s.H, N = static_cast<int64_t>(seqs.size());
  const double scale = resolved_scale(s, opt);
  const Normed qn = normalise(in.q, s.B * s.T * s.H, K, opt.l2norm_qk, opt.l2_eps);
  const Normed kn = normalise(in.k, s.B * s.T * s.H, K, opt.l2norm_qk, opt.l2_eps);
  const int64_t nqk = s.B * s.T * s.H * K, ngate = s.B * s.T * s.HV;
  Grads gr{std::vector<double>(nqk, 0.0), std::vector<double>(nqk, 0.0), std::vector<double>(ngate * V, 0.0),
           std::vector<double>(ngate, 0.0), std::vector<double>(ngate, 0.0), std::vector<double>(N * s.HV * K * V, 0.0)};
  std::vector<double> dS(K * V), u(V), w(V), dSk(V), dSw(K), Pd(K);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t0 = seqs[n].t0, len = seqs[n].t1 - seqs[n].t0;
    const int64_t nseg = (len + kSegment - 1) / kSegment;
    for (int64_t hv = 0; hv < s.HV; ++hv) {
      const Head hd{s, qn.x.data(), kn.x.data(), in.v, in.g, in.beta, seqs[n].batch, hv, hv / G};
      const int64_t st = (n * s.HV + hv) * K * V;
      // forward once, keeping the state at the start of every segment
      std::vector<std::vector<double>> ckpt(std::max<int64_t>(nseg, 1), std::vector<double>(K * V, 0.0));
      std::vector<double> S(K * V, 0.0);
      if (in.h0) std::copy(in.h0 + st, in.h0 + st + K * V, S.begin());
      for (int64_t c = 0; c < nseg; ++c) {
        ckpt[c] = S;
        for (int64_t t = t0 + c * kSegment; t < std::min(t0 + (c + 1) * kSegment, t0 + len); ++t) step(hd, t, S, u);
      }
      if (dht) std::copy(dht + st, dht + st + K * V, dS.begin());
      else std::fill(dS.begin(), dS.end(), 0.0);
      for (int64_t c = nseg - 1; c >= 0; --c) {
        const int64_t a0 = t0 + c * kSegment, a1 = std::min(a0 + kSegment, t0 + len);
        std::vector<std::vector<double>> states{ckpt[c]};  // states[i] = S before token a0 + i
        for (int64_t t = a0; t < a1; ++t) {
          states.push_back(states.back());
          step(hd, t, states.back(), u);
        }
        for (int64_t t = a1 - 1; t >= a0; --t) {
          const std::vector<double>& P = states[t - a0];
          const std::vector<double>& St = states[t - a0 + 1];
          const double* q = hd.qn + hd.qk_row(t);
          const double* k = hd.kn + hd.qk_row(t);
          const double* v = in.v + hd.v_row(t);
          const double* dov = d_o + hd.v_row(t);
          const double ea = std::exp(in.g[hd.gate(t)]), b = in.beta[hd.gate(t)];
          double* dq = gr.dq.data() + hd.qk_row(t);
          double* dk = gr.dk.data() + hd.qk_row(t);
          double* dv = gr.dv.data() + hd.v_row(t);
          for (int64_t i = 0; i < K; ++i) {  // o_t = S_tᵀ (s q): dS += s q doᵀ, dq += s S_t do
            double acc = 0.0;
            for (int64_t j = 0; j < V; ++j) {
              dS[i * V + j] += scale * q[i] * dov[j];
              acc += St[i * V + j] * dov[j];
            }
            dq[i] += scale * acc;
          }
          std::fill(u.begin(), u.end(), 0.0);
          std::fill(dSk.begin(), dSk.end(), 0.0);
          for (int64_t i = 0; i < K; ++i)
            for (int64_t j = 0; j < V; ++j) {
              u[j] += k[i] * P[i * V + j];
              dSk[j] += k[i] * dS[i * V + j];
            }
          for (int64_t j = 0; j < V; ++j) {
            w[j] = v[j] - ea * u[j];
            dv[j] += b * dSk[j];
          }
          double dbeta = 0.0, dg = 0.0;
          for (int64_t i = 0; i < K; ++i) {
            double sw = 0.0, pd = 0.0;
            for (int64_t j = 0; j < V; ++j) {
              sw += dS[i * V + j] * w[j];
              pd += P[i * V + j] * dSk[j];
              dg += dS[i * V + j] * (St[i * V + j] - b * k[i] * v[j]);
            }
            dSw[i] = sw;
            Pd[i] = pd;
            dbeta += k[i] * sw;
          }
          for (int64_t i = 0; i < K; ++i) dk[i] += b * (dSw[i] - ea * Pd[i]);
          gr.dbeta[hd.gate(t)] += dbeta;
          gr.dg[hd.gate(t)] += dg;
          for (int64_t i = 0; i < K; ++i)  // ∂L/∂S_{t−1} = e^{g}(dS − β k (kᵀ dS))
            for (int64_t j = 0; j < V; ++j) dS[i * V + j] = ea * (dS[i * V + j] - b * k[i] * dSk[j]);
        }
      }
      std::copy(dS.begin(), dS.end(), gr.dh0.begin() + st);
    }
  }
  normalise_backward(gr.dq, qn, K, opt.l2norm_qk);
  normalise_backward(gr.dk, kn, K, opt.l2norm_qk);
  return gr;
}

}  // namespace kverify::gdn
