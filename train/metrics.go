package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// MetricsFile is the name of the metrics log in the output directory: one
// JSON object per line, for each logged step and each evaluation.
const MetricsFile = "metrics.jsonl"

// MetricsLog is an open metrics.jsonl (see MetricsFile).
type MetricsLog struct {
	path   string
	f      *os.File
	rows   int
	events interface {
		Scalars(step int, values map[string]float64) error
	}
}

// openMetrics opens Dir/metrics.jsonl: appending on resume (after
// truncate), from scratch otherwise. An empty dir disables metrics.
func openMetrics(dir string, resume bool) (*MetricsLog, error) {
	if dir == "" {
		return &MetricsLog{}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create output directory: %w", err)
	}
	path := filepath.Join(dir, MetricsFile)
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if resume {
		flags = os.O_CREATE | os.O_RDWR
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open metrics: %w", err)
	}
	return &MetricsLog{path: path, f: f}, nil
}

// truncate keeps the records of steps up to step (those written after the
// checkpoint being resumed are dropped) and positions for appending.
func (m *MetricsLog) truncate(step int) error {
	if m.f == nil {
		return nil
	}
	b, err := os.ReadFile(m.path)
	if err != nil {
		return fmt.Errorf("read metrics: %w", err)
	}
	var keep bytes.Buffer
	rows := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var rec struct {
			Step int `json:"step"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec.Step > step {
			break
		}
		keep.Write(sc.Bytes())
		keep.WriteByte('\n')
		rows++
	}
	if err := m.f.Truncate(0); err != nil {
		return fmt.Errorf("rewrite metrics: %w", err)
	}
	if _, err := m.f.WriteAt(keep.Bytes(), 0); err != nil {
		return fmt.Errorf("rewrite metrics: %w", err)
	}
	if _, err := m.f.Seek(int64(keep.Len()), 0); err != nil {
		return fmt.Errorf("rewrite metrics: %w", err)
	}
	m.rows = rows
	return nil
}

// Write appends one record; non-finite numbers become null.
func (m *MetricsLog) Write(rec map[string]any) error {
	if m.f == nil {
		return nil
	}
	for k, v := range rec {
		if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			rec[k] = nil
		}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	if _, err := m.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	m.rows++
	if m.events != nil {
		vals := map[string]float64{}
		step := 0
		for k, v := range rec {
			switch x := v.(type) {
			case float64:
				vals[k] = x
			case int:
				if k == "step" {
					step = x
				} else {
					vals[k] = float64(x)
				}
			}
		}
		return m.events.Scalars(step, vals)
	}
	return nil
}

func (m *MetricsLog) Close() error {
	if m.f == nil {
		return nil
	}
	return m.f.Close()
}

// ReadMetrics reads a metrics.jsonl file.
func ReadMetrics(path string) ([]map[string]float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	var out []map[string]float64
	for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var raw map[string]any
		if err := json.Unmarshal(line, &raw); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		rec := map[string]float64{}
		for k, v := range raw {
			if f, ok := v.(float64); ok {
				rec[k] = f
			}
		}
		out = append(out, rec)
	}
	return out, nil
}

// OpenMetrics opens dir/metrics.jsonl for a run that logs outside the
// loop (step 3): records of steps up to keep are kept (a resumed run
// appends after its checkpoint's step; keep 0 starts a fresh log).
func OpenMetrics(dir string, keep int) (*MetricsLog, error) {
	m, err := openMetrics(dir, true)
	if err != nil {
		return nil, err
	}
	if err := m.truncate(keep); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Sync flushes the log to disk (before a checkpoint records its length).
func (m *MetricsLog) Sync() error {
	if m.f == nil {
		return nil
	}
	return m.f.Sync()
}
