package train

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress draws a one-line progress bar on a terminal: steps, a bar, a metric,
// tokens/s and the estimated time left. With a nil writer it does nothing
// (log lines are written instead).
type progress struct {
	w     io.Writer
	total int
	start time.Time
	first int
	shown bool
}

func newProgress(w io.Writer, total int) *progress {
	return &progress{w: w, total: total, start: time.Now(), first: -1}
}

func (p *progress) update(step int, key string, value, tps float64) {
	if p.w == nil {
		return
	}
	if p.first < 0 {
		p.first, p.start = step-1, time.Now()
	}
	const width = 30
	frac := float64(step) / float64(max(1, p.total))
	n := int(frac * width)
	eta := "?"
	if done := step - p.first; done > 0 {
		per := time.Since(p.start) / time.Duration(done)
		eta = (per * time.Duration(p.total-step)).Round(time.Second).String()
	}
	rate := ""
	if tps > 0 {
		rate = fmt.Sprintf("  %.0f tok/s", tps)
	}
	fmt.Fprintf(p.w, "\r%d/%d [%s%s] %s %.4f%s  ETA %s \x1b[K", step, p.total,
		strings.Repeat("=", n), strings.Repeat(" ", width-n), key, value, rate, eta)
	p.shown = true
}

// clear erases the bar before other output.
func (p *progress) clear() {
	if p.w != nil && p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}

func (p *progress) done() {
	if p.w != nil && p.shown {
		fmt.Fprintln(p.w)
	}
}
