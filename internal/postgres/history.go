package postgres

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseTimelineHistory reads a timeline history file (NNNNNNNN.history):
// one line per ancestor timeline, "<timeline>\t<switch LSN>\t<reason>",
// oldest first, with blank and "#" comment lines allowed. It returns where
// each ancestor timeline ended: its WAL up to that LSN is the new
// timeline's history, and none after it.
func ParseTimelineHistory(text string) (map[uint32]LSN, error) {
	ends := map[uint32]LSN{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			return nil, fmt.Errorf("timeline history line %d %q: want a timeline and a switch LSN", i+1, line)
		}
		tli, err := strconv.ParseUint(fields[0], 10, 32)
		if err != nil || tli == 0 {
			return nil, fmt.Errorf("timeline history line %d %q: invalid timeline %q", i+1, line, fields[0])
		}
		end, err := ParseLSN(fields[1])
		if err != nil {
			return nil, fmt.Errorf("timeline history line %d %q: %w", i+1, line, err)
		}
		ends[uint32(tli)] = end
	}
	return ends, nil
}
