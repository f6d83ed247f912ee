package objectstore

import "testing"

func TestStreamPartSize(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name       string
		configured uint64
		hint       int64
		want       uint64
	}{
		{"no hint: the configured size", DefaultPartSize, 0, DefaultPartSize},
		{"a small stream: S3's least", DefaultPartSize, 700 << 20, minPartSize},
		{"exactly 9,000 parts of 5 MiB", DefaultPartSize, 9000 * 5 * mib, minPartSize},
		{"a byte more: 6 MiB", DefaultPartSize, 9000*5*mib + 1, 6 * mib},
		{"100 GB: 11 MiB", DefaultPartSize, 100e9, 11 * mib},
		{"larger than the configured size allows: the configured size", DefaultPartSize, 1e12, DefaultPartSize},
		{"a configured size below the need is kept", 8 * mib, 100e9, 8 * mib},
	}
	for _, tt := range tests {
		if got := streamPartSize(tt.configured, tt.hint); got != tt.want {
			t.Errorf("%s: %d MiB, want %d MiB", tt.name, got/mib, tt.want/mib)
		}
	}
}
