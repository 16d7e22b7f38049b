// Control for bench/cu_headers.py (kverify narrow header, opt-in): the narrow header must show as
// DIFFERENT host code here. at::var(x, int dim) and at::std(x, int dim) are declared only in
// ATen/Functions.h; without it the int converts to `bool unbiased` and another overload runs.
#include <torch/extension.h>
__global__ void k(float* y, const float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }
double probe_abs(double d) { return abs(d); }
torch::Tensor probe_var(torch::Tensor x) { return torch::var(x, 1); }
torch::Tensor probe_std(torch::Tensor x) { return at::std(x, 0); }
