package tensor

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestSharded reads each sharded fixture through its index and checks it is identical to the
// unsharded file with the same tensors, and to PyTorch's values.
func TestSharded(t *testing.T) {
	want := expected(t).Files["model"]
	for _, c := range []struct{ single, sharded, shard0 string }{
		{"testdata/model_st/model.safetensors", "testdata/sharded_st/model.safetensors.index.json", "model-00001-of-00002.safetensors"},
		{"testdata/model_bin/pytorch_model.bin", "testdata/sharded_bin/pytorch_model.bin.index.json", "pytorch_model-00001-of-00002.bin"},
	} {
		t.Run(filepath.Base(c.sharded), func(t *testing.T) {
			one, err := Open(c.single)
			if err != nil {
				t.Fatal(err)
			}
			defer one.Close()
			many, err := Open(c.sharded)
			if err != nil {
				t.Fatal(err)
			}
			defer many.Close()
			checkAgainst(t, one, want)
			checkAgainst(t, many, want)
			f1, _ := readAll(t, one)
			f2, _ := readAll(t, many)
			for name, v := range f1 {
				if !equalF32(v, f2[name]) {
					t.Errorf("%q: sharded %v, unsharded %v", name, f2[name], v)
				}
			}
			info, _ := many.Info("model.decoder.layers.0.fc1.weight")
			if filepath.Base(info.File) != c.shard0 {
				t.Errorf("Info.File = %s, want the first shard %s", info.File, c.shard0)
			}
		})
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameF32(a[i], b[i]) {
			return false
		}
	}
	return true
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.WriteFile(dst, readFileT(t, src), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOpenDir(t *testing.T) {
	for dir, want := range map[string]string{
		"testdata/model_st":    "model.safetensors",
		"testdata/model_bin":   "pytorch_model.bin",
		"testdata/sharded_st":  "model-00001-of-00002.safetensors",
		"testdata/sharded_bin": "pytorch_model-00001-of-00002.bin",
	} {
		c, err := OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := c.Info("model.decoder.layers.0.fc1.bias")
		if filepath.Base(info.File) != want {
			t.Errorf("OpenDir(%s) read %s, want %s", dir, info.File, want)
		}
		c.Close()
	}

	// model.safetensors wins over pytorch_model.bin.
	dir := t.TempDir()
	copyFile(t, "testdata/model_bin/pytorch_model.bin", filepath.Join(dir, "pytorch_model.bin"))
	copyFile(t, "testdata/model_st/model.safetensors", filepath.Join(dir, "model.safetensors"))
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := c.Info("model.decoder.embed_tokens.weight")
	if filepath.Base(info.File) != "model.safetensors" {
		t.Errorf("OpenDir preferred %s over model.safetensors", info.File)
	}
	c.Close()

	empty := t.TempDir()
	_, err = OpenDir(empty)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenDir of an empty directory: %v, want fs.ErrNotExist", err)
	}
	for _, s := range append([]string{empty}, dirCandidates...) {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("OpenDir error %v does not mention %s", err, s)
		}
	}
}

func TestIndexErrors(t *testing.T) {
	const shard1 = "model-00001-of-00002.safetensors"
	const shard2 = "model-00002-of-00002.safetensors"
	for _, c := range []struct {
		name   string
		index  string
		file   string // the file the error must name; "" means the index
		tensor string
		subs   []string
	}{
		{"missing shard", `{"weight_map":{"a":"model-00003-of-00002.safetensors"}}`, "", "",
			[]string{"model-00003-of-00002.safetensors", "does not exist", `"a"`}},
		{"tensor not in shard", `{"weight_map":{"model.decoder.layers.1.fc1.bias":"` + shard1 + `"}}`, shard1,
			"model.decoder.layers.1.fc1.bias", []string{"not found in the shard"}},
		{"duplicate", `{"weight_map":{"a":"` + shard1 + `","a":"` + shard2 + `"}}`, "", "", []string{`"a" twice`}},
		{"invalid JSON", `{"weight_map":`, "", "", []string{"invalid index JSON"}},
		{"not an object", `[]`, "", "", []string{"invalid index JSON"}},
		{"no weight_map", `{"metadata":{"total_size":1}}`, "", "", []string{"no weight_map"}},
		{"bad shard type", `{"weight_map":{"a":1}}`, "", "", []string{`weight_map["a"]`}},
		{"escaping shard", `{"weight_map":{"a":"../x.safetensors"}}`, "", "a", []string{"not a file name inside"}},
		{"corrupt shard", `{"weight_map":{"a":"bad.safetensors"}}`, "bad.safetensors", "", []string{"shorter than the 8-byte"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, s := range []string{shard1, shard2} {
				copyFile(t, "testdata/sharded_st/"+s, filepath.Join(dir, s))
			}
			os.WriteFile(filepath.Join(dir, "bad.safetensors"), []byte("x"), 0o644)
			ip := filepath.Join(dir, "model.safetensors.index.json")
			if err := os.WriteFile(ip, []byte(c.index), 0o644); err != nil {
				t.Fatal(err)
			}
			file := ip
			if c.file != "" {
				file = filepath.Join(dir, c.file)
			}
			ck, err := Open(ip)
			if err == nil {
				ck.Close()
			}
			wantErr(t, err, file, c.tensor, c.subs...)
		})
	}
}

func TestConcurrentReads(t *testing.T) {
	c, err := Open("testdata/pt_f16.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want, _ := readAll(t, c)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				got, _ := readAll(t, c)
				for name, v := range want {
					if !equalF32(v, got[name]) {
						t.Errorf("%q differs under concurrent reads", name)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

func TestClose(t *testing.T) {
	c, err := Open("testdata/golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.ReadF32("b.weight", make([]float32, 6)); err == nil {
		t.Error("ReadF32 after Close succeeded")
	}
}
