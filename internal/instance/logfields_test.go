package instance

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestLogFieldsOnEveryRecordWithTheCurrentTimeline(t *testing.T) {
	var buf bytes.Buffer
	fields := NewLogFields("orders", "orders-2")
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zapcore.InfoLevel)
	log := zap.New(core, zap.WrapCore(fields.WrapCore)).Named("manager").With(zap.String("k", "v"))

	log.Info("before the timeline is known")
	fields.SetTimeline(2)
	log.Info("on timeline 2")
	fields.SetTimeline(3)
	log.Info("promoted", zap.Uint32("timeline", 3))
	log.Debug("below the level")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d records, want 3:\n%s", len(lines), buf.String())
	}
	for i, want := range []map[string]any{
		{"cluster": "orders", "instance": "orders-2", "logger": "manager", "k": "v", "timeline": nil},
		{"cluster": "orders", "instance": "orders-2", "timeline": 2.0},
		{"timeline": 3.0},
	} {
		var rec map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			if rec[k] != v {
				t.Errorf("record %d: %s = %v, want %v: %s", i, k, rec[k], v, lines[i])
			}
		}
	}
	if n := strings.Count(lines[2], `"timeline"`); n != 1 {
		t.Errorf("a record with its own timeline has %d timeline keys: %s", n, lines[2])
	}
}
