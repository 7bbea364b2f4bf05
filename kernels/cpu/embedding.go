package cpu

import (
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
)

// EmbeddingForward copies row ids[i] of table[V,C] (F32 or BF16, widened)
// into row i of out[N,C]. An id outside the table panics.
func (d *Device) EmbeddingForward(out, ids, table kernels.Buffer, n, c int) {
	o, id := f32(out)[:n*c], i32(ids)[:n]
	if c == 0 {
		return
	}
	checkIDs(id, table.Len()/c)
	if tb, ok := table.(BF16); ok {
		d.parallelFor(n, max(1, elemGrain/c), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				r := int(id[i])
				widenSliceBF16(o[i*c:i*c+c], tb[r*c:r*c+c])
			}
		})
		return
	}
	tb := f32(table)
	d.parallelFor(n, max(1, elemGrain/c), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			r := int(id[i])
			copy(o[i*c:i*c+c], tb[r*c:r*c+c])
		}
	})
}

// EmbeddingBackward scatter-adds dout[N,C] into dtable[V,C]:
// dtable[ids[i], :] += dout[i, :] (accumulates). Goroutines split the
// columns, and each column adds the rows in order i = 0..N-1, so repeated ids
// are summed in the same order whatever the thread count.
func (d *Device) EmbeddingBackward(dtable, dout, ids kernels.Buffer, n, c int) {
	dt, dy, id := f32(dtable), f32(dout)[:n*c], i32(ids)[:n]
	if n == 0 || c == 0 {
		return
	}
	checkIDs(id, len(dt)/c)
	d.parallelFor(c, max(16, elemGrain/n), func(lo, hi int) {
		for i, r := range id {
			dst := dt[int(r)*c+lo : int(r)*c+hi]
			src := dy[i*c+lo : i*c+hi]
			for j, v := range src {
				dst[j] += v
			}
		}
	})
}

// checkIDs panics (on the caller's goroutine, before any worker starts) if
// an id is outside [0, v).
func checkIDs(ids []int32, v int) {
	for i, r := range ids {
		if r < 0 || int(r) >= v {
			panic(fmt.Sprintf("cpu: id %d at row %d is outside [0,%d)", r, i, v))
		}
	}
}
