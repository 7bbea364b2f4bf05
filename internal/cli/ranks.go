package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/dist/mpi"
	"github.com/gochat-ai/gochat/dist/nccl"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cuda"
)

// A GPU of kernels/cuda is a device NCCL runs on.
var _ nccl.Device = (*cuda.Device)(nil)

// group is the set of ranks a training command runs on: this process alone
// outside an MPI launcher, every rank of the job under mpirun -np N.
type group struct {
	comm dist.Comm
	log  zerolog.Logger // the rank's logger (see joinRanks)
}

// joinRanks constructs the communicator this process was launched into:
// dist.Single outside mpirun (single-process runs load neither MPI nor
// NCCL), else the MPI job, and over it NCCL when every rank is on a GPU
// (useNCCL; --dist decides). On ranks other than 0 it narrows g.Log to
// warnings and errors tagged with the rank: rank 0 reports the run.
func joinRanks(g *Globals, dev kernels.Device) (*group, error) {
	c, err := mpi.FromEnv(dev)
	if err != nil {
		return nil, err
	}
	if c.Size() > 1 && c.Rank() != 0 {
		lvl := g.Log.GetLevel()
		if lvl < zerolog.WarnLevel {
			lvl = zerolog.WarnLevel
		}
		g.Log = g.Log.Level(lvl).With().Int("rank", c.Rank()).Logger()
	}
	if m, ok := c.(*mpi.Comm); ok && m.Size() > 1 {
		if c, err = overMPI(g, dev, m); err != nil {
			return nil, err
		}
	}
	return &group{comm: c, log: g.Log}, nil
}

// overMPI returns the communicator a multi-rank job trains with: NCCL
// over the MPI job m when useNCCL says so, else m. Errors every rank
// shares close MPI (every rank returns the same error); a rank's own
// failure to build the NCCL communicator aborts the job, since the other
// ranks may be waiting for it.
func overMPI(g *Globals, dev kernels.Device, m *mpi.Comm) (dist.Comm, error) {
	gpu, onGPU := dev.(nccl.Device)
	use, err := useNCCL(g.Dist, onGPU, m)
	if err != nil {
		_ = m.Close()
		return nil, err
	}
	if !use {
		g.Log.Info().Int("ranks", m.Size()).Msgf("ranks: %d over MPI (%s)", m.Size(), m.Library())
		return m, nil
	}
	n, err := nccl.New(gpu, m, nccl.Options{Libs: cuda.NCCLCandidates(cuda.SearchEnvFrom(os.Getenv))})
	var se *nccl.SetupError
	switch {
	case err == nil:
		g.Log.Info().Int("ranks", n.Size()).Msgf("ranks: %d over NCCL %s, bootstrapped over MPI (%s)", n.Size(), n.Library(), m.Library())
		return n, nil
	case errors.As(err, &se) && se.AllRanks && g.Dist != "nccl":
		g.Log.Warn().Err(err).Msgf("ranks: %d over MPI through host memory (slower than NCCL; --dist nccl makes this an error)", m.Size())
		return m, nil
	case errors.As(err, &se) && se.AllRanks:
		_ = m.Close()
		return nil, fmt.Errorf("--dist nccl: %w", err)
	}
	g.Log.Error().Err(err).Msg("NCCL setup failed on this rank; aborting the job")
	m.Abort(exitError)
	return nil, err // not reached
}

// useNCCL decides, the same on every rank, whether a multi-rank job uses
// NCCL: the ranks tell each other whether their device is a GPU NCCL can
// use (onGPU), and decideNCCL rules on what every rank sees.
func useNCCL(mode string, onGPU bool, m *mpi.Comm) (bool, error) {
	mine := []byte{0}
	if onGPU {
		mine[0] = 1
	}
	all := make([]byte, m.Size())
	if err := m.AllGatherBytes(all, mine); err != nil {
		return false, err
	}
	gpus := make([]bool, len(all))
	for r, b := range all {
		gpus[r] = b == 1
	}
	return decideNCCL(mode, gpus)
}

// decideNCCL is --dist's rule over which ranks are on a GPU: auto takes
// NCCL when all are, MPI when none is, and refuses a mix (ranks on GPUs
// and on the CPU: fewer GPUs than ranks, or --device auto falling back on
// some); nccl needs every rank on a GPU; mpi never uses NCCL.
func decideNCCL(mode string, onGPU []bool) (bool, error) {
	var cpus []string
	for r, gpu := range onGPU {
		if !gpu {
			cpus = append(cpus, strconv.Itoa(r))
		}
	}
	switch {
	case mode == "mpi":
		return false, nil
	case len(cpus) == 0:
		return true, nil
	case mode == "nccl":
		return false, usageErrorf("--dist nccl: ranks %s are not on a GPU", strings.Join(cpus, ", "))
	case len(cpus) < len(onGPU):
		return false, fmt.Errorf("ranks %s are on the CPU and the others on GPUs: give every rank a GPU (at most as many ranks a node as it has GPUs) or run all on the CPU (--device cpu)", strings.Join(cpus, ", "))
	}
	return false, nil
}

// writer reports whether this rank writes the run's files (rank 0).
func (gr *group) writer() bool { return gr.comm.Rank() == 0 }

// finish ends the group after the command returned err: it finalizes MPI
// after a success or a stop on request (which every rank makes together,
// after the same round: interrupted); after an error on several ranks it
// logs the error with the rank and aborts the whole job (MPI_Abort, exit
// code of the error), so that no rank waits forever in a collective this
// one will not join.
func (gr *group) finish(err error) error {
	cl, ok := gr.comm.(io.Closer)
	if !ok {
		return err
	}
	if err != nil && gr.comm.Size() > 1 && !interrupted(err) {
		code := exitError
		var ue usageError
		if errors.As(err, &ue) {
			code = exitUsage
		}
		gr.log.Error().Int("rank", gr.comm.Rank()).Err(err).Msg("rank failed; aborting the job")
		if a, ok := gr.comm.(interface{ Abort(int) }); ok {
			a.Abort(code)
		}
	}
	if cerr := cl.Close(); cerr != nil && err == nil {
		return fmt.Errorf("close the ranks' communicator: %w", cerr)
	}
	return err
}

// claimRunDir is how a training command takes its output directory:
// rank 0 locks it (lockOutput) and checks the run against it
// (prepareRunDir, which may turn *resume off), then every rank adopts
// rank 0's *resume. The command calls begin once its models and data are
// loaded, before it writes anything (rank 0 records the run then, and
// with --overwrite replaces the previous one; nothing on other ranks);
// release ends the lock (nothing on other ranks).
func (gr *group) claimRunDir(g *Globals, dev kernels.Device, dir string, options any, resume *bool, overwrite bool) (begin func() error, release func(), err error) {
	release, begin = func() {}, func() error { return nil }
	if gr.writer() {
		if release, err = lockOutput(dir); err != nil {
			return nil, nil, err
		}
		if *resume, begin, err = prepareRunDir(g, dir, options, *resume, overwrite); err != nil {
			release()
			return nil, nil, err
		}
	}
	if *resume, err = gr.shareFlag(dev, *resume); err != nil {
		release()
		return nil, nil, err
	}
	return begin, release, nil
}

// shareFlag makes every rank agree on rank 0's value of b.
func (gr *group) shareFlag(dev kernels.Device, b bool) (bool, error) {
	if gr.comm.Size() == 1 {
		return b, nil
	}
	buf, err := dev.Alloc(kernels.F32, 1)
	if err != nil {
		return false, err
	}
	defer dev.Free(buf)
	v := []float32{0}
	if b {
		v[0] = 1
	}
	dev.WriteF32(buf, v)
	if err := gr.comm.Broadcast(buf, 0); err != nil {
		return false, err
	}
	dev.ReadF32(v, buf)
	return v[0] != 0, nil
}

// stepRanks returns the ranks a training command runs on and the function
// that ends them with the command's error: the group gochat train joined
// once for all its steps (shared; train ends it), or a new one (MPI is
// initialized once per process, so the steps of train cannot each join).
func stepRanks(g *Globals, shared *group, dev kernels.Device) (*group, func(error) error, error) {
	if shared != nil {
		return shared, func(err error) error { return err }, nil
	}
	gr, err := joinRanks(g, dev)
	if err != nil {
		return nil, nil, err
	}
	return gr, gr.finish, nil
}
