package kernels

import (
	"fmt"
	"strconv"
	"strings"
)

// DeviceSpec is a parsed device name, as gochat's --device and the tests'
// GOCHAT_TEST_DEVICE write it.
type DeviceSpec struct {
	Kind    string // "auto", "cpu" or "cuda"
	Ordinal int    // the GPU, for cuda
	Named   bool   // cuda:N named the GPU
}

// ParseDevice parses auto, cpu, cuda (or gpu) and cuda:N; "" is auto.
func ParseDevice(s string) (DeviceSpec, error) {
	switch s {
	case "", "auto":
		return DeviceSpec{Kind: "auto"}, nil
	case "cpu":
		return DeviceSpec{Kind: "cpu"}, nil
	case "cuda", "gpu":
		return DeviceSpec{Kind: "cuda"}, nil
	}
	if rest, ok := strings.CutPrefix(s, "cuda:"); ok {
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 {
			return DeviceSpec{Kind: "cuda", Ordinal: n, Named: true}, nil
		}
	}
	return DeviceSpec{}, fmt.Errorf("device %q: want auto, cpu, cuda or cuda:N", s)
}
