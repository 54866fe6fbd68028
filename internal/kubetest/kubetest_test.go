package kubetest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestMain(m *testing.M) { Main(m) }

func TestAssetsDir(t *testing.T) {
	good := t.TempDir()
	writeExec(t, good, "kube-apiserver", "#!/bin/sh\n")
	writeExec(t, good, "etcd", "#!/bin/sh\n")

	noEtcd := t.TempDir()
	writeExec(t, noEtcd, "kube-apiserver", "#!/bin/sh\n")

	notExec := t.TempDir()
	writeExec(t, notExec, "kube-apiserver", "#!/bin/sh\n")
	if err := os.WriteFile(filepath.Join(notExec, "etcd"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	etcdDir := t.TempDir()
	writeExec(t, etcdDir, "kube-apiserver", "#!/bin/sh\n")
	if err := os.Mkdir(filepath.Join(etcdDir, "etcd"), 0o755); err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		value    string
		wantDir  string
		wantSkip bool
		wantErr  string // a part of the error; "" for none
	}{
		"unset":         {value: "", wantErr: EnvVar + " is not set"},
		"skip":          {value: Skip, wantSkip: true},
		"relative":      {value: "kube-1.37.2", wantErr: "not an absolute path"},
		"missing dir":   {value: filepath.Join(good, "nope"), wantErr: "no such file"},
		"no etcd":       {value: noEtcd, wantErr: "etcd: no such file"},
		"etcd not exec": {value: notExec, wantErr: "etcd is not an executable file"},
		"etcd is a dir": {value: etcdDir, wantErr: "etcd is not an executable file"},
		"both binaries": {value: good, wantDir: good},
		"Skip is exact": {value: "SKIP", wantErr: "not an absolute path"},
		"trailing dot":  {value: good + "/.", wantDir: good + "/."},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir, skip, err := assetsDir(tc.value)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("assetsDir(%q): %v", tc.value, err)
				}
			} else {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("assetsDir(%q) error = %v, want one containing %q", tc.value, err, tc.wantErr)
				}
				if !errors.Is(err, ErrNoAssets) {
					t.Errorf("assetsDir(%q) error %v is not ErrNoAssets", tc.value, err)
				}
			}
			if dir != tc.wantDir || skip != tc.wantSkip {
				t.Errorf("assetsDir(%q) = %q, %v; want %q, %v", tc.value, dir, skip, tc.wantDir, tc.wantSkip)
			}
		})
	}
}

func TestUniqueName(t *testing.T) {
	tests := map[string]struct {
		in         string
		wantPrefix string
	}{
		"test name":       {in: "TestSmoke/job_status", wantPrefix: "testsmoke-job-status-"},
		"already a label": {in: "provisioner", wantPrefix: "provisioner-"},
		"only symbols":    {in: "///", wantPrefix: "x-"},
		"empty":           {in: "", wantPrefix: "x-"},
		"leading symbols": {in: "__a__b__", wantPrefix: "a-b-"},
		"unicode":         {in: "Prüfung", wantPrefix: "pr-fung-"},
		"long":            {in: strings.Repeat("abcdefghij", 10), wantPrefix: strings.Repeat("abcdefghij", 5) + "abcdef-"},
		"cut at a dash":   {in: strings.Repeat("a", 55) + "-bc", wantPrefix: strings.Repeat("a", 55) + "-"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := uniqueName(tc.in)
			if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
				t.Errorf("uniqueName(%q) = %q, not a DNS-1123 label: %v", tc.in, got, errs)
			}
			if !strings.HasPrefix(got, tc.wantPrefix) || len(got) != len(tc.wantPrefix)+6 {
				t.Errorf("uniqueName(%q) = %q, want %q and 6 hex digits", tc.in, got, tc.wantPrefix)
			}
			if again := uniqueName(tc.in); again == got {
				t.Errorf("uniqueName(%q) gave %q twice", tc.in, got)
			}
		})
	}
}

// A control plane that cannot start fails with the processes' own words,
// and leaves nothing behind.
func TestStartFailureShowsOutput(t *testing.T) {
	dir := t.TempDir()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	writeExec(t, dir, "etcd", "#!/bin/sh\necho 'etcd: boom, no data dir' >&2\nexit 3\n")
	writeExec(t, dir, "kube-apiserver", "#!/bin/sh\necho 'kube-apiserver should not have started' >&2\nexit 3\n")
	srv, err := start(dir)
	if err == nil {
		srv.stop()
		t.Fatal("start with a failing etcd succeeded")
	}
	for _, want := range []string{"etcd: boom, no data dir", dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("start error does not contain %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "should not have started") {
		t.Errorf("kube-apiserver ran although etcd never started:\n%v", err)
	}
	if left, err := os.ReadDir(tmp); err != nil || len(left) > 0 {
		t.Errorf("left in the temporary directory: %v %v", left, err)
	}
}

// envtest is a test-only dependency: no package but this one may import
// kubetest or envtest outside its _test.go files, so neither reaches a
// binary. go list's Deps leave test files out.
func TestOnlyTestsImport(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}:{{join .Deps " "}}`, "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const self = "github.com/talkide/platform/internal/kubetest"
	forbidden := []string{self, "sigs.k8s.io/controller-runtime/pkg/envtest"}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	sawSelf := false
	for _, line := range lines {
		pkg, deps, _ := strings.Cut(line, ":")
		if pkg == self {
			sawSelf = strings.Contains(deps, forbidden[1])
			continue
		}
		for _, dep := range strings.Fields(deps) {
			for _, f := range forbidden {
				if dep == f {
					t.Errorf("%s imports %s, which only tests may", pkg, f)
				}
			}
		}
	}
	if len(lines) < 20 || !sawSelf {
		t.Fatalf("go list saw %d packages, without kubetest importing envtest; the check would prove nothing", len(lines))
	}
}

func writeExec(t *testing.T, dir, name, script string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}
