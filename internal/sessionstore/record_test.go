package sessionstore

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		fence   uint64
		payload string
		marker  string
	}{
		{1, `{"seq":1,"kind":"x"}`, ""},
		{18446744073709551615, `{"a":"}\"{"}`, ""},
		{7, "", "owner worker-1"},
	} {
		var p []byte
		if tc.payload != "" {
			p = []byte(tc.payload)
		}
		line := encodeRecord(tc.fence, p, tc.marker)
		if !json.Valid(line) {
			t.Fatalf("not JSON: %s", line)
		}
		r, err := decodeRecord(bytes.TrimSuffix(line, []byte("\n")))
		if err != nil {
			t.Fatalf("decode %s: %v", line, err)
		}
		if r.fence != tc.fence || string(r.payload) != tc.payload || r.marker != tc.marker {
			t.Fatalf("round trip of %s: %+v", line, r)
		}
		// Every single-byte corruption is caught.
		for i := 0; i < len(line)-1; i++ {
			bad := bytes.Clone(line[:len(line)-1])
			bad[i] ^= 0x20
			if _, err := decodeRecord(bad); err == nil {
				t.Fatalf("corruption at %d of %s not detected", i, line)
			}
		}
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(bytes.TrimSuffix(encodeRecord(3, []byte(`{"seq":1}`), ""), []byte("\n")))
	f.Add(bytes.TrimSuffix(encodeRecord(3, nil, "m"), []byte("\n")))
	f.Add([]byte(`{"c":"00000000","f":1,"r":{}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := decodeRecord(line)
		if err != nil {
			return
		}
		again := encodeRecord(r.fence, r.payload, r.marker)
		if r.payload == nil && !bytes.Equal(bytes.TrimSuffix(again, []byte("\n")), line) {
			// Markers re-encode canonically; payload records must round trip.
			return
		}
		if r.payload != nil && !bytes.Equal(bytes.TrimSuffix(again, []byte("\n")), line) {
			t.Fatalf("accepted %q, re-encodes as %q", line, again)
		}
	})
}
