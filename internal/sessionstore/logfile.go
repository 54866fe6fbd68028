package sessionstore

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// maxRecord bounds one line on read; a longer line is corruption.
const maxRecord = 16 << 20

// ErrCorrupt is returned when a log holds an invalid record followed by
// valid ones: not the torn tail a crash leaves, so it is never cut silently.
var ErrCorrupt = errors.New("session log is corrupt")

// logFile is one append-only file of records.
type logFile struct {
	name     string
	path     string
	f        *os.File // nil when resting or read-only with no file
	resting  bool     // f was closed by rest; append reopens it
	size     int64    // end of the last complete record
	durable  int64    // size at the last completed fsync
	maxFence uint64   // highest fence among the records read or written
}

// scanFunc sees each record that is not fenced out, with its offset.
type scanFunc func(off int64, r record) error

// openLogFile opens (creating) path and scans it from offset from (a
// checkpoint's end, with the fence in force there) to the end: records
// written under a lower fence than one already seen were appended by an
// owner that had lost its lease, and are skipped. A torn or invalid last
// record is cut off; an invalid record followed by valid ones is ErrCorrupt.
func openLogFile(path string, from int64, fence uint64, writable bool, fn scanFunc) (*logFile, error) {
	flag := os.O_RDONLY
	if writable {
		// O_APPEND: a record lands after whatever the file holds, also
		// after records another (fenced-off) owner wrote since we opened
		// it, which readers then skip; a write at our own idea of the end
		// would overwrite the newer owner's records instead.
		flag = os.O_RDWR | os.O_CREATE | os.O_APPEND
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if errors.Is(err, os.ErrNotExist) && !writable {
		return &logFile{name: filepath.Base(path), maxFence: fence}, nil
	}
	if err != nil {
		return nil, err
	}
	l := &logFile{name: filepath.Base(path), path: path, f: f, maxFence: fence}
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	end, err := scanRecords(f, from, &l.maxFence, fn)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", l.name, err)
	}
	if writable {
		if st, err := f.Stat(); err == nil && st.Size() > end {
			if err := f.Truncate(end); err != nil {
				f.Close()
				return nil, err
			}
		}
		if _, err := f.Seek(end, io.SeekStart); err != nil {
			f.Close()
			return nil, err
		}
	}
	l.size, l.durable = end, end
	return l, nil
}

// scanRecords reads records from r (positioned at offset off) and returns
// the end of the last valid one. *fence is raised as higher fences appear.
func scanRecords(r io.Reader, off int64, fence *uint64, fn scanFunc) (int64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	badAt := int64(-1)
	for {
		line, err := readLine(br)
		if errors.Is(err, io.EOF) {
			return endOf(off, badAt), nil // an unterminated tail is torn
		}
		if err != nil {
			if badAt < 0 {
				badAt = off
			}
			return endOf(off, badAt), nil
		}
		rec, ok, err := decodeAt(line, off, &badAt)
		if err != nil {
			return 0, err
		}
		if !ok {
			off += int64(len(line))
			continue
		}
		if rec.fence >= *fence {
			*fence = rec.fence
			if fn != nil {
				if err := fn(off, rec); err != nil {
					if errors.Is(err, errStop) {
						return off, nil
					}
					return 0, fmt.Errorf("record at offset %d: %w", off, err)
				}
			}
		}
		off += int64(len(line))
	}
}

// decodeAt decodes line, a record starting at off. An undecodable record may
// begin a torn tail, so it is not an error: ok is false, and *badAt keeps the
// offset of the first one. A valid record after one cannot be a torn tail,
// so it is ErrCorrupt.
func decodeAt(line []byte, off int64, badAt *int64) (rec record, ok bool, err error) {
	rec, err = decodeRecord(line[:len(line)-1])
	if err != nil {
		if *badAt < 0 {
			*badAt = off
		}
		return record{}, false, nil
	}
	if *badAt >= 0 {
		return record{}, false, fmt.Errorf("%w: invalid record at offset %d followed by a valid one at %d", ErrCorrupt, *badAt, off)
	}
	return rec, true, nil
}

func endOf(off, badAt int64) int64 {
	if badAt >= 0 {
		return badAt
	}
	return off
}

// readLine returns one line including its '\n'; at the end it returns
// io.EOF (an unterminated rest is not a line).
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxRecord {
			return nil, fmt.Errorf("record longer than %d bytes", maxRecord)
		}
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, err
		}
	}
}

// append writes one encoded record with a single write and returns its
// offset: where the write landed, which is past l.size when another writer
// appended in between.
func (l *logFile) append(line []byte) (int64, error) {
	if l.f == nil && l.resting {
		// O_APPEND, as at open: the record lands after whatever the file
		// holds now.
		f, err := os.OpenFile(l.path, os.O_RDWR|os.O_APPEND, 0o600)
		if err != nil {
			return 0, fmt.Errorf("%s: reopen: %w", l.name, err)
		}
		l.f, l.resting = f, false
	}
	if l.f == nil {
		return 0, os.ErrClosed
	}
	if _, err := l.f.Write(line); err != nil {
		// A partial write leaves a torn tail; cut it so the next append
		// starts on a record boundary.
		_ = l.f.Truncate(l.size)
		return 0, fmt.Errorf("%s: %w", l.name, err)
	}
	end, err := l.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", l.name, err)
	}
	l.size = end
	return end - int64(len(line)), nil
}

// rest closes the file while all of it is durable, so that a session with
// nothing to write holds no descriptor; the next append reopens it. It
// reports whether the file is closed now.
func (l *logFile) rest() bool {
	if l.f == nil || l.durable != l.size {
		return l.f == nil
	}
	if err := l.f.Close(); err != nil {
		return false
	}
	l.f, l.resting = nil, true
	return true
}

// readRange calls fn for each record in [from, to) that is not fenced out,
// starting with fence in force at from.
func readRange(path string, from, to int64, fence uint64, fn scanFunc) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return err
	}
	_, err = scanRecords(io.LimitReader(f, to-from), from, &fence, fn)
	return err
}
