package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchMatmulBF16(t *testing.T) {
	out, errOut, code := run(t, "--threads", "2", "bench", "matmul", "--shape", "70x48x33", "--transpose", "nt", "--dtype", "bf16", "--repeats", "3", "--json")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if res["m"] != 70.0 || res["dtype"] != "bf16" || res["threads"] != 2.0 || !(res["gflops"].(float64) > 0) {
		t.Errorf("result %v", res)
	}
	out, errOut, code = run(t, "--threads", "1", "bench", "matmul", "--shape", "1x64x40", "--transpose", "nn", "--dtype", "bf16", "--repeats", "2")
	if code != 0 || !strings.Contains(out, "nn bf16 on cpu/") {
		t.Fatalf("code %d: %s%s", code, out, errOut)
	}
	if _, _, code := run(t, "bench", "matmul", "--dtype", "fp16"); code == 0 {
		t.Error("--dtype fp16 accepted")
	}
	out, errOut, code = run(t, "bench", "matmul", "--shape", "40x33x20", "--transpose", "tn", "--dtype", "bf16", "--a-bf16", "--repeats", "2")
	if code != 0 || !strings.Contains(out, "A in bf16") {
		t.Fatalf("--a-bf16: code %d: %s%s", code, out, errOut)
	}
	if _, errOut, code := run(t, "bench", "matmul", "--a-bf16"); code != 2 || !strings.Contains(errOut, "--a-bf16 needs --dtype bf16") {
		t.Errorf("--a-bf16 with fp32: code %d, %q", code, errOut)
	}
}
