package nccl

import "encoding/binary"

// commInitRankArgs lays out ncclCommInitRank(ncclComm_t* comm, int
// nranks, ncclUniqueId commId, int rank) for purego.SyscallN on x86-64
// (System V AMD64 ABI, which Linux uses).
//
// Why this is ABI-correct: ncclUniqueId is struct { char internal[128]; },
// an aggregate larger than four eightbytes, so its class is MEMORY (psABI
// §3.2.3, classification rule 1): it is passed by value in memory, its
// 16 eightbytes copied in order onto the stack where the stack arguments
// begin, and it takes no register. The integer arguments around it take
// the integer registers in order: comm in RDI, nranks in RSI and rank in
// RDX (the next free register; an argument in memory does not consume
// one). SyscallN puts its first six arguments in RDI, RSI, RDX, RCX, R8,
// R9 and the seventh onwards at 0(SP), 8(SP), ... of the callee's frame
// (purego v0.11.3 sys_amd64.s), so the layout is comm, nranks, rank, three
// unused registers (zero), then the id's 16 eightbytes: 22 arguments,
// within SyscallN's 32. (purego's own RegisterFunc passes such a struct
// the same way — struct_amd64.go's placeStack — which the tests check.)
// idAddr is not used here: the callee receives the bytes themselves.
func commInitRankArgs(comm uintptr, nranks, rank int, id *UniqueID, idAddr uintptr) []uintptr {
	args := make([]uintptr, 6, 6+len(id)/8)
	args[0], args[1], args[2] = comm, uintptr(nranks), uintptr(rank)
	for i := 0; i < len(id); i += 8 {
		args = append(args, uintptr(binary.LittleEndian.Uint64(id[i:])))
	}
	return args
}
