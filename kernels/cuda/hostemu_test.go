package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gochat-ai/gochat/kernels/kerneltest"
)

// TestFlashKernelsOnHostEmulation runs the flash attention kernels of
// cu/attention.cu (forward, dq, dk/dv) on the CPU under
// testdata/host_emu.h — every CUDA thread a std::thread, __syncthreads a
// barrier, shared memory shared — and checks out, lse and dqkv against
// kerneltest's float64 references, with padding, fully masked rows,
// grouped heads and T not a multiple of the tiles. It checks the kernels'
// indexing, tiling, barriers and arithmetic on a machine without a GPU (not
// their speed, nor NVRTC's compilation: gpu-check.sh runs the conformance
// suite on a GPU). It skips when there is no C++20 g++.
func TestFlashKernelsOnHostEmulation(t *testing.T) {
	bin := buildEmulation(t, "testdata/flash_emu_main.cpp")
	rng := rand.New(rand.NewPCG(3, 4))
	for _, s := range []struct{ b, t, nh, nkv, hs int }{{2, 19, 4, 2, 16}, {1, 9, 3, 3, 8}, {2, 17, 2, 1, 32}, {1, 1, 1, 1, 8}} {
		w, cq := (s.nh+2*s.nkv)*s.hs, s.nh*s.hs
		masks := map[string][]int32{"nil": nil}
		left, holes := make([]int32, s.b*s.t), make([]int32, s.b*s.t)
		for bi := range s.b {
			pad := (3 * bi) % (s.t + 1)
			if bi == 1 {
				pad = s.t // a row of nothing but padding
			}
			for j := range s.t {
				if j >= pad {
					left[bi*s.t+j] = 1
				}
				if rng.IntN(3) != 0 {
					holes[bi*s.t+j] = 1
				}
			}
		}
		masks["left"], masks["holes"] = left, holes
		for mname, mask := range masks {
			name := fmt.Sprintf("b=%d t=%d nh=%d nkv=%d hs=%d mask=%s", s.b, s.t, s.nh, s.nkv, s.hs, mname)
			qkv, dout := randn(rng, s.b*s.t*w), randn(rng, s.b*s.t*cq)
			var in bytes.Buffer
			hasMask := 0
			if mask != nil {
				hasMask = 1
			}
			binary.Write(&in, binary.LittleEndian, []int32{int32(s.b), int32(s.t), int32(s.nh), int32(s.nkv), int32(s.hs), int32(hasMask)})
			binary.Write(&in, binary.LittleEndian, qkv)
			binary.Write(&in, binary.LittleEndian, dout)
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
			if len(got) != s.b*s.t*cq+s.b*s.nh*s.t+s.b*s.t*w {
				t.Fatalf("%s: %d values back", name, len(got))
			}
			out, lse, dqkv := got[:s.b*s.t*cq], got[s.b*s.t*cq:s.b*s.t*cq+s.b*s.nh*s.t], got[s.b*s.t*cq+s.b*s.nh*s.t:]
			x, dy := kerneltest.F64(qkv), kerneltest.F64(dout)
			ro, _ := kerneltest.RefGQAAttentionForward(x, mask, s.b, s.t, s.nh, s.nkv, s.hs)
			for _, c := range []struct {
				what      string
				got       []float32
				want      []float64
				tolerance float64
			}{
				{"out", out, ro, 1e-5},
				{"lse", lse, kerneltest.RefAttentionLSE(x, mask, s.b, s.t, s.nh, s.nkv, s.hs), 1e-5},
				{"dqkv", dqkv, kerneltest.RefGQAAttentionBackward(dy, x, mask, s.b, s.t, s.nh, s.nkv, s.hs), 2e-5},
			} {
				if e, at := maxRelErr(c.got, c.want); !(e <= c.tolerance) {
					t.Errorf("%s %s: error %.3g relative to the largest value at [%d]: got %g, want %g", name, c.what, e, at, c.got[at], c.want[at])
				}
			}
		}
	}
}

// buildEmulation compiles the NVRTC program under testdata/host_emu.h
// with the driver main (a testdata/*_main.cpp) into a binary in a
// temporary folder and returns its path; it skips the test when there is
// no C++20 g++.
func buildEmulation(t *testing.T, main string) string {
	t.Helper()
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("no g++ to build the emulation with")
	}
	var src bytes.Buffer
	for _, f := range []string{"testdata/host_emu.h", "", main} {
		if f == "" {
			src.WriteString(programSource())
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
		src.WriteByte('\n')
	}
	dir := t.TempDir()
	cpp, bin := filepath.Join(dir, "emu.cpp"), filepath.Join(dir, "emu")
	if err := os.WriteFile(cpp, src.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cxx, "-std=c++20", "-O1", "-pthread", "-w", "-o", bin, cpp).CombinedOutput(); err != nil {
		t.Skipf("g++ -std=c++20 could not build the emulation: %v\n%s", err, out)
	}
	return bin
}

func randn(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// maxRelErr is max|got-want| / max|want| and where the largest difference
// is (NaN counts as the largest).
func maxRelErr(got []float32, want []float64) (float64, int) {
	var d, s float64
	at := 0
	for i, w := range want {
		e := math.Abs(float64(got[i]) - w)
		if e > d || math.IsNaN(e) {
			d, at = e, i
			if math.IsNaN(e) {
				return math.NaN(), i
			}
		}
		s = max(s, math.Abs(w))
	}
	return d / max(s, 1e-30), at
}
