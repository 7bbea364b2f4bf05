package mpi

import (
	"strings"
	"testing"
)

func TestProbe(t *testing.T) {
	t.Setenv(EnvLib, "/nonexistent/libmpi.so.40")
	if r := Probe(); r.Err == nil || r.Path != "" || !strings.Contains(r.Err.Error(), "/nonexistent/libmpi.so.40") {
		t.Fatalf("a missing override: %+v", r)
	}
	t.Setenv(EnvLib, "")
	r := Probe()
	if r.Err != nil {
		t.Skipf("no MPI here: %v", r.Err)
	}
	if r.Path == "" || r.Version == "" || (r.Flavour != OpenMPI && r.Flavour != MPICH) {
		t.Fatalf("found MPI but %+v", r)
	}
	t.Logf("%s at %s: %s", r.Flavour, r.Path, r.Version)
}
