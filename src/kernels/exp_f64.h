// exp(x) in float64 built from single-rounded +, * and exact scaling only, so host code and CUDA
// device code get the same bits (libm's and CUDA's exp differ in the last place now and then): the
// host and device samplers then agree on every draw, not only away from rounding boundaries.
#pragma once

#include <cmath>

#ifdef __CUDACC__
#define DEEPINFER_HOST_DEVICE __host__ __device__
#else
#define DEEPINFER_HOST_DEVICE
#endif

namespace deepinfer::kernels {

// Device code would otherwise fuse a * b + c into one rounding; the host compiler targets x86-64
// without FMA, so its plain operators round each step.
DEEPINFER_HOST_DEVICE inline double mul_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

DEEPINFER_HOST_DEVICE inline double add_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

// Within ~2 ulp of e^x. x = k ln2 + r with |r| <= ln2 / 2 (ln2 split so k * hi is exact), e^r by
// its Taylor series to r^13 (the next term is below 2^-60), then scaled by 2^k.
DEEPINFER_HOST_DEVICE inline double exp_f64(double x) {
  if (!(x > -746.0)) return x != x ? x : 0.0;  // NaN stays NaN; e^x underflows to 0
  if (x > 709.0) return HUGE_VAL;
  constexpr double kLog2e = 1.44269504088896338700e+00;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 32 significant bits
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const double k = floor(add_rn(mul_rn(x, kLog2e), 0.5));
  const double r = add_rn(add_rn(x, -mul_rn(k, kLn2Hi)), -mul_rn(k, kLn2Lo));
  constexpr double kInverseFactorials[] = {1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0,
                                           1.0 / 3628800.0,    1.0 / 362880.0,    1.0 / 40320.0,
                                           1.0 / 5040.0,       1.0 / 720.0,       1.0 / 120.0,
                                           1.0 / 24.0,         1.0 / 6.0,         0.5,
                                           1.0,                1.0};
  double p = kInverseFactorials[0];
  for (int i = 1; i < 14; ++i) p = add_rn(mul_rn(p, r), kInverseFactorials[i]);
  return ldexp(p, static_cast<int>(k));
}

}  // namespace deepinfer::kernels

#undef DEEPINFER_HOST_DEVICE
