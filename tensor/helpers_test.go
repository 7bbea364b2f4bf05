package tensor

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// expectedTensor is one tensor of testdata/expected.json, written by
// scripts/gen_tensor_fixtures.py from PyTorch: float values as float32 bit patterns.
type expectedTensor struct {
	DType DType    `json:"dtype"`
	Shape []int    `json:"shape"`
	F32   []uint32 `json:"f32"`
	I64   []int64  `json:"i64"`
}

type expectedFile struct {
	Convert struct {
		F32  []uint32 `json:"f32"`
		F16  []uint16 `json:"f16"`
		BF16 []uint16 `json:"bf16"`
	} `json:"convert"`
	Files map[string]map[string]expectedTensor
}

var loadExpected = sync.OnceValues(func() (*expectedFile, error) {
	b, err := os.ReadFile("testdata/expected.json")
	if err != nil {
		return nil, err
	}
	var e expectedFile
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	e.Files = map[string]map[string]expectedTensor{}
	for k, v := range all {
		if k == "convert" {
			continue
		}
		var m map[string]expectedTensor
		if err := json.Unmarshal(v, &m); err != nil {
			return nil, err
		}
		e.Files[k] = m
	}
	return &e, nil
})

func expected(t testing.TB) *expectedFile {
	t.Helper()
	e, err := loadExpected()
	if err != nil {
		t.Fatalf("testdata/expected.json (regenerate with /usr/bin/python3 scripts/gen_tensor_fixtures.py): %v", err)
	}
	return e
}

func bitsToF32(b []uint32) []float32 {
	out := make([]float32, len(b))
	for i, x := range b {
		out[i] = math.Float32frombits(x)
	}
	return out
}

// sameF32 reports whether two float32 values have the same bits, or are both NaN.
func sameF32(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

// writeTemp writes data to name in a fresh temporary directory and returns the path.
func writeTemp(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readFileT(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wantErr checks that err is an *Error naming file (and tensor, if not empty) whose message
// contains every one of subs.
func wantErr(t testing.TB, err error, file, tensor string, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one naming %s %q and containing %q", file, tensor, subs)
	}
	msg := err.Error()
	t.Log(msg)
	var te *Error
	if !errors.As(err, &te) {
		t.Errorf("error %q is a %T, want *Error", msg, err)
	} else if tensor != "" && te.Tensor != tensor {
		t.Errorf("error %q: Tensor = %q, want %q", msg, te.Tensor, tensor)
	}
	if !strings.Contains(msg, file) {
		t.Errorf("error %q does not name the file %s", msg, file)
	}
	if tensor != "" && !strings.Contains(msg, strconv.Quote(tensor)) {
		t.Errorf("error %q does not name the tensor %q", msg, tensor)
	}
	for _, s := range subs {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q does not contain %q", msg, s)
		}
	}
}

// readAll reads every tensor of c: floats as float32, the rest as int64.
func readAll(t testing.TB, c *Checkpoint) (map[string][]float32, map[string][]int64) {
	t.Helper()
	fs, is := map[string][]float32{}, map[string][]int64{}
	for _, name := range c.Names() {
		info, _ := c.Info(name)
		if info.DType.IsFloat() {
			dst := make([]float32, info.Numel())
			if err := c.ReadF32(name, dst); err != nil {
				t.Fatal(err)
			}
			fs[name] = dst
		} else {
			v, err := c.ReadI64(name)
			if err != nil {
				t.Fatal(err)
			}
			is[name] = v
		}
	}
	return fs, is
}

// checkAgainst compares every tensor of c with the expected values of one fixture: same names,
// dtypes, shapes and exactly the same values.
func checkAgainst(t *testing.T, c *Checkpoint, want map[string]expectedTensor) {
	t.Helper()
	names := c.Names()
	if len(names) != len(want) {
		t.Errorf("%d tensors %q, want %d", len(names), names, len(want))
	}
	for name, w := range want {
		info, ok := c.Info(name)
		if !ok {
			t.Errorf("tensor %q missing", name)
			continue
		}
		if info.DType != w.DType || !equalInts(info.Shape, w.Shape) {
			t.Errorf("%q: %s %v, want %s %v", name, info.DType, info.Shape, w.DType, w.Shape)
			continue
		}
		if w.DType.IsFloat() {
			got := make([]float32, info.Numel())
			if err := c.ReadF32(name, got); err != nil {
				t.Errorf("ReadF32(%q): %v", name, err)
				continue
			}
			for i, x := range bitsToF32(w.F32) {
				if !sameF32(got[i], x) {
					t.Errorf("%q[%d] = %v (%#08x), want %v (%#08x)", name, i, got[i],
						math.Float32bits(got[i]), x, math.Float32bits(x))
					break
				}
			}
		} else {
			got, err := c.ReadI64(name)
			if err != nil {
				t.Errorf("ReadI64(%q): %v", name, err)
				continue
			}
			if !equalInts(got, w.I64) {
				t.Errorf("%q = %v, want %v", name, got, w.I64)
			}
		}
	}
}

func equalInts[T int | int64](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
