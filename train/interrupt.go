package train

import "fmt"

// InterruptedError is what a run returns when Config.Stop asked it to
// stop: it finished the round in progress (with the evaluation and
// checkpoint due after it), saved a checkpoint of everything done and
// stopped. Resuming from that checkpoint continues exactly as if the run
// had not stopped.
type InterruptedError struct {
	Step  int    // rounds done
	Total int    // rounds of the whole run
	Dir   string // where the checkpoint is ("" when there is none)
	Saved bool   // false when no round had run since the last checkpoint or start
}

func (e *InterruptedError) Error() string {
	switch {
	case e.Dir == "":
		return fmt.Sprintf("interrupted after step %d of %d (no --output-dir: nothing saved)", e.Step, e.Total)
	case e.Step == 0:
		return "interrupted before the first step: nothing to save"
	case e.Saved:
		return fmt.Sprintf("interrupted after step %d of %d: checkpoint saved in %s", e.Step, e.Total, checkpointPath(e.Dir))
	}
	return fmt.Sprintf("interrupted after step %d of %d: the checkpoint in %s already holds it", e.Step, e.Total, checkpointPath(e.Dir))
}

// stopRequested reports whether the run is to stop now: on one rank,
// whether Config.Stop is closed; on several, whether it is closed on any
// rank (one all-reduce of one value a round, made whether or not a rank
// has a Stop), so that every rank stops after the same round and they
// save one checkpoint together.
func (l *loop) stopRequested() (bool, error) {
	if l.cfg.Stop == nil && l.ranks == 1 {
		return false, nil
	}
	stop := float32(0)
	select {
	case <-l.cfg.Stop:
		stop = 1
	default:
	}
	if l.ranks > 1 {
		v := []float32{stop}
		if err := l.allReduce(v); err != nil {
			return false, fmt.Errorf("agree on stopping: %w", err)
		}
		stop = v[0]
	}
	return stop > 0, nil
}

// interrupt saves what the run has done since the last checkpoint and
// returns the InterruptedError that ends it.
func (l *loop) interrupt() error {
	ie := &InterruptedError{Step: l.pos.Step, Total: l.cfg.TotalSteps(), Dir: l.cfg.Dir}
	if l.pos.Step > l.pos.LastCkpt {
		if err := l.checkpoint(); err != nil {
			return fmt.Errorf("interrupted after step %d, and the checkpoint failed: %w", l.pos.Step, err)
		}
		ie.Saved = l.cfg.Dir != ""
	}
	if l.ranks > 1 {
		// No rank leaves before rank 0 has written the checkpoint.
		if err := l.cfg.Comm.Barrier(); err != nil {
			return fmt.Errorf("interrupted after step %d: wait for the checkpoint: %w", l.pos.Step, err)
		}
	}
	l.bar.clear()
	l.cfg.Log.Info().Int("step", l.pos.Step).Msg("stopped on request")
	return ie
}
