package zero_test

import (
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gochat-ai/gochat/dist/mpi"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/zero"
)

// BenchmarkExchangeMPI times Exchange.ReduceScatter and Gather of one
// 64 MiB fp32 unit (16 Mi elements) across the ranks of an MPI job and
// reports the median of each (for comparison: dist/mpi's
// BenchmarkAllReduce64MiB). Every rank must run the same iterations:
//
//	go test -c -o /tmp/zero.test ./zero
//	mpirun --allow-run-as-root --bind-to none -np 2 /tmp/zero.test \
//	    -test.run='^$' -test.bench=ExchangeMPI -test.benchtime=20x
func BenchmarkExchangeMPI(b *testing.B) {
	if !mpi.DetectLaunch().Launched() {
		b.Skip("run under mpirun (see the doc comment)")
	}
	if bt := flag.Lookup("test.benchtime").Value.String(); !strings.HasSuffix(bt, "x") {
		b.Fatalf("-test.benchtime=%s: give an iteration count (20x), the same on every rank", bt)
	}
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	c, err := mpi.New(dev, mpi.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const n = 16 << 20
	lay, err := zero.NewLayout([]int{n}, c.Size(), c.Rank())
	if err != nil {
		b.Fatal(err)
	}
	x, err := zero.NewExchange(dev, c, lay, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Free()
	buf, err := dev.Alloc(kernels.F32, n)
	if err != nil {
		b.Fatal(err)
	}
	for _, op := range []struct {
		name string
		f    func() error
	}{
		{"reduce-scatter", func() error { return x.ReduceScatter(buf, 0) }},
		{"gather", func() error { return x.Gather(buf, 0) }},
	} {
		b.Run(op.name, func(b *testing.B) {
			if err := op.f(); err != nil { // faults the pages in
				b.Fatal(err)
			}
			var times []time.Duration
			for b.Loop() {
				if err := c.Barrier(); err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				if err := op.f(); err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(t0))
			}
			slices.Sort(times)
			med := times[len(times)/2]
			b.ReportMetric(float64(med.Microseconds())/1e3, "median-ms")
			b.ReportMetric(float64(4*n)/med.Seconds()/1e9, "GB/s")
		})
	}
}
