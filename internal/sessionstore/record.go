package sessionstore

import (
	"bytes"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"strconv"
)

// A record is one line of a log file:
//
//	{"c":"<crc32c hex>","f":<fence>,"r":<payload JSON>}
//	{"c":"<crc32c hex>","f":<fence>,"m":"<marker>"}
//
// c is the CRC-32C of the bytes after `{"c":"xxxxxxxx",` up to the end of the
// line (without the newline), so the checksum covers the fence and the
// payload. f is the fencing number of the lease under which the record was
// written. The line stays plain JSON: `jq -c .r events.jsonl` reads a log.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	crcPrefix    = `{"c":"`
	crcPrefixLen = len(crcPrefix) + 8 + 2 // {"c":"xxxxxxxx",
)

// errBadRecord marks a line that is not a valid record.
var errBadRecord = errors.New("bad record")

// encodeRecord returns the line (with its newline) for payload, or for a
// marker when payload is nil.
func encodeRecord(fence uint64, payload []byte, marker string) []byte {
	b := make([]byte, 0, crcPrefixLen+32+len(payload))
	b = append(b, crcPrefix...)
	b = append(b, "00000000\","...)
	b = append(b, `"f":`...)
	b = strconv.AppendUint(b, fence, 10)
	if payload != nil {
		b = append(b, `,"r":`...)
		b = append(b, payload...)
	} else {
		b = append(b, `,"m":`...)
		b = strconv.AppendQuote(b, marker)
	}
	b = append(b, '}')
	sum := crc32.Checksum(b[crcPrefixLen:], castagnoli)
	hex.Encode(b[len(crcPrefix):len(crcPrefix)+8], []byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
	return append(b, '\n')
}

// record is a decoded line. payload aliases the line.
type record struct {
	fence   uint64
	payload []byte // nil for a marker
	marker  string
}

// decodeRecord checks a line (without its newline) and splits it.
func decodeRecord(line []byte) (record, error) {
	if len(line) < crcPrefixLen+7 || !bytes.HasPrefix(line, []byte(crcPrefix)) || line[crcPrefixLen-2] != '"' || line[crcPrefixLen-1] != ',' || line[len(line)-1] != '}' {
		return record{}, errBadRecord
	}
	var want [4]byte
	for _, c := range line[len(crcPrefix) : len(crcPrefix)+8] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return record{}, errBadRecord // one spelling only: lowercase hex
		}
	}
	if _, err := hex.Decode(want[:], line[len(crcPrefix):len(crcPrefix)+8]); err != nil {
		return record{}, errBadRecord
	}
	sum := crc32.Checksum(line[crcPrefixLen:], castagnoli)
	if sum != uint32(want[0])<<24|uint32(want[1])<<16|uint32(want[2])<<8|uint32(want[3]) {
		return record{}, errBadRecord
	}
	rest := line[crcPrefixLen:]
	if !bytes.HasPrefix(rest, []byte(`"f":`)) {
		return record{}, errBadRecord
	}
	rest = rest[4:]
	i := 0
	for i < len(rest) && i < 20 && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	fence, err := strconv.ParseUint(string(rest[:i]), 10, 64)
	if err != nil {
		return record{}, errBadRecord
	}
	rest = rest[i:]
	switch {
	case bytes.HasPrefix(rest, []byte(`,"r":`)):
		return record{fence: fence, payload: rest[5 : len(rest)-1]}, nil
	case bytes.HasPrefix(rest, []byte(`,"m":`)):
		m, err := strconv.Unquote(string(rest[5 : len(rest)-1]))
		if err != nil {
			return record{}, errBadRecord
		}
		return record{fence: fence, marker: m}, nil
	}
	return record{}, errBadRecord
}
