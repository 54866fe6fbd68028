package outpipe

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// TestFinishReadsWhatThePipeHolds: the write end stays open (a process
// that outlives the command), and the copy starts reading only after Grace
// has passed: Finish still ends, and the copy has every byte written.
func TestFinishReadsWhatThePipeHolds(t *testing.T) {
	r, w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	want := bytes.Repeat([]byte("0123456789abcdef"), 4000) // 64,000 bytes: within a pipe's default 64 KiB
	if _, err := w.Write(want); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		time.Sleep(Grace + Grace/2) // behind: the wait for the end has been stopped
		io.Copy(&got, r)
	}()
	r.Finish(copied)
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("read %d bytes, want %d", got.Len(), len(want))
	}
}

// TestReadToTheEnd: a pipe whose write end closes is read to its end,
// with no Finish.
func TestReadToTheEnd(t *testing.T) {
	r, w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() {
		w.Write([]byte("all of it\n"))
		w.Close()
	}()
	if b, err := io.ReadAll(r); err != nil || string(b) != "all of it\n" {
		t.Errorf("read %q, %v", b, err)
	}
}
