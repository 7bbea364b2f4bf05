//go:build unix

package cli

import (
	"os"
	"syscall"
)

// stopSignals are the signals that stop a run with a checkpoint.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGUSR1}
