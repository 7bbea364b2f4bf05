package plan

import (
	"strings"
	"testing"
)

// TestMemoryShare: the ranks of a job on one machine each plan for their
// part of the available memory, and the message says so.
func TestMemoryShare(t *testing.T) {
	m := Memory{MemAvailable: 24 << 30, CgroupFree: -1, Available: 24 << 30}
	for _, n := range []int{-1, 0, 1} {
		if got := m.Share(n); got != m {
			t.Errorf("Share(%d) = %+v, want unchanged", n, got)
		}
	}
	s := m.Share(4)
	if s.Available != 6<<30 || s.Shared != 4 || s.MemAvailable != 24<<30 {
		t.Errorf("Share(4) = %+v", s)
	}
	if !strings.Contains(s.String(), "each of 4 ranks") {
		t.Errorf("message %q does not name the ranks", s.String())
	}
}
