// A host emulation of the CUDA built-ins, enough to RUN the kernels that
// use only barriers and atomics (no warp shuffles) on the CPU: one block
// at a time, each of its threads a std::thread, __syncthreads a
// std::barrier, __shared__ variables function statics (shared by the
// block's threads, as shared memory is). Slow and only for small inputs:
// hostemu_test.go checks the flash attention kernels' numbers with it on a
// machine without a GPU.
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
struct uint3_ { unsigned int x, y, z; };
static uint3_ blockIdx, blockDim, gridDim;
static thread_local uint3_ threadIdx;
static std::barrier<>* emu_barrier;
static std::mutex emu_mu;
inline void __syncthreads() { emu_barrier->arrive_and_wait(); }
template <class T> T __shfl_xor_sync(unsigned, T, int) { std::abort(); } // not emulated
inline int atomicMin(int* p, int v) { std::lock_guard<std::mutex> l(emu_mu); int o = *p; if (v < o) *p = v; return o; }
inline float atomicAdd(float* p, float v) { std::lock_guard<std::mutex> l(emu_mu); float o = *p; *p += v; return o; }
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline float __uint_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned x; std::memcpy(&x, &f, 4); return x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
using std::erf; using std::exp; using std::sqrt; using std::log; using std::fma; using std::fabs;
inline float expf(float x) { return std::exp(x); }
inline float fmaxf(float a, float b) { return std::fmax(a, b); }
inline float fabsf(float a) { return std::fabs(a); }

// emu_launch runs f over a grid of blocks of `threads` threads.
template <class F> void emu_launch(unsigned gx, unsigned gy, unsigned gz, unsigned threads, F f) {
	blockDim = {threads, 1, 1};
	gridDim = {gx, gy, gz};
	for (unsigned z = 0; z < gz; z++)
		for (unsigned y = 0; y < gy; y++)
			for (unsigned x = 0; x < gx; x++) {
				blockIdx = {x, y, z};
				std::barrier<> bar(threads);
				emu_barrier = &bar;
				std::vector<std::thread> ts;
				for (unsigned i = 0; i < threads; i++) ts.emplace_back([&f, i] { threadIdx = {i, 0, 0}; f(); });
				for (auto& t : ts) t.join();
			}
}
