package cpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/kernels/kerneltest"
)

// TestConformance runs the backend-independent suite on the CPU device with
// several thread counts, with the AVX2 code paths (on an AVX-512 CPU too)
// and with the portable Go code paths. Run includes the bf16 tier
// (subtests bf16/...), so the bf16 matmuls run on the best ISA (the native
// AVX512_BF16 path where the CPU has one) and on the portable one.
func TestConformance(t *testing.T) {
	for _, cfg := range []cpu.Options{
		{Threads: 1},
		{Threads: 2},
		{Threads: 3},
		{Threads: 2, ISA: "avx2"},
		{Threads: 2, ISA: "generic"},
	} {
		t.Run(fmt.Sprintf("threads=%d,isa=%s", cfg.Threads, isaName(cfg)), func(t *testing.T) {
			kerneltest.Run(t, newDevice(t, cfg))
		})
	}
}

// newDevice returns cpu.New(o), skipping t when the CPU lacks the ISA asked
// for (an AVX2 run on a CPU without it, or on another architecture).
func newDevice(t *testing.T, o cpu.Options) *cpu.Device {
	t.Helper()
	d, err := cpu.New(o)
	if err != nil {
		if o.ISA != "" && o.ISA != "generic" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	return d
}

func isaName(o cpu.Options) string {
	if o.ISA == "" {
		return "best"
	}
	return o.ISA
}

// TestThreadCountInvariance checks that results are bitwise identical for
// any thread count, including the reductions (EmbeddingBackward's scatter,
// LayerNormBackward's column sums, SumSquares) and dropout's generator.
func TestThreadCountInvariance(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	randn := func(n int) cpu.F32 {
		x := make(cpu.F32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	const n, c, v = 300, 70, 40
	ids := make(cpu.I32, n)
	for i := range ids {
		ids[i] = int32(r.IntN(v))
	}
	dout, inp, w := randn(n*c), randn(n*c), randn(c)
	big := randn(300007)
	qkv := randn(2 * 33 * 3 * 64)
	mask := make(cpu.I32, 2*33)
	for i := range mask {
		mask[i] = int32(min(1, i%33/4))
	}
	run := func(threads int) [][]float32 {
		d, err := cpu.New(cpu.Options{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		dt := make(cpu.F32, v*c)
		d.EmbeddingBackward(dt, dout, ids, n, c)
		out, mean, rstd := make(cpu.F32, n*c), make(cpu.F32, n), make(cpu.F32, n)
		d.LayerNormForward(out, mean, rstd, inp, w, nil, n, c, 1e-5)
		dx, dw, db := make(cpu.F32, n*c), make(cpu.F32, c), make(cpu.F32, c)
		d.LayerNormBackward(dx, dw, db, dout, inp, w, mean, rstd, n, c)
		ss := d.SumSquares(big)
		dr, sc := make(cpu.F32, len(big)), make(cpu.F32, len(big))
		d.DropoutForward(dr, sc, big, 0.1, 99, len(big))
		ao, att := make(cpu.F32, 2*33*64), make(cpu.F32, 2*33*33)
		d.AttentionForward(ao, att, qkv, mask, 2, 33, 1, 64)
		dqkv := make(cpu.F32, len(qkv))
		d.AttentionBackward(dqkv, ao, qkv, att, mask, 2, 33, 1, 64)
		return [][]float32{dt, out, mean, rstd, dx, dw, db, {float32(ss), float32(ss - float64(float32(ss)))}, dr, sc, ao, att, dqkv}
	}
	want := run(1)
	for _, th := range []int{2, 3, 8} {
		got := run(th)
		for k := range want {
			for i := range want[k] {
				if math.Float32bits(got[k][i]) != math.Float32bits(want[k][i]) {
					t.Fatalf("threads=%d: result %d differs at [%d]: %g vs %g", th, k, i, got[k][i], want[k][i])
				}
			}
		}
	}
}

// TestDecodeBitwise checks the CPU's stronger promise: KV-cache decoding, in
// one chunk or one token at a time, reproduces AttentionForward bit for bit
// at every position whose query sees a real key.
func TestDecodeBitwise(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, isa := range []string{"", "avx2", "generic"} {
		d, err := cpu.New(cpu.Options{Threads: 2, ISA: isa})
		if err != nil && isa == "avx2" {
			t.Log("skipping:", err) // no AVX2 here
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, hs := range []int{64, 24} {
			const b, T, nh, tmax = 2, 23, 3, 30
			c := nh * hs
			qkv := make(cpu.F32, b*T*3*c)
			for i := range qkv {
				qkv[i] = float32(r.NormFloat64())
			}
			mask := make(cpu.I32, b*T)
			mmax := make(cpu.I32, b*tmax)
			for bi := range b {
				for j := 3 * bi; j < T; j++ {
					mask[bi*T+j], mmax[bi*tmax+j] = 1, 1
				}
			}
			mmax[tmax+10], mask[T+10] = 0, 0 // a hole
			out, att := make(cpu.F32, b*T*c), make(cpu.F32, b*nh*T*T)
			d.AttentionForward(out, att, qkv, mask, b, T, nh, hs)

			kc, vc := make(cpu.F32, b*tmax*c), make(cpu.F32, b*tmax*c)
			all := make(cpu.F32, b*T*c)
			d.AttentionDecode(all, qkv, kc, vc, mmax, b, T, 0, tmax, nh, hs)
			for i := range out {
				if math.Float32bits(all[i]) != math.Float32bits(out[i]) {
					t.Fatalf("isa=%q hs=%d: prefill [%d] = %g, forward %g", isa, hs, i, all[i], out[i])
				}
			}
			clear(kc)
			clear(vc)
			one, o1 := make(cpu.F32, b*3*c), make(cpu.F32, b*c)
			for ti := range T {
				for bi := range b {
					copy(one[bi*3*c:(bi+1)*3*c], qkv[(bi*T+ti)*3*c:])
				}
				d.AttentionDecode(o1, one, kc, vc, mmax, b, 1, ti, tmax, nh, hs)
				for bi := range b {
					if ti < 3*bi {
						continue // fully masked: uniform over ti+1 keys, not T
					}
					for j := range c {
						if got, want := o1[bi*c+j], out[(bi*T+ti)*c+j]; math.Float32bits(got) != math.Float32bits(want) {
							t.Fatalf("isa=%q hs=%d: token %d batch %d [%d] = %g, forward %g", isa, hs, ti, bi, j, got, want)
						}
					}
				}
			}
		}
	}
}
