package nccl

// commInitRankArgs lays out ncclCommInitRank(ncclComm_t* comm, int
// nranks, ncclUniqueId commId, int rank) for purego.SyscallN on AArch64
// (AAPCS64, which Linux and macOS use alike for this call).
//
// Why this is ABI-correct: ncclUniqueId is a 128-byte composite, neither
// an HFA nor an HVA, and larger than 16 bytes, so AAPCS64 (§6.8.2, rule
// B.4) has the caller copy it to memory and pass the copy's address in
// its place: comm in X0, nranks in W1, the copy's address in X2 and rank
// in W3. SyscallN puts its first eight arguments in X0 to X7 (purego
// v0.11.3 sys_arm64.s). idAddr is the address of a copy the caller made
// for this call (lib.commInitRank), which NCCL may read (it copies the id
// before returning).
func commInitRankArgs(comm uintptr, nranks, rank int, id *UniqueID, idAddr uintptr) []uintptr {
	return []uintptr{comm, uintptr(nranks), idAddr, uintptr(rank)}
}
