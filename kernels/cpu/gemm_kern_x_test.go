package cpu

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func xThreadCPU() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

func TestXKernelPeak(t *testing.T) {
	if os.Getenv("XBENCH") == "" {
		t.Skip()
	}
	for _, kc := range []int{128, 256, 384} {
		a := make([]float32, 14*kc+64)
		b := make([]float32, 32*kc*16+64)
		c := make([]float32, 14*32)
		best := 0.0
		for rep := 0; rep < 20; rep++ {
			t0 := time.Now()
			const iters = 2000
			for i := 0; i < iters; i++ {
				gemmTile14x32AVX512(kc, &a[0], &b[(i%16)*32*kc], &c[0], 32, 0)
			}
			g := 2 * 14 * 32 * float64(kc) * iters / time.Since(t0).Seconds() / 1e9
			best = max(best, g)
		}
		t.Logf("kc=%d best %.1f GFLOP/s", kc, best)
	}
}

// single-thread GFLOP/s by thread CPU time (robust to a loaded machine)
func TestXSerial(t *testing.T) {
	if os.Getenv("XBENCH") == "" {
		t.Skip()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	kern0 := *gemmKernelFor(bestISA())
	kern := &kern0
	if v := os.Getenv("XKC"); v != "" {
		fmt.Sscan(v, &kern.kc)
	}
	if v := os.Getenv("XNC"); v != "" {
		fmt.Sscan(v, &kern.nc)
	}
	if v := os.Getenv("XMC"); v != "" {
		fmt.Sscan(v, &kern.mc)
	}
	shapes := gemmBenchShapes
	if os.Getenv("XQUICK") != "" {
		shapes = [][3]int{{512, 768, 768}, {512, 768, 3072}, {2048, 2048, 2048}}
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range shapes {
		for _, v := range []string{"nn", "nt", "tn"} {
			if os.Getenv("XQUICK") != "" && v != "nt" {
				continue
			}
			m, n, k := s[0], s[1], s[2]
			ta, tb := v[0] == 't', v[1] == 't'
			lda, ldb := k, n
			if ta {
				lda = m
			}
			if tb {
				ldb = k
			}
			a, bb, c := gemmRand(r, m*k), gemmRand(r, k*n), make([]float32, m*n)
			var gs []float64
			for rep := 0; rep < 7; rep++ {
				t0 := xThreadCPU()
				gemm(kern, 1, ta, tb, m, n, k, 1, a, lda, bb, ldb, 0, c, n)
				gs = append(gs, 2*float64(m*n*k)/(xThreadCPU()-t0).Seconds()/1e9)
			}
			sort.Float64s(gs)
			fmt.Printf("%dx%dx%d %s: median %.1f max %.1f\n", m, n, k, v, gs[len(gs)/2], gs[len(gs)-1])
		}
	}
}

func TestXAllocs(t *testing.T) {
	if os.Getenv("XBENCH") == "" {
		t.Skip()
	}
	d, _ := New(Options{Threads: 2})
	a, b, c := make(F32, 512*768), make(F32, 768*768), make(F32, 512*768)
	n := testing.AllocsPerRun(20, func() { d.Gemm(false, true, 512, 768, 768, 1, a, 768, b, 768, 0, c, 768) })
	d1, _ := New(Options{Threads: 1})
	n1 := testing.AllocsPerRun(20, func() { d1.Gemm(false, true, 512, 768, 768, 1, a, 768, b, 768, 0, c, 768) })
	x := make(F32, 768)
	ng := testing.AllocsPerRun(20, func() { d.Gemm(false, true, 1, 768, 768, 1, x, 768, b, 768, 0, x, 768) })
	t.Logf("allocs per call: t2 %v t1 %v gemv %v", n, n1, ng)
}
