//go:build linux && amd64

package cpu

import (
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestGemmBF16AMXSignals runs the AMX kernel on many goroutines while the
// process is hit by everything that could disturb live tile state: a
// SIGPROF to every thread 100 times a second (CPU profiling), SIGUSR1
// sent to the process in a loop, the runtime's preemption signals (more
// goroutines than threads, each running GEMMs of about 0.1-1 ms), garbage
// collections, and goroutines sleeping and allocating. Each product must
// equal, bit for bit, the one computed before the storm: the result is
// deterministic (each element's accumulation order depends only on the
// blocking), so any tile state lost or corrupted in a signal frame, a
// context switch or a move between threads would show.
func TestGemmBF16AMXSignals(t *testing.T) {
	if !gemmAMXUsable() {
		t.Skip("AMX is not usable here")
	}
	r := rand.New(rand.NewPCG(41, 42))
	type job struct {
		g    *bf16Case
		want []float32
	}
	var jobs []job
	for i, s := range [][3]int{{256, 256, 512}, {96, 320, 1100}, {200, 64, 777}, {64, 512, 256}} {
		g := newBF16Case(r, i%2 == 1, i/2 == 0, s[0], s[1], s[2], 1, 1, 0, i%2 == 0, true)
		jobs = append(jobs, job{g, g.run(&gemmBF16AMX, 1)})
	}

	if err := pprof.StartCPUProfile(io.Discard); err == nil {
		defer pprof.StopCPUProfile()
	}
	usr1 := make(chan os.Signal, 64)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)

	stop := make(chan struct{})
	var bg sync.WaitGroup
	var signals, gcs atomic.Int64
	bg.Add(4)
	go func() { // SIGUSR1 to the process
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if syscall.Kill(os.Getpid(), syscall.SIGUSR1) == nil {
				signals.Add(1)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()
	go func() { // drain SIGUSR1
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			case <-usr1:
			}
		}
	}()
	go func() { // garbage collections
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			runtime.GC()
			gcs.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()
	go func() { // sleep and allocate
		defer bg.Done()
		var keep [][]byte
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			keep = append(keep, make([]byte, 1<<(10+i%8)))
			if len(keep) > 64 {
				keep = keep[:0]
			}
			time.Sleep(time.Duration(i%5) * 20 * time.Microsecond)
		}
	}()

	deadline := time.Now().Add(1500 * time.Millisecond)
	var runs atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(deadline); i++ {
				jb := jobs[i%len(jobs)]
				got := jb.g.run(&gemmBF16AMX, 1+i%2)
				runs.Add(1)
				for x := range got {
					if math.Float32bits(got[x]) != math.Float32bits(jb.want[x]) {
						select {
						case errs <- jb.g.String():
						default:
						}
						return
					}
				}
				if i%7 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("AMX result changed under signals/GC: %s", e)
	}
	t.Logf("%d products, %d SIGUSR1, %d GCs", runs.Load(), signals.Load(), gcs.Load())
}
