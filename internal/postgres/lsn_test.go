package postgres

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
)

func TestParseLSN(t *testing.T) {
	tests := []struct {
		in   string
		want LSN
	}{
		{"0/0", 0},
		{"0/3000060", 0x3000060},
		{"16/B374D848", 0x16_B374D848},
		{"16/b374d848", 0x16_B374D848},
		{"00000016/0B374D84", 0x16_0B374D84},
		{"FFFFFFFF/FFFFFFFF", math.MaxUint64},
		{"1/0", 1 << 32},
	}
	for _, tt := range tests {
		got, err := ParseLSN(tt.in)
		if err != nil {
			t.Errorf("ParseLSN(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseLSN(%q) = %#x, want %#x", tt.in, uint64(got), uint64(tt.want))
		}
	}
}

func TestParseLSNRejectsWhatPostgreSQLRejects(t *testing.T) {
	for _, in := range []string{
		"", "/", "0/", "/0", "0", "16B374D848", "0/0/0", " 0/0", "0/0 ", "0 /0",
		"100000000/0", "0/100000000", "G/0", "0/-1", "+1/0", "0x1/0", "1_0/0",
		"0/1_0", "-0/0", "1/\x00", "１/0",
	} {
		_, err := ParseLSN(in)
		if !errors.Is(err, ErrLSNSyntax) {
			t.Errorf("ParseLSN(%q) error = %v, want ErrLSNSyntax", in, err)
		}
	}
}

func TestLSNString(t *testing.T) {
	tests := []struct {
		in   LSN
		want string
	}{
		{0, "0/0"},
		{0x3000060, "0/3000060"},
		{0x16_B374D848, "16/B374D848"},
		{1 << 32, "1/0"},
		{math.MaxUint64, "FFFFFFFF/FFFFFFFF"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("LSN(%#x).String() = %q, want %q", uint64(tt.in), got, tt.want)
		}
	}
}

func TestLSNJSON(t *testing.T) {
	type status struct {
		LSN LSN `json:"lsn"`
	}
	b, err := json.Marshal(status{LSN: 0x16_B374D848})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"lsn":"16/B374D848"}`; got != want {
		t.Errorf("json.Marshal = %s, want %s", got, want)
	}
	var back status
	if err := json.Unmarshal([]byte(`{"lsn":"0/3000060"}`), &back); err != nil {
		t.Fatal(err)
	}
	if back.LSN != 0x3000060 {
		t.Errorf("json.Unmarshal gave %v, want 0/3000060", back.LSN)
	}
	if err := json.Unmarshal([]byte(`{"lsn":"nope"}`), &back); !errors.Is(err, ErrLSNSyntax) {
		t.Errorf("json.Unmarshal of a bad LSN: error %v, want ErrLSNSyntax", err)
	}
}

func TestLSNMinusAndLag(t *testing.T) {
	tests := []struct {
		a, b      LSN
		minus     int64
		lag       int64
		reasoning string
	}{
		{0x3000060, 0x3000000, 0x60, 0x60, "ahead"},
		{0x3000000, 0x3000060, -0x60, 0, "a replica read after the primary can look ahead: no lag"},
		{5, 5, 0, 0, "caught up"},
		{math.MaxUint64, 0, math.MaxInt64, math.MaxInt64, "saturates upwards"},
		{0, math.MaxUint64, math.MinInt64, 0, "saturates downwards"},
		{1 << 63, 0, math.MaxInt64, math.MaxInt64, "2^63 does not fit int64"},
		{1<<63 - 1, 0, math.MaxInt64, math.MaxInt64, "largest exact difference"},
		{0, 1<<63 - 1, -math.MaxInt64, 0, "largest exact negative difference"},
	}
	for _, tt := range tests {
		if got := tt.a.Minus(tt.b); got != tt.minus {
			t.Errorf("%s: %v.Minus(%v) = %d, want %d", tt.reasoning, tt.a, tt.b, got, tt.minus)
		}
		if got := Lag(tt.a, tt.b); got != tt.lag {
			t.Errorf("%s: Lag(%v, %v) = %d, want %d", tt.reasoning, tt.a, tt.b, got, tt.lag)
		}
	}
}

// FuzzLSNRoundTrip checks that every string ParseLSN accepts prints back
// to something that parses to the same LSN, and that printing any LSN
// parses back to it.
func FuzzLSNRoundTrip(f *testing.F) {
	for _, s := range []string{"0/0", "16/B374D848", "ffffffff/ffffffff", "00000000/00000001", "1/", "x/y", "1/2/3"} {
		f.Add(s, uint64(0x16_B374D848))
	}
	f.Fuzz(func(t *testing.T, s string, n uint64) {
		if l, err := ParseLSN(s); err == nil {
			back, err := ParseLSN(l.String())
			if err != nil || back != l {
				t.Fatalf("ParseLSN(%q) = %v, but ParseLSN(%q) = %v, %v", s, l, l.String(), back, err)
			}
		}
		text, err := LSN(n).MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back LSN
		if err := back.UnmarshalText(text); err != nil || back != LSN(n) {
			t.Fatalf("LSN %#x printed as %q read back as %#x, %v", n, text, uint64(back), err)
		}
	})
}
