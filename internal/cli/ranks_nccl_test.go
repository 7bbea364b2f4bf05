package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gochat-ai/gochat/dist/mpi"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cuda"
)

func TestDecideNCCL(t *testing.T) {
	all, none, mixed := []bool{true, true, true}, []bool{false, false}, []bool{true, false, true, false}
	for _, c := range []struct {
		mode  string
		gpus  []bool
		use   bool
		err   string
		usage bool
	}{
		{"auto", all, true, "", false},
		{"", all, true, "", false},
		{"auto", none, false, "", false},
		{"auto", mixed, false, "ranks 1, 3 are on the CPU and the others on GPUs", false},
		{"nccl", all, true, "", false},
		{"nccl", mixed, false, "--dist nccl: ranks 1, 3 are not on a GPU", true},
		{"mpi", all, false, "", false},
		{"mpi", mixed, false, "", false},
	} {
		use, err := decideNCCL(c.mode, c.gpus)
		var ue usageError
		if use != c.use || (err == nil) != (c.err == "") || err != nil && (!strings.Contains(err.Error(), c.err) || errors.As(err, &ue) != c.usage) {
			t.Errorf("decideNCCL(%q, %v) = %v, %v; want %v, %q", c.mode, c.gpus, use, err, c.use, c.err)
		}
	}
}

func TestLocalGPU(t *testing.T) {
	ompi := mpi.Launch{By: "Open MPI's mpirun", Size: 8, Rank: 5, LocalSize: 4, LocalRank: 1}
	for _, c := range []struct {
		spec    kernels.DeviceSpec
		l       mpi.Launch
		ordinal int
		why     string
	}{
		{kernels.DeviceSpec{Kind: "cuda"}, mpi.Launch{Size: -1, Rank: -1, LocalSize: -1, LocalRank: -1}, 0, ""},
		{kernels.DeviceSpec{Kind: "cuda"}, ompi, 1, "local rank 1 of 4 on this node"},
		{kernels.DeviceSpec{Kind: "auto"}, ompi, 1, "local rank 1 of 4 on this node"},
		{kernels.DeviceSpec{Kind: "cuda", Ordinal: 3, Named: true}, ompi, 3, ""},
		{kernels.DeviceSpec{Kind: "cuda"}, mpi.Launch{By: "a PMIx launcher", Size: 2, Rank: 1, LocalSize: -1, LocalRank: -1}, 0, ""},
		{kernels.DeviceSpec{Kind: "cuda"}, mpi.Launch{By: "x", Size: 2, Rank: 1, LocalSize: -1, LocalRank: 1}, 1, "local rank 1 of ? on this node"},
	} {
		if o, why := localGPU(c.spec, c.l); o != c.ordinal || why != c.why {
			t.Errorf("localGPU(%+v, %+v) = %d, %q; want %d, %q", c.spec, c.l, o, why, c.ordinal, c.why)
		}
	}
}

// Under mpirun each rank opens the GPU of its local rank; a rank whose GPU
// does not exist says which it wanted and why.
func TestNewDeviceLocalRank(t *testing.T) {
	t.Setenv("OMPI_COMM_WORLD_SIZE", "4")
	t.Setenv("OMPI_COMM_WORLD_RANK", "3")
	t.Setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4")
	t.Setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3")
	var asked []int
	twoGPUs := func(g *Globals, n int) (kernels.Device, error) {
		asked = append(asked, n)
		if n >= 2 {
			return nil, errors.New("cuda: no GPU 3 (the driver sees 2: cuda:0 to cuda:1)")
		}
		c, err := newCPU(g)
		return gpuStandIn{c}, err
	}
	var log bytes.Buffer
	g := &Globals{Device: "cuda", Threads: 1, Log: zerolog.New(&log), OpenGPU: twoGPUs}
	_, err := newDevice(g)
	if err == nil || !strings.Contains(err.Error(), "local rank 3 of 4 on this node takes cuda:3") || !strings.Contains(err.Error(), "the driver sees 2") {
		t.Errorf("rank 3 on a 2-GPU node: %v", err)
	}
	t.Setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
	if d, err := newDevice(g); err != nil || asked[len(asked)-1] != 1 || !strings.Contains(log.String(), "local rank 1 of 4") {
		t.Errorf("rank 1: %v, %v, asked %v, log %s", d, err, asked, log.String())
	}
	// cuda:N names the GPU whatever the local rank.
	g.Device = "cuda:0"
	if _, err := newDevice(g); err != nil || asked[len(asked)-1] != 0 {
		t.Errorf("cuda:0: %v, asked %v", err, asked)
	}
}

func TestEnvReportNCCL(t *testing.T) {
	for _, c := range []struct {
		r    *cuda.Report
		want string
	}{
		{&cuda.Report{DriverErr: errors.New("no driver"), NCCLPath: "/sp/nvidia/nccl/lib/libnccl.so.2", NCCLVersion: "2.27.3"},
			"NCCL:     /sp/nvidia/nccl/lib/libnccl.so.2 (2.27.3); unused here: no GPU"},
		{&cuda.Report{NCCLPath: "/sp/nvidia/nccl/lib/libnccl.so.2", NCCLVersion: "2.27.3", GPUs: []cuda.GPUInfo{{}, {Index: 1}}},
			"NCCL:     /sp/nvidia/nccl/lib/libnccl.so.2 (2.27.3); mpirun -np N gochat ... with one GPU a rank uses it (--dist auto; 2 GPU(s) here)"},
		{&cuda.Report{NCCLErr: errors.New("cuda: no usable libnccl"), GPUs: []cuda.GPUInfo{{}}},
			"NCCL:     not found (cuda: no usable libnccl); mpirun -np N gochat ... with one GPU a rank would reduce over MPI through host memory"},
	} {
		var out bytes.Buffer
		w := &errWriter{w: &out}
		writeCUDAReport(w, c.r)
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("got\n%s\nwant a line %q", out.String(), c.want)
		}
	}
}

func TestDistFlag(t *testing.T) {
	_, errOut, code := run(t, "--dist", "gloo", "version")
	if code != exitUsage || !strings.Contains(errOut, `--dist "gloo": want auto, mpi or nccl`) {
		t.Errorf("--dist gloo: code %d, %q", code, errOut)
	}
	if _, errOut, code := run(t, "--dist", "nccl", "version"); code != 0 {
		t.Errorf("--dist nccl: code %d, %q", code, errOut)
	}
}
