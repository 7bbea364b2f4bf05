package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"testing"

	"github.com/gochat-ai/gochat/kernels/kerneltest"
)

// TestFlashDecodeOnHostEmulation runs the decoding kernels of
// cu/attention.cu (k_kv_cache_write, k_flash_decode and, split over the
// keys, k_flash_decode_combine) on the CPU under testdata/host_emu.h and
// checks out against kerneltest's float64 decode references and the
// caches against qkv: a prompt prefill (t0 = 0, tn = T), one new token
// (tn = 1, t0 > 0), a chunk (tn > 1, t0 > 0), in AttentionDecode's OPT
// layout and GQAAttentionDecode's head-major one with several groupings,
// positions not a multiple of the tiles, without a mask, with left padding
// (a batch row that is only padding: fully masked queries) and with holes.
// Each case runs unsplit, with decodeSplits' choice, and with the keys
// forced over several splits (some of them empty for the first query
// tile). Cache positions past t0+tn hold NaN: reading one shows. It skips
// when there is no C++20 g++.
func TestFlashDecodeOnHostEmulation(t *testing.T) {
	bin := buildEmulation(t, "testdata/decode_emu_main.cpp")
	rng := rand.New(rand.NewPCG(5, 6))
	type decCase struct {
		name                         string
		b, nh, nkv, hs, t0, tn, tmax int
		headMajor                    bool
	}
	cases := []decCase{
		{"prefill", 2, 4, 2, 16, 0, 19, 23, true},
		{"prefill opt", 2, 3, 3, 8, 0, 21, 21, false},
		{"one token", 3, 6, 1, 16, 37, 1, 41, true},
		{"one token opt", 2, 2, 2, 32, 44, 1, 50, false},
		{"chunk", 2, 4, 4, 8, 21, 5, 30, true},
		{"chunk opt", 3, 2, 2, 16, 30, 9, 40, false},
		{"chunk two tiles", 1, 6, 3, 24, 23, 17, 45, true},
	}
	worst := 0.0
	defer func() { t.Logf("largest error relative to |want|+rms: %.3g", worst) }()
	for _, c := range cases {
		nk := c.t0 + c.tn
		w := (c.nh + 2*c.nkv) * c.hs
		masks := map[string][]int32{"nil": nil}
		left, holes := make([]int32, c.b*c.tmax), make([]int32, c.b*c.tmax)
		for bi := range c.b {
			pad := []int{5, nk, 0}[bi%3] // row 1: padding only, every query fully masked
			for j := range c.tmax {
				if j >= pad && j < nk {
					left[bi*c.tmax+j] = 1
				}
				if j >= nk || rng.IntN(3) != 0 { // past nk: never read
					holes[bi*c.tmax+j] = 1
				}
			}
		}
		masks["left"], masks["holes"] = left, holes
		kc0, vc0 := make([]float32, c.b*c.tmax*c.nkv*c.hs), make([]float32, c.b*c.tmax*c.nkv*c.hs)
		at := func(bi, g, pos, d int) int {
			if c.headMajor {
				return ((bi*c.nkv+g)*c.tmax+pos)*c.hs + d
			}
			return (bi*c.tmax+pos)*c.nkv*c.hs + g*c.hs + d
		}
		nan := float32(math.NaN())
		for bi := range c.b {
			for g := range c.nkv {
				for pos := range c.tmax {
					for d := range c.hs {
						k, v := nan, nan
						if pos < c.t0 {
							k, v = float32(rng.NormFloat64()), float32(rng.NormFloat64())
						}
						kc0[at(bi, g, pos, d)], vc0[at(bi, g, pos, d)] = k, v
					}
				}
			}
		}
		qkv := randn(rng, c.b*c.tn*w)
		// The caches after the write, for the references and to compare.
		kcw, vcw := append([]float32(nil), kc0...), append([]float32(nil), vc0...)
		for bi := range c.b {
			for i := range c.tn {
				for g := range c.nkv {
					for d := range c.hs {
						row := qkv[(bi*c.tn+i)*w:]
						kcw[at(bi, g, c.t0+i, d)] = row[(c.nh+g)*c.hs+d]
						vcw[at(bi, g, c.t0+i, d)] = row[(c.nh+c.nkv+g)*c.hs+d]
					}
				}
			}
		}
		forced := (nk + 2) / 3 // three splits, the last short
		forced = (forced + decTK - 1) / decTK * decTK
		auto, autoChunk := decodeSplits(c.b, c.tn, nk, c.nh)
		splits := [][2]int{{1, nk}, {auto, autoChunk}, {(nk + forced - 1) / forced, forced}, {4, decTK * ((nk + 3*decTK - 1) / (3 * decTK))}}
		for mname, mask := range masks {
			var want []float64
			if c.headMajor {
				want = kerneltest.RefGQAAttentionDecode(kerneltest.F64(qkv), kerneltest.F64(kcw), kerneltest.F64(vcw), mask, c.b, c.tn, c.t0, c.tmax, c.nh, c.nkv, c.hs)
			} else {
				want = kerneltest.RefAttentionDecode(kerneltest.F64(qkv), kerneltest.F64(kcw), kerneltest.F64(vcw), mask, c.b, c.tn, c.t0, c.tmax, c.nh, c.hs)
			}
			for _, sp := range splits {
				name := fmt.Sprintf("%s b=%d nh=%d nkv=%d hs=%d t0=%d tn=%d tmax=%d mask=%s nsplit=%d chunk=%d",
					c.name, c.b, c.nh, c.nkv, c.hs, c.t0, c.tn, c.tmax, mname, sp[0], sp[1])
				out, kc, vc := runDecodeEmulation(t, bin, name, c.b, c.tn, c.t0, c.tmax, c.nh, c.nkv, c.hs, c.headMajor, sp[0], sp[1], qkv, kc0, vc0, mask)
				if e, at := maxRelErr(out, want); !(e <= 2e-6) {
					t.Errorf("%s out: error %.3g relative to the largest value at [%d]: got %g, want %g", name, e, at, out[at], want[at])
				}
				if r := rmsRelErr(out, want); !(r <= 2e-6) { // kerneltest.RTol / 5
					t.Errorf("%s out: error %.3g relative to |want|+rms (kerneltest's measure)", name, r)
				} else {
					worst = max(worst, r)
				}
				for what, p := range map[string][2][]float32{"kcache": {kc, kcw}, "vcache": {vc, vcw}} {
					for i := range p[0] {
						if math.Float32bits(p[0][i]) != math.Float32bits(p[1][i]) {
							t.Errorf("%s %s[%d] = %g, want %g", name, what, i, p[0][i], p[1][i])
							break
						}
					}
				}
			}
		}
	}
}

// rmsRelErr is kerneltest.Env.Close's measure: the largest |got-want| /
// (|want| + rms(want)), NaN where a value is NaN.
func rmsRelErr(got []float32, want []float64) float64 {
	var ss float64
	for _, w := range want {
		ss += w * w
	}
	rms := math.Sqrt(ss / float64(max(1, len(want))))
	worst := 0.0
	for i, w := range want {
		d := math.Abs(float64(got[i]) - w)
		if math.IsNaN(d) {
			return math.NaN()
		}
		worst = max(worst, d/(math.Abs(w)+rms+1e-300))
	}
	return worst
}

// runDecodeEmulation runs testdata/decode_emu_main.cpp's program bin on one
// decode call and returns out and the caches it leaves.
func runDecodeEmulation(t *testing.T, bin, name string, b, tn, t0, tmax, nh, nkv, hs int, headMajor bool, nsplit, chunk int,
	qkv, kc, vc []float32, mask []int32) (out, kcOut, vcOut []float32) {
	t.Helper()
	var in bytes.Buffer
	hm, hasMask := 0, 0
	if headMajor {
		hm = 1
	}
	if mask != nil {
		hasMask = 1
	}
	binary.Write(&in, binary.LittleEndian, []int32{int32(b), int32(tn), int32(t0), int32(tmax), int32(nh), int32(nkv), int32(hs),
		int32(hm), int32(nsplit), int32(chunk), int32(hasMask)})
	binary.Write(&in, binary.LittleEndian, qkv)
	binary.Write(&in, binary.LittleEndian, kc)
	binary.Write(&in, binary.LittleEndian, vc)
	if mask != nil {
		binary.Write(&in, binary.LittleEndian, mask)
	}
	cmd := exec.Command(bin)
	cmd.Stdin = &in
	res, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	got := make([]float32, len(res)/4)
	binary.Read(bytes.NewReader(res), binary.LittleEndian, got)
	no := b * tn * nh * hs
	if len(got) != no+len(kc)+len(vc) {
		t.Fatalf("%s: %d values back", name, len(got))
	}
	return got[:no], got[no : no+len(kc)], got[no+len(kc):]
}

// TestDecodeSplits: split-K only for small grids over long caches; the
// splits cover the keys in whole tiles, none of them starting past the
// last key, and a grid never gets more than decMaxSplits of them.
func TestDecodeSplits(t *testing.T) {
	for _, c := range []struct {
		b, tn, nk, nh int
		split         bool
	}{
		{1, 1, 4096, 12, true},
		{1, 1, 100, 12, false},  // a short cache
		{8, 1, 4096, 32, false}, // enough blocks already
		{2, 1, 2048, 8, true},
		{1, 40, 4096, 4, true},
		{1, 1, 1 << 20, 1, true},
		{1, 1, 511, 1, false},
		{1, 1, 512, 1, true},
		{1, 7, 1000, 3, true},
	} {
		n, chunk := decodeSplits(c.b, c.tn, c.nk, c.nh)
		name := fmt.Sprintf("b=%d tn=%d nk=%d nh=%d: %d splits of %d", c.b, c.tn, c.nk, c.nh, n, chunk)
		switch {
		case (n > 1) != c.split:
			t.Errorf("%s, want split %v", name, c.split)
		case n == 1 && chunk < c.nk:
			t.Errorf("%s: keys left out", name)
		case n > 1 && (chunk%decTK != 0 || chunk < decMinChunk-decTK || n*chunk < c.nk || (n-1)*chunk >= c.nk || n > decMaxSplits):
			t.Errorf("%s: bad cover of %d keys", name, c.nk)
		case n > 1 && ((c.tn+decTQ-1)/decTQ*c.nh*c.b)*n > decTargetBlocks+(c.tn+decTQ-1)/decTQ*c.nh*c.b:
			t.Errorf("%s: more blocks than needed", name)
		}
	}
}
