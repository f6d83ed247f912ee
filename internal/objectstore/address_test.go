package objectstore

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestAddressCheckRefusesInternalAddresses: with RefuseInternalAddresses,
// an endpoint at a loopback, link-local or metadata address, given as an
// address or as a name that resolves to one, is refused before any
// connection is made; without the check the same loopback server is
// reached (so the count of zero connections means something).
func TestAddressCheckRefusesInternalAddresses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var accepted atomic.Int64
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = conn.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	check := func(endpoint string, addressCheck func(netip.Addr) error) error {
		t.Helper()
		s, err := New(Config{Endpoint: endpoint, Bucket: "backups", Region: "us-east-1", MaxRetries: 1, AddressCheck: addressCheck})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return s.Check(ctx)
	}

	for _, endpoint := range []string{
		"http://127.0.0.1:" + itoa(port),
		"http://localhost:" + itoa(port),
		"http://127.1.2.3:" + itoa(port),
		"http://169.254.169.254",
		"https://[fe80::1]:443",
		"http://100.100.100.200",
		"http://[fd00:ec2::254]",
		"http://0.0.0.0:" + itoa(port),
		"http://168.63.129.16",
		// 169.254.169.254 and 127.0.0.1 through a NAT64 gateway.
		"http://[64:ff9b::a9fe:a9fe]",
		"http://[64:ff9b::7f00:1]:" + itoa(port),
		"http://[64:ff9b:1::a9fe:a9fe]",
	} {
		err := check(endpoint, RefuseInternalAddresses)
		if Classify(err) != KindRefused || !strings.Contains(err.Error(), "does not connect to") {
			t.Errorf("%s: got %v (kind %v), want it refused", endpoint, err, Classify(err))
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("a refused endpoint was connected to %d times", n)
	}

	_ = check("http://127.0.0.1:"+itoa(port), nil)
	if accepted.Load() == 0 {
		t.Fatal("without the check the loopback server was not reached: the test proves nothing")
	}
}

// TestRefuseInternalAddressesAllowsStores: the addresses object stores
// have (private, cluster, public) pass.
func TestRefuseInternalAddressesAllowsStores(t *testing.T) {
	for _, a := range []string{"10.96.0.12", "192.168.1.20", "172.16.5.4", "100.64.0.1", "52.216.8.1", "fd12:3456::1", "2600:1f18::1",
		"64:ff9b::3410:801"} { // a public store (52.16.8.1) through NAT64
		if err := RefuseInternalAddresses(netip.MustParseAddr(a)); err != nil {
			t.Errorf("%s refused: %v", a, err)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
