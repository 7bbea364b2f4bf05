package plan

import (
	"os"
	"strings"
	"testing"
	"testing/fstest"
)

const meminfo = "MemTotal:       24684084 kB\nMemFree:        24067620 kB\nMemAvailable:   20000000 kB\n"

func TestAvailable(t *testing.T) {
	const gib = int64(1) << 30
	v2mount := "31 23 0:28 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
	v1mount := "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
		"32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
	for _, c := range []struct {
		name      string
		files     map[string]string
		free      int64 // CgroupFree
		available int64
		cgroup    string
	}{
		{"no cgroup files", map[string]string{}, -1, 20000000 * 1024, ""},
		{"v2, no limit", map[string]string{"proc/self/cgroup": "0::/user.slice/a.scope\n", "proc/self/mountinfo": v2mount,
			"sys/fs/cgroup/user.slice/a.scope/memory.max": "max\n", "sys/fs/cgroup/user.slice/a.scope/memory.current": "1000\n"},
			-1, 20000000 * 1024, ""},
		{"v2 limit on the cgroup", map[string]string{"proc/self/cgroup": "0::/user.slice/a.scope\n", "proc/self/mountinfo": v2mount,
			"sys/fs/cgroup/user.slice/a.scope/memory.max": "8589934592\n", "sys/fs/cgroup/user.slice/a.scope/memory.current": "1073741824\n"},
			7 * gib, 7 * gib, "/sys/fs/cgroup/user.slice/a.scope/memory.max"},
		{"v2 limit on a parent", map[string]string{"proc/self/cgroup": "0::/user.slice/a.scope\n", "proc/self/mountinfo": v2mount,
			"sys/fs/cgroup/user.slice/a.scope/memory.max": "max\n", "sys/fs/cgroup/user.slice/a.scope/memory.current": "1073741824\n",
			"sys/fs/cgroup/user.slice/memory.max": "4294967296\n", "sys/fs/cgroup/user.slice/memory.current": "2147483648\n"},
			2 * gib, 2 * gib, "/sys/fs/cgroup/user.slice/memory.max"},
		{"v2 in a container (cgroup namespace)", map[string]string{"proc/self/cgroup": "0::/\n", "proc/self/mountinfo": v2mount,
			"sys/fs/cgroup/memory.max": "3221225472\n", "sys/fs/cgroup/memory.current": "1073741824\n"},
			2 * gib, 2 * gib, "/sys/fs/cgroup/memory.max"},
		{"v1 unlimited", map[string]string{"proc/self/cgroup": "4:memory:/process_api/45c4\n2:cpu:/\n", "proc/self/mountinfo": v1mount,
			"sys/fs/cgroup/memory/process_api/45c4/memory.limit_in_bytes": "9223372036854771712\n",
			"sys/fs/cgroup/memory/process_api/45c4/memory.usage_in_bytes": "8876032\n"},
			-1, 20000000 * 1024, ""},
		{"v1 limit", map[string]string{"proc/self/cgroup": "4:memory:/docker/abc\n", "proc/self/mountinfo": v1mount,
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "17179869184\n",
			"sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes": "1073741824\n"},
			15 * gib, 15 * gib, "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes"},
		{"over the limit", map[string]string{"proc/self/cgroup": "0::/\n", "proc/self/mountinfo": v2mount,
			"sys/fs/cgroup/memory.max": "1073741824\n", "sys/fs/cgroup/memory.current": "2147483648\n"},
			-gib, 0, "/sys/fs/cgroup/memory.max"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fsys := fstest.MapFS{"proc/meminfo": {Data: []byte(meminfo)}}
			for k, v := range c.files {
				fsys[k] = &fstest.MapFile{Data: []byte(v)}
			}
			m, err := Available(fsys)
			if err != nil {
				t.Fatal(err)
			}
			if m.MemAvailable != 20000000*1024 || m.CgroupFree != c.free || m.Available != c.available || m.Cgroup != c.cgroup {
				t.Errorf("got %+v, want cgroup free %d under %q, available %d", m, c.free, c.cgroup, c.available)
			}
		})
	}
	if _, err := Available(fstest.MapFS{}); err == nil || !strings.Contains(err.Error(), "meminfo") {
		t.Errorf("no /proc/meminfo: %v", err)
	}
	if _, err := Available(fstest.MapFS{"proc/meminfo": {Data: []byte("MemTotal: 1 kB\n")}}); err == nil || !strings.Contains(err.Error(), "MemAvailable") {
		t.Errorf("no MemAvailable: %v", err)
	}
}

// TestAvailableHere reads this machine's memory (Linux only).
func TestAvailableHere(t *testing.T) {
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		t.Skip("no /proc/meminfo here")
	}
	m, err := Available(os.DirFS("/"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Available <= 0 || m.MemAvailable <= 0 {
		t.Errorf("%+v", m)
	}
	t.Log(m)
}

func TestUnescape(t *testing.T) {
	if got := unescape(`/a\040b\\c`); got != `/a b\\c` {
		t.Errorf("unescape: %q", got)
	}
}
