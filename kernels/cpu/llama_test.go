package cpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

func randF32(r *rand.Rand, n int) cpu.F32 {
	x := make(cpu.F32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: [%d] = %g, want exactly %g", what, i, got[i], want[i])
		}
	}
}

// TestLlamaThreadCountInvariance checks that the LLaMA-family kernels give
// bitwise the same results for any thread count (RMSNormBackward's column
// sums and GQAAttentionBackward's per-group sums included).
func TestLlamaThreadCountInvariance(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	const n, c = 300, 70
	const b, T, nh, nkv, hs, tmax = 2, 33, 6, 2, 32, 40
	w := (nh + 2*nkv) * hs
	x, wt, dout := randF32(r, n*c), randF32(r, c), randF32(r, n*c)
	qkv := randF32(r, b*T*w)
	dattn := randF32(r, b*T*nh*hs)
	mask := make(cpu.I32, b*T)
	mmax := make(cpu.I32, b*tmax)
	for bi := range b {
		for j := 5 * bi; j < T; j++ {
			mask[bi*T+j], mmax[bi*tmax+j] = 1, 1
		}
	}
	inv, err := kernels.RoPEInvFreq(hs, 1e4, kernels.RoPEScaling{})
	if err != nil {
		t.Fatal(err)
	}
	cs, sn := kernels.RoPETable(inv, T)
	pos := make(cpu.I32, b*T)
	for i := range pos {
		pos[i] = int32(i % T)
	}
	run := func(threads int) [][]float32 {
		d, err := cpu.New(cpu.Options{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		out, rstd := make(cpu.F32, n*c), make(cpu.F32, n)
		d.RMSNormForward(out, rstd, x, wt, n, c, 1e-6)
		dx, dw := make(cpu.F32, n*c), make(cpu.F32, c)
		d.RMSNormBackward(dx, dw, dout, x, wt, rstd, n, c)
		hout, hr := make(cpu.F32, b*T*w), make(cpu.F32, b*T*nh)
		d.HeadRMSNormForward(hout, hr, qkv, wt[:hs], b*T, nh, hs, w, 1e-6)
		hdx, hdw := append(cpu.F32(nil), qkv...), make(cpu.F32, hs)
		d.HeadRMSNormBackward(hdx, hdw, hdx, qkv, wt[:hs], hr, b*T, nh, hs, w)
		rq := append(cpu.F32(nil), qkv...)
		d.RoPEForward(rq, pos, cpu.F32(cs), cpu.F32(sn), b*T, nh+nkv, hs, w)
		sw := make(cpu.F32, n*c/2)
		d.SwiGLUForward(sw, x, n, c/2)
		dsw := make(cpu.F32, n*c)
		d.SwiGLUBackward(dsw, dout[:n*c/2], x, n, c/2)
		ao, att := make(cpu.F32, b*T*nh*hs), make(cpu.F32, b*nh*T*T)
		d.GQAAttentionForward(ao, att, qkv, mask, b, T, nh, nkv, hs)
		dqkv := make(cpu.F32, len(qkv))
		d.GQAAttentionBackward(dqkv, dattn, qkv, att, mask, b, T, nh, nkv, hs)
		kc, vc := make(cpu.F32, b*nkv*tmax*hs), make(cpu.F32, b*nkv*tmax*hs)
		do := make(cpu.F32, b*T*nh*hs)
		d.GQAAttentionDecode(do, qkv, kc, vc, mmax, b, T, 0, tmax, nh, nkv, hs)
		return [][]float32{out, rstd, dx, dw, hout, hr, hdx, hdw, rq, sw, dsw, ao, att, dqkv, kc, vc, do}
	}
	want := run(1)
	for _, th := range []int{2, 3, 8} {
		got := run(th)
		for k := range want {
			sameBits(t, fmt.Sprintf("threads=%d result %d", th, k), got[k], want[k])
		}
	}
}

// TestGQADecodeBitwise checks that GQAAttentionDecode, in one chunk or a
// token at a time, reproduces GQAAttentionForward bit for bit wherever the
// query sees a real key, on every ISA.
func TestGQADecodeBitwise(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, isa := range []string{"", "avx2", "generic"} {
		d, err := cpu.New(cpu.Options{Threads: 2, ISA: isa})
		if err != nil && isa == "avx2" {
			t.Log("skipping:", err)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, hs := range []int{64, 24} {
			const b, T, nh, nkv, tmax = 2, 23, 6, 2, 30
			w, cq := (nh+2*nkv)*hs, nh*hs
			qkv := randF32(r, b*T*w)
			mask := make(cpu.I32, b*T)
			mmax := make(cpu.I32, b*tmax)
			for bi := range b {
				for j := 3 * bi; j < T; j++ {
					mask[bi*T+j], mmax[bi*tmax+j] = 1, 1
				}
			}
			mask[T+10], mmax[tmax+10] = 0, 0 // a hole
			out, att := make(cpu.F32, b*T*cq), make(cpu.F32, b*nh*T*T)
			d.GQAAttentionForward(out, att, qkv, mask, b, T, nh, nkv, hs)
			kc, vc := make(cpu.F32, b*nkv*tmax*hs), make(cpu.F32, b*nkv*tmax*hs)
			all := make(cpu.F32, b*T*cq)
			d.GQAAttentionDecode(all, qkv, kc, vc, mmax, b, T, 0, tmax, nh, nkv, hs)
			sameBits(t, fmt.Sprintf("isa=%q hs=%d prefill", isa, hs), all, out)
			clear(kc)
			clear(vc)
			o1 := make(cpu.F32, b*cq)
			for ti := range T {
				one := make(cpu.F32, b*w)
				for bi := range b {
					copy(one[bi*w:(bi+1)*w], qkv[(bi*T+ti)*w:])
				}
				d.GQAAttentionDecode(o1, one, kc, vc, mmax, b, 1, ti, tmax, nh, nkv, hs)
				for bi := range b {
					if ti < 3*bi {
						continue // fully masked: uniform over ti+1 keys, not T
					}
					sameBits(t, fmt.Sprintf("isa=%q hs=%d token %d batch %d", isa, hs, ti, bi), o1[bi*cq:(bi+1)*cq], out[(bi*T+ti)*cq:(bi*T+ti+1)*cq])
				}
			}
		}
	}
}

// TestGQAIsRepeatedKV checks grouped-query attention against multi-head
// attention (AttentionForward/Backward, NKV = NH) on the same queries with
// each key/value head repeated for its group, as transformers' repeat_kv
// does: the outputs, probabilities and query gradients bit for bit, and
// each key/value head's gradient the sum of its copies' (to rounding: the
// group is summed row by row rather than copy by copy).
func TestGQAIsRepeatedKV(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	d, err := cpu.New(cpu.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	const b, T, nh, nkv, hs = 3, 19, 4, 2, 16
	rep, w, c := nh/nkv, (nh+2*nkv)*hs, nh*hs
	qkv, dout := randF32(r, b*T*w), randF32(r, b*T*c)
	mask := make(cpu.I32, b*T)
	for i := range mask {
		mask[i] = int32(min(1, i%T/3))
	}
	// The same attention with every KV head repeated: [B,T,3C].
	full := make(cpu.F32, b*T*3*c)
	for row := range b * T {
		src, dst := qkv[row*w:(row+1)*w], full[row*3*c:(row+1)*3*c]
		copy(dst[:c], src[:c])
		for h := range nh {
			kv := h / rep
			copy(dst[c+h*hs:c+(h+1)*hs], src[(nh+kv)*hs:(nh+kv+1)*hs])
			copy(dst[2*c+h*hs:2*c+(h+1)*hs], src[(nh+nkv+kv)*hs:(nh+nkv+kv+1)*hs])
		}
	}
	o1, a1, o2, a2 := make(cpu.F32, b*T*c), make(cpu.F32, b*nh*T*T), make(cpu.F32, b*T*c), make(cpu.F32, b*nh*T*T)
	d.AttentionForward(o1, a1, full, mask, b, T, nh, hs)
	d.GQAAttentionForward(o2, a2, qkv, mask, b, T, nh, nkv, hs)
	sameBits(t, "out", o2, o1)
	sameBits(t, "att", a2, a1)
	d1, d2 := make(cpu.F32, len(full)), make(cpu.F32, len(qkv))
	d.AttentionBackward(d1, dout, full, a1, mask, b, T, nh, hs)
	d.GQAAttentionBackward(d2, dout, qkv, a2, mask, b, T, nh, nkv, hs)
	worst := 0.0
	for row := range b * T {
		g, m := d2[row*w:(row+1)*w], d1[row*3*c:(row+1)*3*c]
		sameBits(t, "dq", g[:c], m[:c])
		for part := 1; part <= 2; part++ {
			for kv := range nkv {
				for i := range hs {
					var sum float64
					for h := kv * rep; h < (kv+1)*rep; h++ {
						sum += float64(m[part*c+h*hs+i])
					}
					got := float64(g[(nh+(part-1)*nkv+kv)*hs+i])
					worst = math.Max(worst, math.Abs(got-sum)/math.Max(math.Abs(sum), 1e-3))
				}
			}
		}
	}
	if worst > 1e-4 { // measured 3.4e-5: float32 sums in another order
		t.Errorf("dk/dv differ from the repeated heads' sums by %.3g relative", worst)
	}
}

// TestLlamaOpsRefuseBadShapes checks the CPU's panics on arguments the
// contract rules out, which name the problem.
func TestLlamaOpsRefuseBadShapes(t *testing.T) {
	d, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	cs, sn := make(cpu.F32, 10*4), make(cpu.F32, 10*4)
	for _, c := range []struct {
		name, want string
		fn         func()
	}{
		{"position past the table", "position 10 of row 1 is outside the table of 10 positions", func() {
			d.RoPEForward(make(cpu.F32, 2*8), cpu.I32{0, 10}, cs, sn, 2, 1, 8, 8)
		}},
		{"negative position", "position -1", func() {
			d.RoPEBackward(make(cpu.F32, 2*8), cpu.I32{-1, 0}, cs, sn, 2, 1, 8, 8)
		}},
		{"odd head size", "odd head size", func() {
			d.RoPEForward(make(cpu.F32, 7), cpu.I32{0}, cs, sn, 1, 1, 7, 7)
		}},
		{"NH not a multiple of NKV", "NH must be a positive multiple of NKV", func() {
			d.GQAAttentionForward(make(cpu.F32, 40), make(cpu.F32, 40), make(cpu.F32, 100), nil, 1, 1, 3, 2, 4)
		}},
		{"heads wider than the row", "heads of 8 in rows of 10", func() {
			d.HeadRMSNormForward(make(cpu.F32, 20), make(cpu.F32, 4), make(cpu.F32, 20), nil, 2, 2, 8, 10, 1e-6)
		}},
		{"decode past Tmax", "past Tmax", func() {
			d.GQAAttentionDecode(make(cpu.F32, 8), make(cpu.F32, 24), make(cpu.F32, 16), make(cpu.F32, 16), nil, 1, 1, 4, 4, 1, 1, 8)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(fmt.Sprint(r), c.want) {
					t.Fatalf("panic %v, want one containing %q", r, c.want)
				}
			}()
			c.fn()
		})
	}
}

// BenchmarkGQAAttention times the grouped-query attention on OPT-125m's
// attention shape with all heads (NKV = NH, comparable with
// BenchmarkAttention) and with 4 KV heads, and a Llama-3.2-1B-like head
// layout (NH 32, NKV 8).
func BenchmarkGQAAttention(b *testing.B) {
	for _, s := range [][5]int{{4, 128, 12, 12, 64}, {4, 128, 12, 4, 64}, {1, 256, 32, 8, 64}} {
		bsz, t, nh, nkv, hs := s[0], s[1], s[2], s[3], s[4]
		w := (nh + 2*nkv) * hs
		qkv := benchRandn(bsz*t*w, 1)
		mask := make(cpu.I32, bsz*t)
		for i := range mask {
			mask[i] = 1
		}
		mask[0], mask[1] = 0, 0 // some left padding
		out, att := make(cpu.F32, bsz*t*nh*hs), make(cpu.F32, bsz*nh*t*t)
		dout, dqkv := benchRandn(bsz*t*nh*hs, 1), make(cpu.F32, len(qkv))
		shape := fmt.Sprintf("B=%d,T=%d,NH=%d,NKV=%d,HS=%d", bsz, t, nh, nkv, hs)
		b.Run("Forward/"+shape, func(b *testing.B) {
			benchISAs(b, []string{""}, func(b *testing.B, d *cpu.Device) {
				for b.Loop() {
					d.GQAAttentionForward(out, att, qkv, mask, bsz, t, nh, nkv, hs)
				}
				b.ReportMetric(attnFlops(bsz, t, nh, hs)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		})
		b.Run("Backward/"+shape, func(b *testing.B) {
			benchISAs(b, []string{""}, func(b *testing.B, d *cpu.Device) {
				d.GQAAttentionForward(out, att, qkv, mask, bsz, t, nh, nkv, hs)
				for b.Loop() {
					d.GQAAttentionBackward(dqkv, dout, qkv, att, mask, bsz, t, nh, nkv, hs)
				}
				b.ReportMetric(2*attnFlops(bsz, t, nh, hs)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		})
	}
}
