package build

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Bounds of a Spec.
const (
	MaxTasks    = 32
	MaxArgs     = 64
	MaxTokenLen = 256
	// MaxImageRef is the longest image reference accepted (the registry's
	// name limit is 255 for the repository; tags and digests add to it).
	MaxImageRef = 512
)

// GradleWrapper is the script a Gradle build runs, at the workspace root.
const GradleWrapper = "gradlew"

var (
	// A task is a Gradle task path: test, :app:check, app:bootJar.
	taskPattern = regexp.MustCompile(`^:?[A-Za-z0-9_][A-Za-z0-9_.:-]*$`)
	// An argument is one option or value with no shell meaning needed (no
	// shell ever sees it): -Pversion=1.2, --tests, com.acme.*Test, -x.
	argPattern = regexp.MustCompile(`^[A-Za-z0-9_.,:=/@+*%#~\[\]-]+$`)
)

// refusedOptions are Gradle options that would move the state Gradle keeps
// outside where the runner puts it (the cache layout), keep a daemon
// beyond the call, or build another directory than the workspace.
var refusedOptions = []string{
	"-g", "--gradle-user-home", "--project-cache-dir", "-p", "--project-dir",
	"--daemon", "--foreground", "--continuous", "-t",
}

// Validate checks s and fills its defaults (Kind gradle, Dockerfile).
// Paths are checked against the workspace root: they must name what exists
// inside it, not through a symlink out of it (os.Root's rules). Errors wrap
// ErrInvalid and say what to change.
func (s *Spec) Validate(workspace string) error {
	if s.Kind == "" {
		s.Kind = KindGradle
	}
	switch s.Kind {
	case KindGradle:
		return s.validateGradle(workspace)
	case KindImage:
		return s.validateImage(workspace)
	}
	return invalid("kind must be %q or %q, got %q", KindGradle, KindImage, s.Kind)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

func (s *Spec) validateGradle(workspace string) error {
	if s.Context != "" || s.Dockerfile != "" || s.Image != "" {
		return invalid("context, dockerfile and image are for kind %q, not %q", KindImage, KindGradle)
	}
	if len(s.Tasks) == 0 {
		return invalid("tasks must name at least one Gradle task, e.g. [\"test\"]")
	}
	if len(s.Tasks) > MaxTasks {
		return invalid("at most %d tasks, got %d", MaxTasks, len(s.Tasks))
	}
	if len(s.Args) > MaxArgs {
		return invalid("at most %d args, got %d", MaxArgs, len(s.Args))
	}
	for _, t := range s.Tasks {
		if len(t) > MaxTokenLen || !taskPattern.MatchString(t) {
			return invalid("task %q is not a Gradle task name (letters, digits, '_', '.', ':' and '-'; options go in args)", clip(t))
		}
	}
	for _, a := range s.Args {
		if err := checkArg(a); err != nil {
			return err
		}
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return fmt.Errorf("build: the workspace: %w", err)
	}
	defer root.Close()
	fi, err := root.Lstat(GradleWrapper)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return invalid("the workspace has no ./%s at its root: a Gradle build runs the project's Gradle wrapper (generate it with `gradle wrapper`)", GradleWrapper)
	case err != nil:
		return invalid("./%s: %v", GradleWrapper, err)
	case !fi.Mode().IsRegular():
		return invalid("./%s is not a regular file", GradleWrapper)
	case fi.Mode().Perm()&0o100 == 0:
		return invalid("./%s is not executable: run chmod +x %s", GradleWrapper, GradleWrapper)
	}
	return nil
}

func checkArg(a string) error {
	if len(a) > MaxTokenLen || !argPattern.MatchString(a) {
		return invalid("argument %q has characters a build argument may not have (spaces, quotes, shell characters; there is no shell: pass each word as its own argument)", clip(a))
	}
	name, _, _ := strings.Cut(a, "=")
	if slices.Contains(refusedOptions, name) {
		return invalid("the option %s is not allowed: the runner decides where Gradle keeps its state and that it does not outlive the build", name)
	}
	return nil
}

// ValidateGradleLine checks a Gradle command line given as the words a
// person types, options with their values and tasks in any order (a
// cache-seeding Job's, whose project the caller cannot see): each word as
// an argument of the Build tool, at least one task, the same bounds.
func ValidateGradleLine(words []string) error {
	if len(words) > MaxTasks+MaxArgs {
		return invalid("at most %d words, got %d", MaxTasks+MaxArgs, len(words))
	}
	task := false
	for _, w := range words {
		if err := checkArg(w); err != nil {
			return err
		}
		task = task || !strings.HasPrefix(w, "-")
	}
	if !task {
		return invalid("name at least one Gradle task, e.g. build")
	}
	return nil
}

// GradleLineArgv is the command line of a validated Gradle line, as
// GradleArgv is of a Spec.
func GradleLineArgv(words []string) []string {
	return append([]string{"./" + GradleWrapper, "--console=plain", "--no-daemon"}, words...)
}

func (s *Spec) validateImage(workspace string) error {
	if len(s.Tasks) > 0 || len(s.Args) > 0 {
		return invalid("tasks and args are for kind %q, not %q", KindGradle, KindImage)
	}
	if s.Context == "" {
		s.Context = "."
	}
	ctx, err := localPath("context", s.Context)
	if err != nil {
		return err
	}
	if s.Dockerfile == "" {
		s.Dockerfile = path.Join(ctx, "Dockerfile")
	}
	df, err := localPath("dockerfile", s.Dockerfile)
	if err != nil {
		return err
	}
	s.Context, s.Dockerfile = ctx, df
	if err := ValidateImageRef(s.Image); err != nil {
		return err
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return fmt.Errorf("build: the workspace: %w", err)
	}
	defer root.Close()
	if fi, err := root.Stat(ctx); err != nil || !fi.IsDir() {
		return invalid("context %q is not a directory inside the workspace", s.Context)
	}
	if fi, err := root.Stat(df); err != nil || !fi.Mode().IsRegular() {
		return invalid("dockerfile %q is not a file inside the workspace", s.Dockerfile)
	}
	return nil
}

// localPath checks a path relative to the workspace root and returns it
// cleaned, with forward slashes.
func localPath(field, p string) (string, error) {
	if len(p) > 4096 || strings.ContainsAny(p, "\x00\n\r") {
		return "", invalid("%s %q is not a usable path", field, clip(p))
	}
	if filepath.IsAbs(p) || !filepath.IsLocal(p) {
		return "", invalid("%s %q must be a path relative to the workspace root, inside it", field, clip(p))
	}
	return path.Clean(filepath.ToSlash(p)), nil
}

// Image reference grammar, after the distribution project's reference
// package: [domain[:port]/]path-component(/path-component)*[:tag][@digest].
var (
	domainComponent = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
	domain          = domainComponent + `(?:\.` + domainComponent + `)*(?::[0-9]+)?`
	pathComponent   = `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`
	tag             = `[\w][\w.-]{0,127}`
	digest          = `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}`
	imageRefPattern = regexp.MustCompile(`^(?:` + domain + `/)?` + pathComponent + `(?:/` + pathComponent + `)*(?::` + tag + `)?(?:@` + digest + `)?$`)
)

// ValidateImageRef checks an image reference to push to: a registry host
// and a repository path, with a tag or digest. A bare name ("app") is
// refused: it would mean Docker Hub, which a build should name explicitly.
func ValidateImageRef(ref string) error {
	if ref == "" {
		return invalid("image is required for kind %q: the reference to push to, e.g. registry.example.com/team/app:1.0", KindImage)
	}
	if len(ref) > MaxImageRef || !imageRefPattern.MatchString(ref) {
		return invalid("image %q is not an image reference (registry/name:tag)", clip(ref))
	}
	host, _, ok := strings.Cut(ref, "/")
	if !ok || !strings.ContainsAny(host, ".:") && host != "localhost" {
		return invalid("image %q must start with a registry host (registry.example.com/name:tag)", clip(ref))
	}
	return nil
}

// GradleArgv returns the command line of a validated Gradle spec, relative
// to the workspace root: ./gradlew, the options, then the tasks.
func (s *Spec) GradleArgv() []string {
	argv := make([]string, 0, 3+len(s.Args)+len(s.Tasks))
	argv = append(argv, "./"+GradleWrapper)
	// A console meant for a log, not a terminal; no daemon left behind.
	argv = append(argv, "--console=plain", "--no-daemon")
	argv = append(argv, s.Args...)
	return append(argv, s.Tasks...)
}

// String is the build as a person would type it.
func (s *Spec) String() string {
	if s.Kind == KindImage {
		return fmt.Sprintf("image %s from %s (context %s)", s.Image, s.Dockerfile, s.Context)
	}
	return "./" + GradleWrapper + " " + strings.Join(append(slices.Clone(s.Args), s.Tasks...), " ")
}

// clip shortens what an error quotes.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
