package tensor

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"hash/crc32"
	"io"
	"os"
	"strings"
	"testing"
)

// rezip rebuilds the zip archive src with entries compressed by method; edit may change an
// entry's name and data, or drop it by returning ok == false.
func rezip(t testing.TB, src []byte, method uint16, edit func(name string, data []byte) (string, []byte, bool)) []byte {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(src), int64(len(src)))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	for _, zf := range zr.File {
		rc, err := zf.Open()
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		name, ok := zf.Name, true
		if edit != nil {
			name, data, ok = edit(name, data)
		}
		if !ok {
			continue
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// withPickle returns a copy of testdata/pt_f32.bin whose data.pkl is replaced by pkl.
func withPickle(t testing.TB, pkl []byte) []byte {
	return rezip(t, readFileT(t, "testdata/pt_f32.bin"), zip.Store, func(name string, data []byte) (string, []byte, bool) {
		if name == "pt_f32/data.pkl" {
			return name, pkl, true
		}
		return name, data, true
	})
}

// pk builds protocol-2 pickles by hand.
type pk struct{ b []byte }

func newPK() *pk                 { return &pk{b: []byte{0x80, 2}} }
func (p *pk) op(ops ...byte) *pk { p.b = append(p.b, ops...); return p }
func (p *pk) str(s string) *pk {
	p.b = append(p.b, 'X')
	p.b = binary.LittleEndian.AppendUint32(p.b, uint32(len(s)))
	p.b = append(p.b, s...)
	return p
}
func (p *pk) int(n int) *pk {
	p.b = append(p.b, 'J')
	p.b = binary.LittleEndian.AppendUint32(p.b, uint32(int32(n)))
	return p
}
func (p *pk) ints(ns ...int) *pk {
	p.op('(')
	for _, n := range ns {
		p.int(n)
	}
	return p.op('t')
}
func (p *pk) global(module, name string) *pk {
	p.b = append(p.b, 'c')
	p.b = append(p.b, module+"\n"+name+"\n"...)
	return p
}

// tensor appends _rebuild_tensor_v2(('storage', torch.<stype>, key, 'cpu', numel), off, size,
// stride, False, {}).
func (p *pk) tensor(stype, key string, numel, off int, size, stride []int) *pk {
	p.global("torch._utils", "_rebuild_tensor_v2").op('(')
	p.op('(').str("storage").global("torch", stype).str(key).str("cpu").int(numel).op('t', 'Q')
	p.int(off).ints(size...).ints(stride...).op(0x89, '}', 't', 'R')
	return p
}

func (p *pk) bytes() []byte { return append(p.b, '.') }

func TestBinFixtures(t *testing.T) {
	e := expected(t)
	for _, name := range []string{"pt_f32.bin", "pt_f16.bin", "pt_bf16.bin", "pt_legacy.bin", "pt_module.bin"} {
		t.Run(name, func(t *testing.T) {
			c, err := Open("testdata/" + name)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			checkAgainst(t, c, e.Files[name])
			if name == "pt_module.bin" {
				return
			}
			a, _ := c.Info("lm_head.weight")
			b, _ := c.Info("model.decoder.embed_tokens.weight")
			if a.DType != b.DType || !equalInts(a.Shape, b.Shape) || a.File != "testdata/"+name {
				t.Errorf("tied weights: %+v vs %+v", a, b)
			}
		})
	}
}

// TestBinDeflated reads fixtures whose entries are deflated instead of stored: the fallback path
// that decompresses instead of reading at an offset.
func TestBinDeflated(t *testing.T) {
	e := expected(t)
	for _, name := range []string{"pt_f16.bin", "pt_f32.bin"} {
		p := writeTemp(t, name, rezip(t, readFileT(t, "testdata/"+name), zip.Deflate, nil))
		c, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		checkAgainst(t, c, e.Files[name])
		c.Close()
	}
}

func TestBinCrafted(t *testing.T) {
	// nn.Parameter wrapping, a plain dict, and a view at the very end of its storage.
	pkl := newPK().op('}', '(').
		str("p").global("torch._utils", "_rebuild_parameter").op('(').
		tensor("FloatStorage", "0", 24, 0, []int{2, 2}, []int{1, 2}).op(0x88, '}', 't', 'R').
		str("last").tensor("FloatStorage", "0", 24, 23, []int{1}, []int{1}).
		op('u').bytes()
	p := writeTemp(t, "crafted.bin", withPickle(t, pkl))
	c, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	full := expected(t).Files["pt_f32.bin"]["model.decoder.embed_tokens.weight"].F32
	got := make([]float32, 4)
	if err := c.ReadF32("p", got); err != nil {
		t.Fatal(err)
	}
	want := bitsToF32([]uint32{full[0], full[2], full[1], full[3]}) // stride (1,2): a transposed 2×2
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("p = %v, want %v", got, want)
			break
		}
	}
	if err := c.ReadF32("last", got[:1]); err != nil || got[0] != bitsToF32(full[23:])[0] {
		t.Errorf("last = %v (%v), want element 23", got[0], err)
	}
}

func TestBinErrors(t *testing.T) {
	f32 := readFileT(t, "testdata/pt_f32.bin")
	legacy := readFileT(t, "testdata/pt_legacy.bin")
	edit := func(fn func(name string, data []byte) (string, []byte, bool)) []byte {
		return rezip(t, f32, zip.Store, fn)
	}
	const emb = "model.decoder.embed_tokens.weight" // the first tensor; it uses storage "0"
	huge := binary.LittleEndian.AppendUint64([]byte{0x80, 2, 0x8e}, 1<<50)
	for _, c := range []struct {
		name   string
		file   []byte
		tensor string
		subs   []string
	}{
		{"missing storage", edit(func(n string, d []byte) (string, []byte, bool) { return n, d, n != "pt_f32/data/0" }),
			emb, []string{`storage "0" is missing`, "pt_f32/data/0"}},
		{"truncated storage", edit(func(n string, d []byte) (string, []byte, bool) {
			if n == "pt_f32/data/0" {
				d = d[:50]
			}
			return n, d, true
		}), emb, []string{"has 50 bytes, want 96", "truncated"}},
		{"truncated zip", f32[:len(f32)/2], "", []string{"not a valid zip archive"}},
		{"implausible deflate size", lyingZip(t, f32), emb, []string{"claimed from"}},
		{"no data.pkl", edit(func(n string, d []byte) (string, []byte, bool) {
			return strings.Replace(n, "data.pkl", "other.pkl", 1), d, true
		}), "", []string{"no <archive>/data.pkl"}},
		{"TorchScript", edit(func(n string, d []byte) (string, []byte, bool) {
			return strings.Replace(n, "version", "constants.pkl", 1), d, true
		}), "", []string{"TorchScript"}},
		{"big-endian", edit(func(n string, d []byte) (string, []byte, bool) {
			if n == "pt_f32/version" {
				return "pt_f32/byteorder", []byte("big"), true
			}
			return n, d, true
		}), "", []string{`byte order "big"`}},
		{"unknown opcode", withPickle(t, []byte{0x80, 2, 0xff}), "", []string{"unknown opcode 0xff"}},
		{"no STOP", withPickle(t, []byte{0x80, 2, '}'}), "", []string{"before the STOP"}},
		{"huge length", withPickle(t, huge), "", []string{"runs past the end"}},
		{"decoder panic", withPickle(t, newPK().op('}', '(').str("a").op('u').bytes()), "", []string{"malformed"}},
		{"not a dict", withPickle(t, newPK().op(']').bytes()), "", []string{"top-level object", "want a state dict"}},
		{"not a tensor", withPickle(t, newPK().op('}').str("a").int(1).op('s').bytes()), "a", []string{"not a tensor"}},
		{"view out of range", withPickle(t, newPK().op('}').str("v").
			tensor("FloatStorage", "0", 24, 20, []int{2, 3}, []int{3, 1}).op('s').bytes()),
			"v", []string{"reaches element 25", `storage "0" has 24 elements`}},
		{"storage retyped", withPickle(t, newPK().op('}', '(').
			str("a").tensor("FloatStorage", "0", 24, 0, []int{1}, []int{1}).
			str("b").tensor("HalfStorage", "0", 48, 0, []int{1}, []int{1}).op('u').bytes()),
			"", []string{`storage "0" is used as 24×F32 and as 48×F16`}},
		{"unsupported storage", withPickle(t, newPK().op('}').str("c").
			tensor("ComplexFloatStorage", "0", 12, 0, []int{1}, []int{1}).op('s').bytes()),
			"", []string{"unsupported storage type torch.ComplexFloatStorage"}},
		{"not a checkpoint", []byte("hello, this is not a checkpoint at all"), "", []string{"not a PyTorch checkpoint"}},
		{"legacy truncated data", legacy[:len(legacy)-10], "", []string{"truncated"}},
		{"legacy truncated pickle", legacy[:600], "", []string{"legacy format state dict", "pickle"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := writeTemp(t, "pytorch_model.bin", c.file)
			ck, err := Open(p)
			if err == nil {
				ck.Close()
			}
			wantErr(t, err, p, c.tensor, c.subs...)
		})
	}
}

// lyingZip rebuilds the archive with every entry deflated and storage "0" claiming a
// decompressed size far beyond what deflate can produce from its compressed bytes.
func lyingZip(t *testing.T, src []byte) []byte {
	zr, err := zip.NewReader(bytes.NewReader(src), int64(len(src)))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	for _, zf := range zr.File {
		rc, _ := zf.Open()
		data, _ := io.ReadAll(rc)
		rc.Close()
		var comp bytes.Buffer
		fw, _ := flate.NewWriter(&comp, flate.BestCompression)
		fw.Write(data)
		fw.Close()
		h := &zip.FileHeader{Name: zf.Name, Method: zip.Deflate, CRC32: crc32.ChecksumIEEE(data),
			CompressedSize64: uint64(comp.Len()), UncompressedSize64: uint64(len(data))}
		if strings.HasSuffix(zf.Name, "/data/0") {
			h.UncompressedSize64 = 1 << 40
		}
		w, err := zw.CreateRaw(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(comp.Bytes())
	}
	zw.Close()
	return out.Bytes()
}

func TestSplitPickle(t *testing.T) {
	data := readFileT(t, "testdata/pt_legacy.bin")
	// The legacy file starts with three small pickles back to back.
	r := bytes.NewReader(data)
	for i, wantLen := range []int{15, 6, 116} {
		p, err := splitPickle(r, int64(r.Len()))
		if err != nil || len(p) != wantLen || p[len(p)-1] != '.' {
			t.Fatalf("pickle %d: %d bytes, %v; want %d", i, len(p), err, wantLen)
		}
	}
	// A length that exceeds what is left is refused before anything is allocated.
	for _, b := range [][]byte{
		{0x80, 2, 'X', 0xff, 0xff, 0xff, 0x7f},
		{0x80, 2, 'T', 0xff, 0xff, 0xff, 0xff}, // negative
		{0x80, 2, 0x95, 0xff, 0xff, 0, 0, 0, 0, 0, 0, '.'},
	} {
		if _, err := splitPickle(bytes.NewReader(b), int64(len(b))); err == nil {
			t.Errorf("splitPickle(%q) succeeded", b)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	_, err := Open("testdata/does-not-exist.safetensors")
	if err == nil || !os.IsNotExist(err) || !strings.Contains(err.Error(), "does-not-exist.safetensors") {
		t.Errorf("Open of a missing file: %v", err)
	}
	_, err = Open("testdata")
	wantErr(t, err, "testdata", "", "is a directory")
}

// TestPickleRefusals: a pickle that names any global other than torch's
// tensor-rebuilding functions and storage classes is refused when it calls
// or instantiates it, and every refusal names the global (module.name) in
// words, never a Go value; nothing is ever executed.
func TestPickleRefusals(t *testing.T) {
	legacy := readFileT(t, "testdata/pt_legacy.bin")
	system := func(p *pk) *pk { return p.op('(').str("touch /tmp/pwned").op('t', 'R') }
	stackGlobal := func(module, name string) *pk { return newPK().str(module).str(name).op(0x93) }
	for _, c := range []struct {
		name string
		file []byte
		subs []string
	}{
		{"GLOBAL and REDUCE", withPickle(t, system(newPK().global("os", "system")).bytes()),
			[]string{"refusing to execute os.system from the pickle"}},
		{"STACK_GLOBAL and REDUCE", withPickle(t, system(stackGlobal("posix", "system")).bytes()),
			[]string{"refusing to execute posix.system from the pickle"}},
		{"inside a state dict", withPickle(t, system(newPK().op('}').str("w").global("builtins", "eval")).op('s').bytes()),
			[]string{"refusing to execute builtins.eval from the pickle"}},
		{"INST", withPickle(t, newPK().op('(').str("id").op('i').op([]byte("subprocess\ncheck_output\n")...).bytes()),
			[]string{"refusing to execute subprocess.check_output from the pickle"}},
		{"OBJ", withPickle(t, newPK().op('(').global("subprocess", "Popen").str("id").op('o').bytes()),
			[]string{"refusing to execute subprocess.Popen from the pickle"}},
		{"NEWOBJ", withPickle(t, newPK().global("subprocess", "Popen").op(')', 0x81).bytes()),
			[]string{"refusing to instantiate subprocess.Popen from the pickle"}},
		{"copy_reg._reconstructor", withPickle(t, newPK().global("copy_reg", "_reconstructor").op('(').
			global("__main__", "Evil").global("subprocess", "Popen").op('N', 't', 'R').bytes()),
			[]string{"refusing to instantiate subprocess.Popen from the pickle"}},
		{"storage class called", withPickle(t, newPK().global("torch", "FloatStorage").op(')', 'R').bytes()),
			[]string{"refusing to execute torch.FloatStorage from the pickle"}},
		{"global as the top-level object", withPickle(t, newPK().global("os", "system").bytes()),
			[]string{"top-level object is the global os.system", "want a state dict"}},
		{"global as a value", withPickle(t, newPK().op('}').str("w").global("os", "system").op('s').bytes()),
			[]string{"the global os.system", "not a tensor"}},
		{"global as a storage", withPickle(t, newPK().op('}').str("w").global("torch._utils", "_rebuild_tensor_v2").op('(').
			global("os", "system").int(0).ints(1).ints(1).op(0x89, '}', 't', 'R', 's').bytes()),
			[]string{"storage argument is the global os.system"}},
		{"global as a storage type", withPickle(t, newPK().op('}').str("c").
			tensor("ComplexFloatStorage", "0", 12, 0, []int{1}, []int{1}).op('s').bytes()),
			[]string{"unsupported storage type torch.ComplexFloatStorage"}},
		{"legacy format", append(append(legacy[:15:15], system(newPK().global("os", "system")).bytes()...), legacy[21:]...),
			[]string{"legacy format protocol version", "refusing to execute os.system from the pickle"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := writeTemp(t, "pytorch_model.bin", c.file)
			ck, err := Open(p)
			if err == nil {
				ck.Close()
			}
			wantErr(t, err, p, "", c.subs...)
			if msg := err.Error(); strings.Contains(msg, "types.") || strings.Contains(msg, "&{") || strings.Contains(msg, "tensor.") {
				t.Errorf("error %q shows Go internals", msg)
			}
		})
	}
}
