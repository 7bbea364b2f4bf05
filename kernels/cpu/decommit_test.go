package cpu

import (
	"testing"

	"github.com/gochat-ai/gochat/kernels"
)

func TestDecommit(t *testing.T) {
	d, _ := New(Options{Threads: 1})
	for _, dt := range []kernels.DType{kernels.F32, kernels.BF16, kernels.I32} {
		const n = 1 << 20
		b, err := d.Alloc(dt, n)
		if err != nil {
			t.Fatal(err)
		}
		fill := func() {
			switch s := b.(type) {
			case F32:
				for i := range s {
					s[i] = 1
				}
			case BF16:
				for i := range s {
					s[i] = 0x3f80
				}
			case I32:
				for i := range s {
					s[i] = 1
				}
			}
		}
		for _, r := range [][2]int{{1001, 900003}, {0, n}, {5, 7}, {n - 3, 3}} { // [start, +length) {
			fill()
			d.Decommit(b.Slice(r[0], r[1]))
			for i := 0; i < n; i++ {
				inside := i >= r[0] && i < r[0]+r[1]
				var zero bool
				switch s := b.(type) {
				case F32:
					zero = s[i] == 0
				case BF16:
					zero = s[i] == 0
				case I32:
					zero = s[i] == 0
				}
				if zero != inside {
					t.Fatalf("%v: decommit of [%d, +%d): element %d zero=%v", dt, r[0], r[1], i, zero)
				}
			}
		}
	}
}
