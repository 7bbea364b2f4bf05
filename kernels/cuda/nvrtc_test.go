package cuda

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestChooseTarget(t *testing.T) {
	for _, c := range []struct {
		cc        int
		supported []int
		want      string
		err       bool
	}{
		{90, nil, "sm_90", false},                                   // an NVRTC that cannot list: trust it
		{90, []int{75, 80, 86, 89, 90}, "sm_90", false},             // known: a cubin
		{100, []int{75, 80, 86, 89, 90}, "compute_90 (PTX)", false}, // newer GPU: PTX for the newest below it
		{86, []int{75, 80, 90}, "compute_80 (PTX)", false},
		{70, []int{75, 80}, "", true}, // older than everything NVRTC knows
	} {
		got, err := chooseTarget(c.cc, c.supported)
		if (err != nil) != c.err || err == nil && got.String() != c.want {
			t.Errorf("chooseTarget(%d, %v) = %v, %v; want %s (error %v)", c.cc, c.supported, got, err, c.want, c.err)
		}
	}
	if got := (target{arch: 90, cubin: true}).option(); got != "--gpu-architecture=sm_90" {
		t.Errorf("option %q", got)
	}
	if got := (target{arch: 80}).option(); got != "--gpu-architecture=compute_80" {
		t.Errorf("option %q", got)
	}
}

func TestCacheKey(t *testing.T) {
	base := cacheKey("src", target{90, true}, "12.4", compileFlags)
	if filepath.Ext(base) != ".cubin" || len(base) != 32+6 {
		t.Fatalf("key %q", base)
	}
	if cacheKey("src", target{90, true}, "12.4", compileFlags) != base {
		t.Fatal("the key is not a function of its inputs")
	}
	for name, k := range map[string]string{
		"source":  cacheKey("src ", target{90, true}, "12.4", compileFlags),
		"arch":    cacheKey("src", target{89, true}, "12.4", compileFlags),
		"ptx":     cacheKey("src", target{90, false}, "12.4", compileFlags),
		"version": cacheKey("src", target{90, true}, "12.8", compileFlags),
		"flags":   cacheKey("src", target{90, true}, "12.4", nil),
	} {
		if k == base {
			t.Errorf("a different %s gives the same key", name)
		}
	}
}

func TestCachedBuild(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gochat", "nvrtc")
	builds := 0
	build := func() ([]byte, error) { builds++; return []byte("cubin bytes"), nil }
	img, hit, err := cachedBuild(dir, "k.cubin", build)
	if err != nil || hit || string(img) != "cubin bytes" || builds != 1 {
		t.Fatalf("first: %q %v %v, %d builds", img, hit, err, builds)
	}
	img, hit, err = cachedBuild(dir, "k.cubin", build)
	if err != nil || !hit || string(img) != "cubin bytes" || builds != 1 {
		t.Fatalf("second: %q %v %v, %d builds", img, hit, err, builds)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.tmp*")); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}
	// An empty file is not a hit.
	if err := os.WriteFile(filepath.Join(dir, "e.cubin"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, hit, _ := cachedBuild(dir, "e.cubin", build); hit {
		t.Fatal("an empty cache file was used")
	}
	// No cache folder: always builds; a build error passes through.
	_, hit, _ = cachedBuild("", "k.cubin", build)
	if hit || builds != 3 {
		t.Fatalf("without a cache: hit %v, %d builds", hit, builds)
	}
	boom := errors.New("boom")
	if _, _, err := cachedBuild(t.TempDir(), "x", func() ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("build error: %v", err)
	}
	// An unwritable cache is not an error.
	ro := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(ro, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cachedBuild(filepath.Join(ro, "sub"), "k", build); err != nil {
		t.Fatalf("unwritable cache: %v", err)
	}
}
