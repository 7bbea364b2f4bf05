//go:build !unix

package cli

import "os"

// stopSignals are the signals that stop a run with a checkpoint.
var stopSignals = []os.Signal{os.Interrupt}
