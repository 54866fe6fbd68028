package build

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func gradleWorkspace(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, GradleWrapper), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return ws
}

func TestSpecValidateGradle(t *testing.T) {
	ws := gradleWorkspace(t)
	good := Spec{Tasks: []string{"clean", ":app:test"}, Args: []string{"--tests", "com.acme.*Test", "-Pversion=1.2", "-x", "lint", "--offline"}}
	if err := good.Validate(ws); err != nil {
		t.Fatalf("Validate(%+v): %v", good, err)
	}
	if good.Kind != KindGradle {
		t.Errorf("default kind = %q", good.Kind)
	}
	want := []string{"./gradlew", "--console=plain", "--no-daemon", "--tests", "com.acme.*Test", "-Pversion=1.2", "-x", "lint", "--offline", "clean", ":app:test"}
	if got := good.GradleArgv(); !slices.Equal(got, want) {
		t.Errorf("GradleArgv = %q, want %q", got, want)
	}

	for name, tc := range map[string]struct {
		s    Spec
		want string
	}{
		"no tasks":        {Spec{}, "at least one Gradle task"},
		"task option":     {Spec{Tasks: []string{"--help"}}, "not a Gradle task name"},
		"task shell":      {Spec{Tasks: []string{"test;rm -rf /"}}, "not a Gradle task name"},
		"arg space":       {Spec{Tasks: []string{"test"}, Args: []string{"-Dx=a b"}}, "no shell"},
		"arg subst":       {Spec{Tasks: []string{"test"}, Args: []string{"$(id)"}}, "no shell"},
		"arg newline":     {Spec{Tasks: []string{"test"}, Args: []string{"a\nb"}}, "no shell"},
		"arg quote":       {Spec{Tasks: []string{"test"}, Args: []string{`"x"`}}, "no shell"},
		"user home":       {Spec{Tasks: []string{"test"}, Args: []string{"--gradle-user-home=/tmp/x"}}, "--gradle-user-home is not allowed"},
		"short home":      {Spec{Tasks: []string{"test"}, Args: []string{"-g", "/tmp"}}, "-g is not allowed"},
		"daemon":          {Spec{Tasks: []string{"test"}, Args: []string{"--daemon"}}, "not allowed"},
		"project dir":     {Spec{Tasks: []string{"test"}, Args: []string{"-p", "/etc"}}, "not allowed"},
		"too many":        {Spec{Tasks: slices.Repeat([]string{"t"}, MaxTasks+1)}, "at most"},
		"long":            {Spec{Tasks: []string{strings.Repeat("t", MaxTokenLen+1)}}, "not a Gradle task name"},
		"image fields":    {Spec{Tasks: []string{"test"}, Image: "r.io/a:b"}, "for kind"},
		"unknown kind":    {Spec{Kind: "make", Tasks: []string{"all"}}, "kind must be"},
		"no wrapper here": {Spec{Tasks: []string{"test"}}, ""}, // checked below in another workspace
	} {
		if name == "no wrapper here" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			err := tc.s.Validate(ws)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate(%+v) = %v; want ErrInvalid saying %q", tc.s, err, tc.want)
			}
		})
	}

	empty := t.TempDir()
	s := Spec{Tasks: []string{"test"}}
	if err := s.Validate(empty); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "no ./gradlew") {
		t.Errorf("without a wrapper: %v", err)
	}
	os.WriteFile(filepath.Join(empty, GradleWrapper), []byte("#!/bin/sh\n"), 0o644)
	if err := s.Validate(empty); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "chmod +x") {
		t.Errorf("a wrapper that is not executable: %v", err)
	}
	link := t.TempDir()
	os.Symlink(filepath.Join(ws, GradleWrapper), filepath.Join(link, GradleWrapper))
	if err := s.Validate(link); !errors.Is(err, ErrInvalid) {
		t.Errorf("a wrapper that is a symlink: %v", err)
	}
}

func TestSpecValidateImage(t *testing.T) {
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "svc", "docker"), 0o755)
	os.WriteFile(filepath.Join(ws, "Dockerfile"), []byte("FROM scratch\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "svc", "docker", "Dockerfile.prod"), []byte("FROM scratch\n"), 0o644)
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "Dockerfile"), []byte("FROM scratch\n"), 0o644)
	os.Symlink(outside, filepath.Join(ws, "out"))

	s := Spec{Kind: KindImage, Image: "registry.example.com/team/app:1.0"}
	if err := s.Validate(ws); err != nil {
		t.Fatal(err)
	}
	if s.Context != "." || s.Dockerfile != "Dockerfile" {
		t.Errorf("defaults: context %q dockerfile %q", s.Context, s.Dockerfile)
	}
	s = Spec{Kind: KindImage, Context: "svc/", Dockerfile: "svc/docker/Dockerfile.prod", Image: "localhost:5000/app@sha256:" + strings.Repeat("a", 64)}
	if err := s.Validate(ws); err != nil {
		t.Fatal(err)
	}
	if s.Context != "svc" {
		t.Errorf("context not cleaned: %q", s.Context)
	}

	for name, tc := range map[string]struct {
		s    Spec
		want string
	}{
		"no image":        {Spec{Kind: KindImage}, "image is required"},
		"bare name":       {Spec{Kind: KindImage, Image: "app:1"}, "registry host"},
		"upper":           {Spec{Kind: KindImage, Image: "r.io/App:1"}, "not an image reference"},
		"shell":           {Spec{Kind: KindImage, Image: "r.io/a:1;id"}, "not an image reference"},
		"space":           {Spec{Kind: KindImage, Image: "r.io/a b"}, "not an image reference"},
		"abs context":     {Spec{Kind: KindImage, Context: "/etc", Image: "r.io/a:1"}, "relative to the workspace root"},
		"dotdot context":  {Spec{Kind: KindImage, Context: "../x", Image: "r.io/a:1"}, "relative to the workspace root"},
		"missing context": {Spec{Kind: KindImage, Context: "nope", Image: "r.io/a:1"}, "not a directory inside"},
		"symlink out":     {Spec{Kind: KindImage, Context: "out", Image: "r.io/a:1"}, "not a directory inside"},
		"missing file":    {Spec{Kind: KindImage, Dockerfile: "svc/Dockerfile", Image: "r.io/a:1"}, "not a file inside"},
		"tasks":           {Spec{Kind: KindImage, Tasks: []string{"x"}, Image: "r.io/a:1"}, "for kind"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.s.Validate(ws)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate(%+v) = %v; want ErrInvalid saying %q", tc.s, err, tc.want)
			}
		})
	}
}

func FuzzValidateImageRef(f *testing.F) {
	for _, s := range []string{"registry.example.com/team/app:1.0", "localhost:5000/a", "r.io/a@sha256:" + strings.Repeat("0", 64), "a", "r.io/a:-x", "r.io//a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		if ValidateImageRef(ref) != nil {
			return
		}
		if strings.ContainsAny(ref, " \t\n\"'`$;&|<>()\\") || len(ref) > MaxImageRef {
			t.Fatalf("accepted %q", ref)
		}
	})
}

func TestValidateGradleLine(t *testing.T) {
	for _, ok := range [][]string{{"build"}, {"build", "-x", "test"}, {"--tests", "com.acme.*Test", "test"}, {"--offline", ":app:assemble"}} {
		if err := ValidateGradleLine(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	long := make([]string, MaxTasks+MaxArgs+1)
	for i := range long {
		long[i] = "build"
	}
	for _, bad := range [][]string{nil, {"--offline"}, {"-g", "/cache", "build"}, {"--gradle-user-home=/x", "build"}, {"--daemon", "build"}, {"build;rm", "-rf"}, {"build", "a b"}, {"build", "$(id)"}, long} {
		if err := ValidateGradleLine(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q = %v, want ErrInvalid", bad, err)
		}
	}
	if got := strings.Join(GradleLineArgv([]string{"build", "-x", "test"}), " "); got != "./gradlew --console=plain --no-daemon build -x test" {
		t.Errorf("argv = %q", got)
	}
}
