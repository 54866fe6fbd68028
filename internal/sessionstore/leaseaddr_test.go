package sessionstore

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The holder's address travels in its lease: a peer refused the session
// learns where to forward, and Lease reads it without opening anything.
// A lease file written before addresses existed still parses.
func TestLeaseCarriesTheHolderAddress(t *testing.T) {
	dir, c := clockedDir(t)
	a, err := New(dir, &Options{Holder: "worker-a", Addr: "http://10.1.2.3:8080", Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	s := mustCreate(t, a, "c1", Meta{})
	li, err := a.Lease("c1")
	if err != nil || li.Holder != "worker-a" || li.Addr != "http://10.1.2.3:8080" || !li.Live(c.Now()) {
		t.Fatalf("Lease: %+v, %v", li, err)
	}
	_, err = newStoreAt(t, dir, "worker-b", c).Load("c1")
	var held *LeaseHolderError
	if !errors.As(err, &held) || held.Holder != "worker-a" || held.Addr != "http://10.1.2.3:8080" {
		t.Fatalf("a peer's open: %v, want the holder and its address", err)
	}
	if err := s.RenewLease(); err != nil {
		t.Fatal(err)
	}
	if li, _ := a.Lease("c1"); li.Addr != "http://10.1.2.3:8080" {
		t.Fatalf("a renewal lost the address: %+v", li)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if li, _ := a.Lease("c1"); !li.Released || li.Live(c.Now()) {
		t.Fatalf("after close: %+v, want released", li)
	}

	// An older worker's lease file, without the address.
	old := filepath.Join(dir, "c1", leaseDir, leaseName(li.Fence+1))
	exp := c.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)
	if err := os.WriteFile(old, []byte(`{"holder":"old-worker","expires_at":"`+exp+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	li, err = a.Lease("c1")
	if err != nil || li.Holder != "old-worker" || li.Addr != "" || !li.Live(c.Now()) {
		t.Fatalf("an old lease file: %+v, %v", li, err)
	}
	if _, err := a.Load("c1"); !errors.As(err, &held) || held.Holder != "old-worker" || held.Addr != "" {
		t.Fatalf("open against an old lease file: %v", err)
	}
	if _, err := a.Lease("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Lease of a missing session: %v", err)
	}
	if _, err := a.Lease("../x"); err == nil {
		t.Fatal("Lease took a traversing id")
	}
}
