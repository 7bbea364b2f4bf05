package hub

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// progress reports one file's download: a bar redrawn on a terminal, else a
// log line every half minute, and a line when it ends.
type progress struct {
	w       io.Writer
	log     zerolog.Logger
	now     func() time.Time
	name    string
	total   int64
	start   int64 // bytes there before this run
	t0      time.Time
	last    time.Time
	drawn   bool
	stopped bool
}

// Intervals between progress reports.
const (
	barEvery = 200 * time.Millisecond
	logEvery = 30 * time.Second
)

func newProgress(c *Client, name string, total, have int64) *progress {
	now := c.now()
	return &progress{w: c.Progress, log: c.Log, now: c.now, name: name, total: total, start: have, t0: now, last: now}
}

func (p *progress) update(done int64) {
	now := p.now()
	if p.w != nil {
		if now.Sub(p.last) >= barEvery {
			p.last = now
			p.draw(done, now)
		}
		return
	}
	if now.Sub(p.last) >= logEvery {
		p.last = now
		p.log.Info().Str("file", p.name).Int64("bytes", done).Int64("of", p.total).
			Str("rate", formatBytes(p.rate(done, now))+"/s").Msg("downloading")
	}
}

// finish draws the full bar and logs the file's size and rate.
func (p *progress) finish(done int64) {
	now := p.now()
	if p.w != nil {
		p.draw(done, now)
	}
	p.stop()
	p.log.Info().Str("file", p.name).Int64("bytes", done).Float64("seconds", now.Sub(p.t0).Seconds()).
		Str("rate", formatBytes(p.rate(done, now))+"/s").Msg("downloaded")
}

// breakLine ends the bar's line, so that a log line can follow; the next
// update draws the bar anew.
func (p *progress) breakLine() {
	if p.w != nil && p.drawn {
		fmt.Fprintln(p.w)
	}
	p.drawn = false
}

// stop ends the bar's line for good.
func (p *progress) stop() {
	if !p.stopped {
		p.breakLine()
	}
	p.stopped = true
}

func (p *progress) rate(done int64, now time.Time) float64 {
	s := now.Sub(p.t0).Seconds()
	if s <= 0 {
		return 0
	}
	return float64(done-p.start) / s
}

// draw writes "\rNAME [=====>    ]  45%  1.2 GB / 2.6 GB  35.1 MB/s".
func (p *progress) draw(done int64, now time.Time) {
	const width = 24
	frac := 1.0
	if p.total > 0 {
		frac = min(float64(done)/float64(p.total), 1)
	}
	n := int(frac * width)
	bar := strings.Repeat("=", n)
	if n < width {
		bar += ">" + strings.Repeat(" ", width-n-1)
	}
	name := p.name
	if len(name) > 32 {
		name = "…" + name[len(name)-31:]
	}
	fmt.Fprintf(p.w, "\r%-32s [%s] %3.0f%% %9s / %-9s %10s/s ", name, bar, 100*frac,
		formatBytes(float64(done)), formatBytes(float64(p.total)), formatBytes(p.rate(done, now)))
	p.drawn = true
}

// formatBytes writes a byte count in decimal units (1.5 MB).
func formatBytes(b float64) string {
	units := []string{"B", "kB", "MB", "GB", "TB"}
	i := 0
	for b >= 1000 && i < len(units)-1 {
		b /= 1000
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f %s", b, units[i])
	}
	return fmt.Sprintf("%.1f %s", b, units[i])
}
