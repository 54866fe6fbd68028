package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// A helper built apart from the worker (cmd/talkide-sandbox) must confine
// commands with exactly the code the worker was built with: a stale one
// left beside a newer talkide would apply an older policy, or read the
// configuration differently. Both sides therefore compare a fingerprint
// of what makes the helper: this package's source and the Go toolchain.
// New refuses a helper whose fingerprint differs. (A change of
// golang.org/x/sys alone is not seen: test binaries, which are helpers
// too, carry no list of their modules to compare.)

//go:embed *.go
var sources embed.FS

// Fingerprint identifies the helper code this program was built with.
var Fingerprint = sync.OnceValue(func() string {
	h := sha256.New()
	names, _ := fs.Glob(sources, "*.go")
	slices.Sort(names)
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue // tests do not confine anything
		}
		b, _ := sources.ReadFile(name)
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	fmt.Fprintf(h, "go %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return hex.EncodeToString(h.Sum(nil))
})

// fingerprintArg, after HelperArg, makes the helper print its Fingerprint.
const fingerprintArg = "fingerprint"

// ErrHelperMismatch is wrapped by CheckHelper's error for a helper built
// from other code than the running program.
var ErrHelperMismatch = errors.New("the sandbox helper was built from other code than this program")

// CheckHelper runs path as the helper and checks that it was built from
// the same helper code as the running program.
func CheckHelper(path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, HelperArg, fingerprintArg)
	cmd.Env = []string{}
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("sandbox: the helper %s: %w", path, err)
	}
	if got := strings.TrimSpace(out.String()); got != Fingerprint() {
		return fmt.Errorf("sandbox: %s: %w; build both from the same source", path, ErrHelperMismatch)
	}
	return nil
}
