package tensor

import (
	"archive/zip"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkParse parses data as the checkpoint file name and reads every tensor that is not huge.
// Whatever the input, nothing may panic, and every error must be an *Error naming the file.
func checkParse(t *testing.T, name string, data []byte) {
	es, err := readFile(name, bytes.NewReader(data), int64(len(data)))
	check := func(err error) {
		if err == nil {
			return
		}
		var te *Error
		if !errors.As(err, &te) || !strings.Contains(err.Error(), name) {
			t.Fatalf("error %q (%T) does not name the file", err, err)
		}
	}
	check(err)
	c := &Checkpoint{entries: map[string]*entry{}}
	for _, e := range es {
		if c.entries[e.info.Name] != nil {
			t.Fatalf("tensor %q listed twice", e.info.Name)
		}
		c.entries[e.info.Name] = e
		if e.info.DType.Size() == 0 || int64(e.info.Numel()) != e.numel {
			t.Fatalf("tensor %q: bad info %+v (numel %d)", e.info.Name, e.info, e.numel)
		}
		if e.numel > 1<<20 { // a legal stride-0 view can be huge; the caller sees Info first
			continue
		}
		if e.info.DType.IsFloat() {
			check(c.ReadF32(e.info.Name, make([]float32, e.numel)))
		} else {
			_, err := c.ReadI64(e.info.Name)
			check(err)
		}
	}
}

func addFiles(f *testing.F, pattern string) {
	paths, err := filepath.Glob(pattern)
	if err != nil || len(paths) == 0 {
		f.Fatalf("no seed files match %s", pattern)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func FuzzSafetensors(f *testing.F) {
	addFiles(f, "testdata/*.safetensors")
	addFiles(f, "testdata/*_st/*.safetensors")
	f.Add(stFile(`{}`, nil))
	f.Add(stFile(`{"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}`, []byte{1, 2, 3, 4}))
	f.Add(stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)))
	f.Add(stFile(`{"a":{"dtype":"I64","shape":[],"data_offsets":[0,8]},"__metadata__":{"k":"v"}}`, make([]byte, 8)))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParse(t, "fuzz.safetensors", data)
	})
}

func FuzzBin(f *testing.F) {
	addFiles(f, "testdata/*.bin")
	addFiles(f, "testdata/*_bin/*.bin")
	f32, err := os.ReadFile("testdata/pt_f32.bin")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(rezip(f, f32, zip.Deflate, nil))
	f.Add(f32[:len(f32)/2])
	f.Add(withPickle(f, newPK().op('}', '(').str("a").op('u').bytes()))
	f.Add(withPickle(f, newPK().op('}').str("v").tensor("HalfStorage", "0", 48, 1, []int{3, 2}, []int{1, 3}).op('s').bytes()))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParse(t, "fuzz.bin", data)
	})
}

// FuzzPickle mutates just the data.pkl of a pytorch_model.bin, which reaches the unpickler far
// more often than mutating the whole zip (whose checksums reject most mutations).
func FuzzPickle(f *testing.F) {
	src, err := os.ReadFile("testdata/pt_f32.bin")
	if err != nil {
		f.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(src), int64(len(src)))
	if err != nil {
		f.Fatal(err)
	}
	type file struct {
		name string
		data []byte
	}
	var files []file
	for _, zf := range zr.File {
		rc, _ := zf.Open()
		b, _ := io.ReadAll(rc)
		rc.Close()
		files = append(files, file{zf.Name, b})
		if zf.Name == "pt_f32/data.pkl" {
			f.Add(b)
		}
	}
	for _, p := range []string{"testdata/pt_f16.bin", "testdata/pt_bf16.bin"} {
		b := readFileT(f, p)
		zr, _ := zip.NewReader(bytes.NewReader(b), int64(len(b)))
		for _, zf := range zr.File {
			if strings.HasSuffix(zf.Name, "data.pkl") {
				rc, _ := zf.Open()
				pkl, _ := io.ReadAll(rc)
				rc.Close()
				f.Add(pkl)
			}
		}
	}
	f.Add(newPK().op('}', '(').str("p").global("torch._utils", "_rebuild_parameter").op('(').
		tensor("FloatStorage", "0", 24, 0, []int{2, 2}, []int{1, 2}).op(0x88, '}', 't', 'R').op('u').bytes())
	f.Add(newPK().op('}').str("e").tensor("LongStorage", "11", 1, 0, []int{1 << 20, 4}, []int{0, 0}).op('s').bytes())
	f.Fuzz(func(t *testing.T, pkl []byte) {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		for _, fl := range files {
			w, _ := zw.CreateHeader(&zip.FileHeader{Name: fl.name, Method: zip.Store})
			if fl.name == "pt_f32/data.pkl" {
				w.Write(pkl)
			} else {
				w.Write(fl.data)
			}
		}
		zw.Close()
		checkParse(t, "fuzz.bin", buf.Bytes())
	})
}
