package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// OriginalsDir is the directory below Call.StateDir where Write and Edit
// keep each file as it was before the conversation first changed it, so
// that what the conversation changed can be shown as a diff. Only the
// first change of a path keeps anything; later ones find it kept.
//
// Each path has one record, named by the SHA-256 of its real path relative
// to the root (so any name, however long or odd, makes a short file name):
// <key>.orig holds the content, <key>.absent says the file did not exist,
// <key>.large says it was larger than MaxOriginalBytes. A record is made
// once (a hard link of a finished temporary file, which fails if one is
// there), so two calls racing on one path keep the older content.
const OriginalsDir = "originals"

// MaxOriginalBytes bounds the original content kept of one file.
const MaxOriginalBytes = 1 << 20

// ErrNoOriginal is the error of Original for a path the file tools have not
// changed in this conversation (or changed before originals were kept).
var ErrNoOriginal = errors.New("no original kept: the conversation's file tools have not changed this file")

// Suffixes of an original's record.
const (
	origContent = ".orig"
	origAbsent  = ".absent"
	origLarge   = ".large"
)

func originalKey(w *Workspace, real string) string {
	sum := sha256.Sum256([]byte(filepath.ToSlash(w.Rel(real))))
	return hex.EncodeToString(sum[:])
}

// keepOriginal records real (a path from Resolve that a file tool is about
// to change) as it is now, unless a record of it exists. A failure keeps
// nothing and does not stop the change: the diff then says there is no
// original, which is true.
func (w *Workspace) keepOriginal(stateDir, real string) {
	if stateDir == "" {
		return
	}
	dir := filepath.Join(stateDir, OriginalsDir)
	key := originalKey(w, real)
	for _, suffix := range []string{origContent, origAbsent, origLarge} {
		if _, err := os.Lstat(filepath.Join(dir, key+suffix)); err == nil {
			return
		}
	}
	data, _, err := w.readReal(real, MaxOriginalBytes)
	var tooLarge *TooLargeError
	suffix := origContent
	switch {
	case errors.Is(err, fs.ErrNotExist):
		suffix, data = origAbsent, nil
	case errors.As(err, &tooLarge):
		suffix, data = origLarge, nil
	case err != nil:
		return // not a file the tools change: they refuse it themselves
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return
	}
	// Link, not rename: it fails if another call kept a record first.
	_ = os.Link(tmp.Name(), filepath.Join(dir, key+suffix))
}

// Original is a file as it was before the conversation first changed it.
type Original struct {
	Existed  bool   // false: the conversation created it
	TooLarge bool   // it was larger than MaxOriginalBytes, and not kept
	Data     []byte // its content, when it existed and was kept
}

// Original returns the original of the file p (relative to the root, as
// the tools resolve it) kept under stateDir, or an error wrapping
// ErrNoOriginal (or ErrOutsideWorkspace for a path that leads out).
func (w *Workspace) Original(stateDir, p string) (Original, error) {
	real, err := w.Resolve(p)
	if err != nil {
		return Original{}, err
	}
	base := filepath.Join(stateDir, OriginalsDir, originalKey(w, real))
	if _, err := os.Lstat(base + origAbsent); err == nil {
		return Original{}, nil
	}
	if _, err := os.Lstat(base + origLarge); err == nil {
		return Original{Existed: true, TooLarge: true}, nil
	}
	// The worker wrote it; still, nothing but a bounded regular file is read.
	f, err := os.OpenFile(base+origContent, os.O_RDONLY|noFollowNonblock, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return Original{}, ErrNoOriginal
	}
	if err != nil {
		return Original{}, fmt.Errorf("the kept original: %w", err)
	}
	defer f.Close()
	fi, err := checkOpened(f)
	if err != nil {
		return Original{}, fmt.Errorf("the kept original: %w", err)
	}
	data, err := readLimited(f, fi.Size(), MaxOriginalBytes)
	if errors.Is(err, errTooLarge) {
		return Original{Existed: true, TooLarge: true}, nil
	}
	if err != nil {
		return Original{}, fmt.Errorf("the kept original: %w", err)
	}
	return Original{Existed: true, Data: data}, nil
}
