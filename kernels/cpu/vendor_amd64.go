package cpu

import "encoding/binary"

// cpuidVendor returns CPUID leaf 0's vendor registers.
func cpuidVendor() (ebx, edx, ecx uint32)

// cpuVendor is the CPU's vendor string: "GenuineIntel", "AuthenticAMD", ...
func cpuVendor() string {
	ebx, edx, ecx := cpuidVendor()
	var b [12]byte
	binary.LittleEndian.PutUint32(b[0:], ebx)
	binary.LittleEndian.PutUint32(b[4:], edx)
	binary.LittleEndian.PutUint32(b[8:], ecx)
	return string(b[:])
}
