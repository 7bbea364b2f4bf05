//go:build !linux

package mpi

import (
	"errors"
	"runtime"
)

var errUnsupported = errors.New("loading MPI is implemented for Linux only, not " + runtime.GOOS)

type sysDL struct{}

func (sysDL) open(string) (uintptr, error)         { return 0, errUnsupported }
func (sysDL) sym(uintptr, string) (uintptr, error) { return 0, errUnsupported }

type offHeap struct{ mem []byte }

func mapOffHeap(int) (offHeap, error) { return offHeap{}, errUnsupported }
func (m *offHeap) unmap() error       { return nil }
func (m offHeap) addr(int) uintptr    { return 0 }

type signalHandlers struct{}

func saveSignals() *signalHandlers     { return &signalHandlers{} }
func (*signalHandlers) restore() []int { return nil }
