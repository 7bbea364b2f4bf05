package train

import (
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

// OpenMetrics opens dir/metrics.jsonl keeping its first keep records (a
// resumed run appends after the records its checkpoint covers; keep 0
// starts a fresh log). An empty dir disables metrics.
func OpenMetrics(dir string, keep int) (*MetricsLog, error) {
	if dir == "" {
		return &MetricsLog{}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create output directory: %w", err)
	}
	path := filepath.Join(dir, MetricsFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open metrics: %w", err)
	}
	m := &MetricsLog{path: path, f: f}
	if err := m.truncate(keep); err != nil {
		f.Close()
		return nil, err
	}
	return m, nil
}

// truncate keeps the first keep records (those written after the
// checkpoint being resumed are dropped) and positions for appending.
func (m *MetricsLog) truncate(keep int) error {
	b, err := os.ReadFile(m.path)
	if err != nil {
		return fmt.Errorf("read metrics: %w", err)
	}
	n, rows := 0, 0
	for rows < keep {
		i := bytes.IndexByte(b[n:], '\n')
		if i < 0 {
			break
		}
		n += i + 1
		rows++
	}
	if rows < keep {
		return fmt.Errorf("metrics %s has %d complete records, the checkpoint covers %d; the file was changed since", m.path, rows, keep)
	}
	if err := m.f.Truncate(int64(n)); err != nil {
		return fmt.Errorf("rewrite metrics: %w", err)
	}
	if _, err := m.f.Seek(int64(n), 0); err != nil {
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

// Sync flushes the log to disk (before a checkpoint records its length).
func (m *MetricsLog) Sync() error {
	if m.f == nil {
		return nil
	}
	return m.f.Sync()
}
