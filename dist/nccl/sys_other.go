//go:build !linux

package nccl

import (
	"errors"
	"runtime"
)

var errUnsupported = errors.New("loading NCCL is implemented for Linux only, not " + runtime.GOOS)

type sysDL struct{}

func (sysDL) open(string) (uintptr, error)         { return 0, errUnsupported }
func (sysDL) sym(uintptr, string) (uintptr, error) { return 0, errUnsupported }
