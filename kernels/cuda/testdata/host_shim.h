// Host C++ stand-ins for the CUDA built-ins the kernels use, enough to
// type-check the NVRTC program with g++ -fsyntax-only (hostcpp_test.go).
#include <cmath>
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
struct uint3_ { unsigned int x, y, z; };
static uint3_ blockIdx, threadIdx, blockDim, gridDim;
inline void __syncthreads() {}
template <class T> T __shfl_xor_sync(unsigned, T v, int) { return v; }
inline int atomicMin(int* p, int v) { int o = *p; if (v < o) *p = v; return o; }
inline float atomicAdd(float* p, float v) { float o = *p; *p += v; return o; }
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline float __uint_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned x; std::memcpy(&x, &f, 4); return x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
using std::erf; using std::exp; using std::sqrt; using std::log; using std::fma; using std::fabs;
inline float expf(float x) { return std::exp(x); }
inline float fmaxf(float a, float b) { return std::fmax(a, b); }
inline float fabsf(float a) { return std::fabs(a); }
