package sqlobjects

import (
	"strings"
	"testing"
)

// The expected value was computed independently with Python's hashlib
// (pbkdf2_hmac, hmac, sha256) for the same password, salt and iterations.
func TestScramVerifierKnownAnswer(t *testing.T) {
	got, err := scramVerifierWithSalt("secret", []byte("0123456789abcdef"), 4096)
	if err != nil {
		t.Fatal(err)
	}
	const want = "SCRAM-SHA-256$4096:MDEyMzQ1Njc4OWFiY2RlZg==$" + storedKeyB64 + ":" + serverKeyB64
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

const (
	storedKeyB64 = "bpSY5Ze9NUH+I35LC3gVq+DpBfK46iXBxvhAKqVu9pE="
	serverKeyB64 = "VpYlBuxyzeCI1KnctrefdljpB1mk3Gp7sBI/t11+NkQ="
)

func TestScramVerifierSaltsEachTime(t *testing.T) {
	a, _ := ScramVerifier("secret")
	b, _ := ScramVerifier("secret")
	if a == b || !strings.HasPrefix(a, "SCRAM-SHA-256$4096:") {
		t.Fatalf("verifiers %q and %q: want distinct salts and the PostgreSQL format", a, b)
	}
}

// TestRedactVerifiers: a verifier in a tool's output is replaced, quoted or
// not; the rest of the output stays.
func TestRedactVerifiers(t *testing.T) {
	v, err := ScramVerifier("secret")
	if err != nil {
		t.Fatal(err)
	}
	in := "ERROR:  role \"x\" does not exist\nSTATEMENT:  ALTER ROLE x PASSWORD '" + v + "'\nbare " + v + " end"
	got := RedactVerifiers(in)
	if strings.Contains(got, v) || strings.Count(got, "SCRAM-SHA-256$<redacted>") != 2 ||
		!strings.Contains(got, `role "x" does not exist`) || !strings.HasSuffix(got, " end") {
		t.Errorf("RedactVerifiers(%q) = %q", in, got)
	}
}
