package mpi

import (
	"os"
	"strconv"
)

// Launch describes how this process was started: by an MPI launcher
// (mpirun, mpiexec, srun --mpi=...) or directly.
type Launch struct {
	// By names the launcher and the variable that gave it away, e.g.
	// "Open MPI's mpirun (OMPI_COMM_WORLD_SIZE)"; empty when the process
	// was not launched by one.
	By string
	// Size and Rank are the world size and this process's rank as the
	// launcher announced them; -1 where it announced none.
	Size, Rank int
	// LocalSize is the number of ranks on this node, -1 where the
	// launcher announced none: they share the node's memory.
	LocalSize int
	// LocalRank is this process's index among the ranks on its node
	// (0 to LocalSize-1), -1 where the launcher announced none: with one
	// GPU per rank it picks the GPU.
	LocalRank int
	// OpenMPI is true for Open MPI's launcher (its ranks must load Open
	// MPI), false for the PMI/Hydra family (MPICH and its ABI: Intel MPI,
	// MVAPICH).
	OpenMPI bool
}

// Launched reports whether a launcher started the process.
func (l Launch) Launched() bool { return l.By != "" }

// launchers lists the variables MPI launchers put in every rank's
// environment, Open MPI's first.
var launchers = []struct {
	name, sizeVar, rankVar, localVar, localRankVar string
	openMPI                                        bool
}{
	{"Open MPI's mpirun", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", true},
	{"a PMI launcher (MPICH's mpiexec, Intel MPI, srun --mpi=pmi2)", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS", "MPI_LOCALRANKID", false},
	{"MVAPICH's launcher", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_RANK", false},
	{"a PMIx launcher", "PMIX_SIZE", "PMIX_RANK", "PMIX_LOCAL_SIZE", "PMIX_LOCAL_RANK", false},
}

// DetectLaunch reads the environment of this process; see Launch.
func DetectLaunch() Launch { return detectLaunch(os.Getenv) }

// detectLaunch is DetectLaunch over any environment lookup.
func detectLaunch(getenv func(string) string) Launch {
	for _, l := range launchers {
		size, rank := getenv(l.sizeVar), getenv(l.rankVar)
		if size == "" && rank == "" {
			continue
		}
		v := l.sizeVar
		if size == "" {
			v = l.rankVar
		}
		return Launch{By: l.name + " (" + v + ")", Size: atoiOr(size, -1), Rank: atoiOr(rank, -1),
			LocalSize: atoiOr(getenv(l.localVar), -1), LocalRank: atoiOr(getenv(l.localRankVar), -1), OpenMPI: l.openMPI}
	}
	return Launch{Size: -1, Rank: -1, LocalSize: -1, LocalRank: -1}
}

func atoiOr(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return def
	}
	return n
}
