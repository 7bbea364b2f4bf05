package cuda

import (
	"slices"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
)

// releaseDevices are the fake GPUs the release tests run on: one whose
// buffers all come from the caching allocator, and one with VMM, where
// buffers of a chunk (4 KiB here) and more get their own chunks.
var releaseDevices = []struct {
	name string
	gran int64
}{{"caching allocator", 0}, {"VMM", 4 << 10}}

// newReleaseDevice is a fake device of capacity bytes on mem (nil: its
// own), with VMM when gran > 0.
func newReleaseDevice(t *testing.T, mem *fakeMemory, capacity, gran int64) (*Device, *fakeGPU) {
	t.Helper()
	g := newFakeGPU(t, capacity)
	if mem != nil {
		g.mem = mem
	}
	if gran > 0 {
		g.vm = &fakeVMM{g: g, gran: gran, next: 1 << 40, ranges: map[uintptr]*fakeRange{}}
	}
	d, err := newDevice(g, "cuda:0 (fake, sm_90)", 90, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d, g
}

// useLikeAStep allocates what a training step leaves behind on d: small
// and large buffers, some freed (into the allocator's cache and the pool
// of chunked blocks), a large one partly decommitted, the rest live.
func useLikeAStep(t *testing.T, d *Device) {
	t.Helper()
	var live []kernels.Buffer
	for i, n := range []int{3, 100, 5000, 40000, 70000, 257, 9000} {
		b, err := d.Alloc([]kernels.DType{kernels.F32, kernels.BF16, kernels.I32}[i%3], n)
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, b)
	}
	for _, i := range []int{1, 3, 6} { // freed: cached
		d.Free(live[i])
	}
	d.Decommit(live[4].Slice(1000, 60000))
	if _, err := d.Alloc(kernels.F32, 12345); err != nil { // from nothing: the step's model, say
		t.Fatal(err)
	}
}

// TestReleaseSince: what a step allocated after a Mark and left live or
// cached goes back to the driver, so that the GPU is as free as before
// the step (cuMemGetInfo) and MemStats/CacheStats are back where they
// were; buffers allocated before the Mark (a communicator's) stay, with
// their contents. ResetPeak restarts the peaks from the memory held.
func TestReleaseSince(t *testing.T) {
	for _, c := range releaseDevices {
		t.Run(c.name, func(t *testing.T) {
			d, g := newReleaseDevice(t, nil, 64<<20, c.gran)
			keepSmall := upload(t, d, kernels.F32, []float32{1, 2, 3})
			want := make([]float32, 3000)
			for i := range want {
				want[i] = float32(i)
			}
			keepLarge := upload(t, d, kernels.F32, want)
			scratch, err := d.Alloc(kernels.F32, 700) // freed before the step: cached
			if err != nil {
				t.Fatal(err)
			}
			d.Free(scratch)

			live, freeBefore := d.MemStats().Live, g.mem.cap-g.mem.used
			inUse, _, _, _ := d.CacheStats()
			m := d.Mark()
			d.ResetPeak()
			useLikeAStep(t, d)
			stepLive := d.MemStats().Live
			if stepPeak := d.MemStats().Peak; stepPeak < stepLive || stepPeak <= live {
				t.Errorf("peak during the step %d, live %d", stepPeak, stepLive)
			}

			if freed := d.ReleaseSince(m); freed != stepLive-live {
				t.Errorf("ReleaseSince freed %d bytes of live buffers, want %d", freed, stepLive-live)
			}
			if err := d.Sync(); err != nil {
				t.Fatal(err)
			}
			st := d.MemStats()
			gotInUse, cached, reserved, _ := d.CacheStats()
			if st.Live != live || gotInUse != inUse || cached != 0 || reserved != inUse {
				t.Errorf("after ReleaseSince: live %d (want %d), in use %d (want %d), cached %d, reserved %d; want no cache",
					st.Live, live, gotInUse, inUse, cached, reserved)
			}
			// The GPU is as free as before the step, and more: the cache
			// from before it is gone too.
			if free, _, _ := d.MemInfo(); free < freeBefore || free != g.mem.cap-inUse {
				t.Errorf("device free %d after ReleaseSince, %d before the step; want %d (only the kept buffers held)", free, freeBefore, g.mem.cap-inUse)
			}
			if got := read(d, keepSmall); !slices.Equal(got, []float32{1, 2, 3}) {
				t.Errorf("a buffer from before the Mark reads %v", got)
			}
			if got := read(d, keepLarge); !slices.Equal(got, want) {
				t.Errorf("the large buffer from before the Mark changed")
			}
			d.ResetPeak()
			if p := d.MemStats().Peak; p != live {
				t.Errorf("peak %d after ResetPeak, want the live %d", p, live)
			}
			if _, _, _, heldPeak := d.CacheStats(); heldPeak != inUse {
				t.Errorf("allocator peak %d after ResetPeak, want what it holds, %d", heldPeak, inUse)
			}
			// A second step on the same device starts from the same state.
			m = d.Mark()
			useLikeAStep(t, d)
			d.ReleaseSince(m)
			if d.MemStats().Live != live || g.mem.cap-g.mem.used != g.mem.cap-inUse {
				t.Errorf("after a second step: live %d, device used %d; want %d, %d", d.MemStats().Live, g.mem.used, live, inUse)
			}
			d.Free(keepSmall)
			d.Free(keepLarge)
			d.Trim()
			if g.mem.used != 0 || (g.vm != nil && len(g.vm.ranges) != 0) {
				t.Errorf("after freeing everything: %d bytes held", g.mem.used)
			}
		})
	}
}

// TestReleasedBufferIsFreed: a buffer ReleaseSince freed cannot be freed
// again (the step's own later Free of it would be a bug).
func TestReleasedBufferIsFreed(t *testing.T) {
	d, _ := newReleaseDevice(t, nil, 1<<20, 0)
	m := d.Mark()
	b, err := d.Alloc(kernels.F32, 10)
	if err != nil {
		t.Fatal(err)
	}
	d.ReleaseSince(m)
	mustPanic(t, "Free after ReleaseSince", "freed before", func() { d.Free(b) })
}

// TestCloseFreesLiveBuffers: Close gives back every byte the device held,
// live buffers included (a step's models are never freed one by one), so
// that a device opened next on the same GPU finds it all free — also
// where the primary context outlives the closed device, as it does while
// another device or NCCL holds it.
func TestCloseFreesLiveBuffers(t *testing.T) {
	for _, c := range releaseDevices {
		t.Run(c.name, func(t *testing.T) {
			const capacity = 64 << 20
			d, g := newReleaseDevice(t, nil, capacity, c.gran)
			useLikeAStep(t, d)
			if g.mem.used == 0 {
				t.Fatal("the step held nothing")
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if g.mem.used != 0 || (g.vm != nil && len(g.vm.ranges) != 0) {
				t.Fatalf("after Close: %d bytes of device memory held", g.mem.used)
			}
			next, _ := newReleaseDevice(t, g.mem, capacity, c.gran)
			if free, total, _ := next.MemInfo(); free != total || total != capacity {
				t.Errorf("the next device sees %d free of %d", free, total)
			}
			b, err := next.Alloc(kernels.F32, (capacity-4<<20)/4)
			if err != nil {
				t.Fatalf("the next device cannot have the GPU's memory: %v", err)
			}
			next.Free(b)
			if err := next.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
