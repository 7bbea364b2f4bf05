package plan

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"strconv"
	"strings"
)

// Memory is what the machine offers a new process, in bytes.
type Memory struct {
	// MemAvailable is /proc/meminfo's estimate of the memory available
	// without swapping (0: unknown).
	MemAvailable int64 `json:"mem_available"`
	// CgroupFree is the tightest cgroup limit on this process minus what
	// its cgroup already uses (cgroup v2 memory.max - memory.current, v1
	// memory.limit_in_bytes - memory.usage_in_bytes, over the process's
	// cgroup and its ancestors); -1 when no cgroup limits memory.
	CgroupFree int64 `json:"cgroup_free"`
	// Cgroup names the limiting cgroup file ("" without a limit).
	Cgroup string `json:"cgroup,omitempty"`
	// Available is the smaller of the two (the one that is known), divided
	// by Shared.
	Available int64 `json:"available"`
	// Shared is the number of processes on this machine that share the
	// memory (ranks of an MPI job on one node; 0 or 1: none).
	Shared int `json:"shared,omitempty"`
}

// Share divides the available memory between n processes on the machine
// (each rank of a job plans for its part).
func (m Memory) Share(n int) Memory {
	if n > 1 {
		m.Available /= int64(n)
		m.Shared = n
	}
	return m
}

// String describes the memory for a message.
func (m Memory) String() string {
	s := fmt.Sprintf("%s available (MemAvailable %s", GiB(m.Available), GiB(m.MemAvailable))
	if m.Shared > 1 {
		s = fmt.Sprintf("%s available to each of %d ranks on this machine (MemAvailable %s", GiB(m.Available), m.Shared, GiB(m.MemAvailable))
	}
	if m.CgroupFree >= 0 {
		s += fmt.Sprintf(", cgroup %s free under %s", GiB(m.CgroupFree), m.Cgroup)
	}
	return s + ")"
}

// unlimited is what cgroup v1 reports for no limit (and anything at least
// this large is no limit).
const unlimited = int64(1) << 62

// Available reads what the machine offers from fsys, the root file system
// ("/" in production, a fstest.MapFS in tests): proc/meminfo, and the
// process's cgroups found through proc/self/cgroup and
// proc/self/mountinfo. A missing /proc is an error; missing cgroup files
// mean no cgroup limit.
func Available(fsys fs.FS) (Memory, error) {
	m := Memory{CgroupFree: -1}
	b, err := fs.ReadFile(fsys, "proc/meminfo")
	if err != nil {
		return m, fmt.Errorf("available memory: %w", err)
	}
	if m.MemAvailable, err = memAvailable(b); err != nil {
		return m, fmt.Errorf("available memory: /proc/meminfo: %w", err)
	}
	m.Available = m.MemAvailable
	free, file := cgroupFree(fsys)
	if file != "" {
		m.CgroupFree, m.Cgroup = free, "/"+file
		m.Available = min(m.Available, max(free, 0))
	}
	return m, nil
}

// memAvailable parses MemAvailable from /proc/meminfo (in kB).
func memAvailable(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || kb < 0 {
				return 0, fmt.Errorf("MemAvailable %q", f[1])
			}
			return kb * 1024, nil
		}
	}
	return 0, errors.New("no MemAvailable line")
}

// mount is a cgroup file system mount: where it is and which cgroup path
// its root is.
type mount struct {
	point, root string
}

// cgroupMounts finds the cgroup v2 mount and the cgroup v1 memory
// controller's mount in proc/self/mountinfo.
func cgroupMounts(fsys fs.FS) (v2, v1 *mount) {
	b, err := fs.ReadFile(fsys, "proc/self/mountinfo")
	if err != nil {
		return nil, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// 36 35 98:0 /root /mnt rw,noatime - cgroup2 cgroup2 rw
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 {
			continue
		}
		mt := &mount{point: unescape(f[4]), root: unescape(f[3])}
		switch {
		case g[0] == "cgroup2" && v2 == nil:
			v2 = mt
		case g[0] == "cgroup" && len(g) >= 3 && v1 == nil && hasOption(g[2], "memory"):
			v1 = mt
		}
	}
	return v2, v1
}

func hasOption(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// cgroupFree returns the least free memory under any limit on the
// process's cgroups (v2 and v1, the cgroup and its ancestors within the
// mount) and the file of that limit; "" when nothing limits memory.
func cgroupFree(fsys fs.FS) (int64, string) {
	b, err := fs.ReadFile(fsys, "proc/self/cgroup")
	if err != nil {
		return 0, ""
	}
	v2, v1 := cgroupMounts(fsys)
	best, file := int64(math.MaxInt64), ""
	consider := func(mt *mount, cg, limitName, usageName string) {
		if mt == nil {
			return
		}
		rel, ok := strings.CutPrefix(cg, mt.root)
		if !ok || (mt.root != "/" && rel != "" && !strings.HasPrefix(rel, "/")) {
			return // the cgroup is outside what this mount shows
		}
		dir := path.Join(strings.TrimPrefix(mt.point, "/"), rel)
		root := strings.TrimPrefix(mt.point, "/")
		for {
			limit, ok1 := readInt(fsys, path.Join(dir, limitName))
			usage, ok2 := readInt(fsys, path.Join(dir, usageName))
			if ok1 && ok2 && limit < unlimited && limit-usage < best {
				best, file = limit-usage, path.Join(dir, limitName)
			}
			if dir == root || dir == "." || dir == "" {
				return
			}
			dir = path.Dir(dir)
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			consider(v2, f[2], "memory.max", "memory.current")
		case hasOption(f[1], "memory"):
			consider(v1, f[2], "memory.limit_in_bytes", "memory.usage_in_bytes")
		}
	}
	if file == "" {
		return 0, ""
	}
	return best, file
}

// readInt reads a cgroup file holding one integer ("max" is no limit).
func readInt(fsys fs.FS, name string) (int64, bool) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return unlimited, true
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// GiB formats bytes as GiB with one decimal (two below 10 GiB).
func GiB(b int64) string {
	g := float64(b) / (1 << 30)
	if g < 10 {
		return fmt.Sprintf("%.2f GiB", g)
	}
	return fmt.Sprintf("%.1f GiB", g)
}
