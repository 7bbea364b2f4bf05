package tensor

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stFile assembles a safetensors file from a header string (used as is, no padding) and data.
func stFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func f32Bytes(xs ...float32) []byte {
	var b []byte
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// TestWriteMatchesGolden writes the tensors of testdata/golden.safetensors — laid out by
// scripts/gen_tensor_fixtures.py as the Hugging Face library does, with PyTorch's fp16/bf16
// roundings — from their float32 source values and compares the bytes.
func TestWriteMatchesGolden(t *testing.T) {
	e := expected(t)
	golden, src := e.Files["golden.safetensors"], e.Files["golden.safetensors.source"]
	var tensors []WriteTensor
	for name, w := range golden {
		vals := w.F32
		if s, ok := src[name]; ok {
			vals = s.F32
		}
		tensors = append(tensors, WriteTensor{Name: name, DType: w.DType, Shape: w.Shape, F32: bitsToF32(vals)})
	}
	p := filepath.Join(t.TempDir(), "out.safetensors")
	if err := WriteSafetensors(p, tensors, nil); err != nil {
		t.Fatal(err)
	}
	got, want := readFileT(t, p), readFileT(t, "testdata/golden.safetensors")
	if !bytes.Equal(got, want) {
		n := min(len(got), len(want))
		i := 0
		for i < n && got[i] == want[i] {
			i++
		}
		t.Fatalf("written file differs from golden at byte %d (len %d vs %d)\n got: %q\nwant: %q",
			i, len(got), len(want), got[i:min(i+80, len(got))], want[i:min(i+80, len(want))])
	}
	c, err := Open("testdata/golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkAgainst(t, c, golden)
}

// TestWriteMatchesHFVectors checks the writer against the byte vectors in the Hugging Face
// safetensors crate's own tests (test_serialization, test_serialization_forced_alignement,
// test_empty).
func TestWriteMatchesHFVectors(t *testing.T) {
	data := f32Bytes(0, 1, 2, 3, 4, 5)
	vals := []float32{0, 1, 2, 3, 4, 5}
	for _, c := range []struct {
		name     string
		tensors  []WriteTensor
		metadata map[string]string
		want     []byte
	}{
		{"serialization", []WriteTensor{{Name: "attn.0", DType: F32, Shape: []int{1, 2, 3}, F32: vals}}, map[string]string{},
			stFile(`{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}`, data)},
		{"forced alignment", []WriteTensor{{Name: "attn0", DType: F32, Shape: []int{1, 1, 2, 3}, F32: vals}}, map[string]string{},
			stFile(`{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}       `, data)},
		{"empty", nil, map[string]string{}, stFile(`{}      `, nil)},
		{"empty with metadata", nil, map[string]string{"framework": "pt"},
			stFile(`{"__metadata__":{"framework":"pt"}}     `, nil)},
		{"default metadata", nil, nil, stFile(`{"__metadata__":{"format":"pt"}}`, nil)},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "x.safetensors")
			if err := WriteSafetensors(p, c.tensors, c.metadata); err != nil {
				t.Fatal(err)
			}
			if got := readFileT(t, p); !bytes.Equal(got, c.want) {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestSafetensorsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var tensors []WriteTensor
	for i, dt := range []DType{F32, F16, BF16, F32, BF16, F16} {
		shape := [][]int{{3, 5}, {7}, {2, 1, 3}, {}, {0, 4}, {1}}[i]
		n := Info{Shape: shape}.Numel()
		vals := make([]float32, n)
		for j := range vals {
			vals[j] = float32(r.NormFloat64() * 100)
		}
		tensors = append(tensors, WriteTensor{Name: strings.Repeat("t", i+1) + "." + string(dt), DType: dt, Shape: shape, F32: vals})
	}
	p := filepath.Join(t.TempDir(), "rt.safetensors")
	if err := WriteSafetensors(p, tensors, map[string]string{"b": "2", "a": "quote\"tab\t"}); err != nil {
		t.Fatal(err)
	}

	raw := readFileT(t, p)
	n := binary.LittleEndian.Uint64(raw)
	header := raw[8 : 8+n]
	if n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", n)
	}
	trimmed := bytes.TrimRight(header, " ")
	if len(header)-len(trimmed) >= 8 || trimmed[len(trimmed)-1] != '}' {
		t.Errorf("header not padded with fewer than 8 spaces after the JSON: %q", header)
	}
	var h map[string]json.RawMessage
	if err := json.Unmarshal(header, &h); err != nil {
		t.Fatal(err)
	}
	if string(h["__metadata__"]) != `{"a":"quote\"tab\t","b":"2"}` {
		t.Errorf("__metadata__ = %s", h["__metadata__"])
	}

	c, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Names()) != len(tensors) {
		t.Fatalf("names %q", c.Names())
	}
	for _, w := range tensors {
		info, ok := c.Info(w.Name)
		if !ok || info.DType != w.DType || !equalInts(info.Shape, w.Shape) || info.File != p {
			t.Fatalf("Info(%q) = %+v, %v", w.Name, info, ok)
		}
		got := make([]float32, len(w.F32))
		if err := c.ReadF32(w.Name, got); err != nil {
			t.Fatal(err)
		}
		for j, x := range w.F32 {
			want := x
			switch w.DType {
			case F16:
				want = F16ToF32(F32ToF16(x))
			case BF16:
				want = BF16ToF32(F32ToBF16(x))
			}
			if got[j] != want {
				t.Errorf("%s[%d] = %v, want %v", w.Name, j, got[j], want)
			}
		}
	}
}

func TestReadDTypes(t *testing.T) {
	c, err := Open("testdata/dtypes.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkAgainst(t, c, expected(t).Files["dtypes.safetensors"])
}

func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "model.safetensors")
	if err := os.WriteFile(p, []byte("old contents"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A failing write leaves the old file alone and no temporary behind.
	err := WriteSafetensors(p, []WriteTensor{{Name: "x", DType: F32, Shape: []int{2}, F32: []float32{1}}}, nil)
	wantErr(t, err, p, "x", "2 elements but 1 values")
	if got := readFileT(t, p); string(got) != "old contents" {
		t.Errorf("failed write changed the file: %q", got)
	}
	// A successful write replaces it.
	if err := WriteSafetensors(p, []WriteTensor{{Name: "x", DType: F16, Shape: []int{1}, F32: []float32{1}}}, nil); err != nil {
		t.Fatal(err)
	}
	c, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %q, want only model.safetensors", names)
	}
	err = WriteSafetensors(filepath.Join(dir, "no/such/dir/x.safetensors"), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "no/such/dir/x.safetensors") {
		t.Errorf("write into a missing directory: %v", err)
	}
}

// TestWriteTee: the tee of WriteSafetensorsTee sees exactly the bytes of the file, for tensors
// given whole and streamed through Read, over more than one chunk.
func TestWriteTee(t *testing.T) {
	big := make([]float32, chunkBytes/4+37) // more than one chunk
	for i := range big {
		big[i] = float32(i) * 0.25
	}
	tensors := []WriteTensor{
		{Name: "whole", DType: BF16, Shape: []int{len(big)}, F32: big},
		{Name: "streamed", DType: F32, Shape: []int{len(big)}, Read: func(off int, dst []float32) { copy(dst, big[off:]) }},
		{Name: "scalar", DType: F16, F32: []float32{3}},
	}
	p := filepath.Join(t.TempDir(), "x.safetensors")
	var tee bytes.Buffer
	if err := WriteSafetensorsTee(p, tensors, nil, &tee); err != nil {
		t.Fatal(err)
	}
	if got := readFileT(t, p); !bytes.Equal(tee.Bytes(), got) {
		t.Errorf("the tee got %d bytes that differ from the %d-byte file", tee.Len(), len(got))
	}
}

func TestWriteErrors(t *testing.T) {
	one := []float32{1}
	for _, c := range []struct {
		name    string
		tensors []WriteTensor
		tensor  string
		sub     string
	}{
		{"dtype", []WriteTensor{{Name: "a", DType: I64, Shape: []int{1}, F32: one}}, "a", "cannot write dtype"},
		{"duplicate", []WriteTensor{{Name: "a", DType: F32, Shape: []int{1}, F32: one}, {Name: "a", DType: F16, Shape: []int{1}, F32: one}}, "a", "duplicate"},
		{"count", []WriteTensor{{Name: "a", DType: F32, Shape: []int{2, 2}, F32: one}}, "a", "4 elements but 1"},
		{"negative", []WriteTensor{{Name: "a", DType: F32, Shape: []int{-1}, F32: one}}, "a", "negative"},
		{"empty name", []WriteTensor{{Name: "", DType: F32, Shape: []int{1}, F32: one}}, "", "invalid tensor name"},
		{"metadata name", []WriteTensor{{Name: "__metadata__", DType: F32, Shape: []int{1}, F32: one}}, "__metadata__", "invalid tensor name"},
		{"utf8", []WriteTensor{{Name: "a\xff", DType: F32, Shape: []int{1}, F32: one}}, "a\xff", "UTF-8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "w.safetensors")
			wantErr(t, WriteSafetensors(p, c.tensors, nil), p, c.tensor, c.sub)
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("failed write created the file (stat: %v)", err)
			}
		})
	}
}

func TestSafetensorsErrors(t *testing.T) {
	golden, err := os.ReadFile("testdata/golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	z := func(n int) []byte { return make([]byte, n) }
	hugeLen := binary.LittleEndian.AppendUint64(nil, 1<<40)
	for _, c := range []struct {
		name   string
		file   []byte
		tensor string
		subs   []string
	}{
		{"short file", []byte{1, 0, 0}, "", []string{"shorter than the 8-byte"}},
		{"empty file", nil, "", []string{"shorter than the 8-byte"}},
		{"absurd header length", append(hugeLen, "{}"...), "", []string{"exceeds"}},
		{"header past end", append(binary.LittleEndian.AppendUint64(nil, 100), `{"a":1}`...), "", []string{"runs past the end"}},
		{"invalid JSON", stFile(`{,}`, nil), "", []string{"invalid header JSON"}},
		{"cut JSON", stFile(`{"a":{"dtype":"F32",`, nil), "a", []string{"invalid header entry"}},
		{"not an object", stFile(`[1,2]`, nil), "", []string{"does not start with '{'"}},
		{"invalid UTF-8", stFile("{\"\xff\":1}", nil), "", []string{"UTF-8"}},
		{"trailing garbage", stFile(`{}xx`, nil), "", []string{"after the JSON object"}},
		{"unknown dtype", stFile(`{"a":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}}`, z(4)), "a", []string{`unknown dtype "F17"`}},
		{"missing field", stFile(`{"a":{"dtype":"F32","shape":[1]}}`, z(4)), "a", []string{"data_offsets"}},
		{"bad entry", stFile(`{"a":{"dtype":"F32","shape":"x","data_offsets":[0,4]}}`, z(4)), "a", []string{"invalid header entry"}},
		{"three offsets", stFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, z(4)), "a", []string{"want 2"}},
		{"end before begin", stFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}`, z(4)), "a", []string{"end before"}},
		{"negative dim", stFile(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, z(4)), "a", []string{"negative"}},
		{"shape overflow", stFile(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, z(4)), "a", []string{"too many elements"}},
		{"size mismatch", stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, z(4)), "a", []string{"shape [2] of F32 needs 2×4 bytes", "hold 4"}},
		{"duplicate name", stFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, z(2)), "a", []string{"duplicate"}},
		{"bad metadata", stFile(`{"__metadata__":{"a":1}}`, nil), "", []string{"__metadata__"}},
		{"overlap", stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, z(12)), "b", []string{"overlap", `"a"`}},
		{"gap", stFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, z(12)), "b", []string{"gap of 4 bytes"}},
		{"not from zero", stFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, z(8)), "a", []string{"gap"}},
		{"trailing data", stFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, z(8)), "", []string{"4 trailing bytes"}},
		{"overrun", stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, z(4)), "a", []string{"run past the end", "truncated"}},
		{"truncated golden", golden[:len(golden)-3], "ünïcödé\tname", []string{"truncated"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := writeTemp(t, "bad.safetensors", c.file)
			ck, err := Open(p)
			if err == nil {
				ck.Close()
			}
			wantErr(t, err, p, c.tensor, c.subs...)
		})
	}
}

func TestReadErrors(t *testing.T) {
	c, err := Open("testdata/dtypes.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const p = "testdata/dtypes.safetensors"
	wantErr(t, c.ReadF32("f64", make([]float32, 2)), p, "f64", "destination has 2 elements", "has 3")
	wantErr(t, c.ReadF32("i64", make([]float32, 3)), p, "i64", "not a float type")
	_, err = c.ReadI64("f64")
	wantErr(t, err, p, "f64", "not an integer type")
	if err := c.ReadF32("nope", nil); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("ReadF32 of a missing tensor: %v", err)
	}
	if _, ok := c.Info("nope"); ok {
		t.Error("Info of a missing tensor says ok")
	}
	// Info returns a copy.
	info, _ := c.Info("i32")
	info.Shape[0] = 99
	if again, _ := c.Info("i32"); again.Shape[0] != 1 {
		t.Error("Info shares its Shape with the checkpoint")
	}
}

func BenchmarkReadF32FromF16(b *testing.B) {
	const n = 1 << 22
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(i%1000) * 0.01
	}
	p := filepath.Join(b.TempDir(), "big.safetensors")
	if err := WriteSafetensors(p, []WriteTensor{{Name: "w", DType: F16, Shape: []int{n}, F32: vals}}, nil); err != nil {
		b.Fatal(err)
	}
	c, err := Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.SetBytes(2 * n)
	for b.Loop() {
		if err := c.ReadF32("w", vals); err != nil {
			b.Fatal(err)
		}
	}
}

// TestWriteStreamed checks that a tensor supplied through Read writes the
// same bytes as one given as a slice.
func TestWriteStreamed(t *testing.T) {
	dir := t.TempDir()
	vals := make([]float32, 3*chunkBytes/4+7) // several chunks and a tail
	for i := range vals {
		vals[i] = float32(i) * 0.5
	}
	a, b := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")
	if err := WriteSafetensors(a, []WriteTensor{{Name: "x", DType: BF16, Shape: []int{len(vals)}, F32: vals}}, nil); err != nil {
		t.Fatal(err)
	}
	read := func(off int, dst []float32) { copy(dst, vals[off:]) }
	if err := WriteSafetensors(b, []WriteTensor{{Name: "x", DType: BF16, Shape: []int{len(vals)}, Read: read}}, nil); err != nil {
		t.Fatal(err)
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Errorf("streamed tensor wrote different bytes (%d vs %d)", len(bb), len(ab))
	}
}
