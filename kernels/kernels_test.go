package kernels

import "testing"

func TestOutOfMemoryErrorNamesSizes(t *testing.T) {
	for _, c := range []struct {
		err  OutOfMemoryError
		want string
	}{
		{OutOfMemoryError{Device: "cpu/generic (1 threads)", Want: 600000, Live: 600000, Limit: 1 << 20},
			"cpu/generic (1 threads): out of memory: a buffer of 585.94 KiB on top of 585.94 KiB live exceeds the limit of 1.00 MiB"},
		{OutOfMemoryError{Device: "gpu", Want: 3 << 30, Live: 1536, Limit: 0},
			"gpu: out of memory: a buffer of 3.00 GiB on top of 1.50 KiB live"},
		{OutOfMemoryError{Device: "d", Want: 2, Live: 0, Limit: 1023},
			"d: out of memory: a buffer of 2 B on top of 0 B live exceeds the limit of 1023 B"},
		{OutOfMemoryError{Device: "d", Want: 5 << 40, Live: 80 << 30, Limit: 80 << 30},
			"d: out of memory: a buffer of 5.00 TiB on top of 80.00 GiB live exceeds the limit of 80.00 GiB"},
		{OutOfMemoryError{Device: "cuda:0", Want: 3 << 30, Live: 70 << 30, Cached: 2 << 20, DeviceFree: 1 << 30, DeviceTotal: 80 << 30},
			"cuda:0: out of memory: a buffer of 3.00 GiB on top of 70.00 GiB live (2.00 MiB cached; the device has 1.00 GiB free of 80.00 GiB)"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
}
