//go:build !amd64 && !arm64

package nccl

// commInitRankArgs has no layout on this architecture: NCCL is built for
// x86-64 and AArch64 only, and loading it fails before a call.
func commInitRankArgs(comm uintptr, nranks, rank int, id *UniqueID, idAddr uintptr) []uintptr {
	panic("nccl: ncclCommInitRank's argument layout is known for amd64 and arm64 only")
}
