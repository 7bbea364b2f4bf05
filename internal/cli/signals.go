package cli

import (
	"errors"
	"fmt"
	"os"
	"os/signal"

	"github.com/gochat-ai/gochat/train"
)

// watchSignals, for the duration of a training command (sft, reward, ppo,
// train; other commands keep Go's default: a signal ends them), makes the
// first stop signal (stopSignals: Ctrl-C's SIGINT, SIGTERM, and SIGUSR1,
// which mpirun forwards to every rank) close g.Stop: the command then
// stops after the round in progress, writes a checkpoint and says how to
// resume. A second one exits at once with code 130, losing the work since
// the last checkpoint (whatever it cuts short is cleaned up by the next
// start). unwatch restores the default handling.
func (g *Globals) watchSignals() (unwatch func()) {
	stop := make(chan struct{})
	g.Stop = stop
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stopSignals...)
	quit := make(chan struct{})
	errw := g.Err
	go func() {
		select {
		case s := <-sigs:
			close(stop)
			fmt.Fprintf(errw, "gochat: %v: stopping after the current step to save a checkpoint; send it again to exit at once (losing the work since the last checkpoint)\n", s)
		case <-quit:
			return
		}
		select {
		case s := <-sigs:
			fmt.Fprintf(errw, "gochat: %v again: exiting now\n", s)
			os.Exit(exitInterrupted)
		case <-quit:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(quit)
	}
}

// errStopped is the error of a command that a stop signal ended between
// its parts (gochat train between steps), with nothing left unsaved.
var errStopped = errors.New("interrupted")

// interrupted reports whether err ends a command that stopped on request
// (exit code 130).
func interrupted(err error) bool {
	_, ok := errors.AsType[*train.InterruptedError](err)
	return ok || errors.Is(err, errStopped)
}

// stopRequested reports whether stop is closed.
func stopRequested(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// resumeHint adds to an interrupted step's error how to continue it: the
// same command with --resume, or, for a step of gochat train, the same
// train command (which resumes by itself).
func resumeHint(err error, inTrain bool) error {
	ie, ok := errors.AsType[*train.InterruptedError](err)
	switch {
	case !ok || !ie.Saved && ie.Step == 0:
		return err
	case inTrain:
		return fmt.Errorf("%w; run the same gochat train command again to continue", err)
	}
	return fmt.Errorf("%w; run the same command with --resume to continue", err)
}
