// Command imagebuild assembles a container image without Docker: layers
// from root file system tarballs (a Debian userland made by mmdebstrap)
// and from files of the host (the static binaries), a configuration
// (user, entrypoint, environment), written as an OCI image layout in a
// tar archive that `ctr images import` and most registries' tools read.
// scripts/images.sh drives it; deploy/Dockerfile builds the same images
// where Docker is at hand (docs/kubernetes.md says how the two are kept
// alike).
//
//	go run ./deploy/imagebuild -o worker.tar -name docker.io/talkide/worker:dev \
//	    -rootfs debian.tar -file /talkide=bin/talkide:0755 -dir /tmp:1777 \
//	    -user 65532:65532 -entrypoint /talkide
//
// The OCI layout and its manifests are go-containerregistry's; this
// command only says what goes in.
package main

import (
	"archive/tar"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/talkide/platform/internal/atomicfile"
)

// list is a repeatable flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var (
		out, name, user, workdir string
		rootfs, files, dirs, env list
		entrypoint, cmd          string
	)
	flag.StringVar(&out, "o", "", "the image archive to write (an OCI layout in a tar)")
	flag.StringVar(&name, "name", "", "the image's name, as pods name it (docker.io/talkide/worker:dev)")
	flag.Var(&rootfs, "rootfs", "a root file system tarball to add as a layer (repeat, lowest first)")
	flag.Var(&files, "file", "DEST=SRC[:MODE]: a file of the host at DEST, owned by root, in the last layer (repeat)")
	flag.Var(&dirs, "dir", "DEST:MODE: an empty directory, owned by root, in the last layer (repeat)")
	flag.Var(&env, "env", "NAME=VALUE in the image's environment (repeat)")
	flag.StringVar(&user, "user", "", "the user the image runs as, UID:GID")
	flag.StringVar(&workdir, "workdir", "/", "the working directory")
	flag.StringVar(&entrypoint, "entrypoint", "", "the entrypoint, arguments separated by commas")
	flag.StringVar(&cmd, "cmd", "", "the default arguments, separated by commas")
	flag.Parse()
	if out == "" || name == "" {
		fmt.Fprintln(os.Stderr, "imagebuild: -o and -name are required")
		flag.Usage()
		os.Exit(2)
	}
	if err := build(out, name, rootfs, files, dirs, env, user, workdir, split(entrypoint), split(cmd)); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func build(out, name string, rootfs, files, dirs, env []string, user, workdir string, entrypoint, cmd []string) error {
	work, err := os.MkdirTemp(filepath.Dir(out), ".imagebuild-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	var layers []v1.Layer
	for _, r := range rootfs {
		l, err := tarball.LayerFromFile(r, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
		if err != nil {
			return fmt.Errorf("layer %s: %w", r, err)
		}
		layers = append(layers, l)
	}
	if len(files) > 0 || len(dirs) > 0 {
		l, err := filesLayer(filepath.Join(work, "files.tar"), files, dirs)
		if err != nil {
			return err
		}
		layers = append(layers, l)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()} // the same inputs make the same image
	cf.Config.User = user
	cf.Config.WorkingDir = workdir
	cf.Config.Entrypoint = entrypoint
	cf.Config.Cmd = cmd
	cf.Config.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}

	dir := filepath.Join(work, "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	tag := name[strings.LastIndexByte(name, ':')+1:]
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          name,
		"org.opencontainers.image.ref.name": tag,
	})); err != nil {
		return err
	}
	return tarDir(dir, out)
}

// filesLayer is a layer, written at path, holding host files and empty
// directories, with their parent directories, all owned by root.
func filesLayer(path string, files, dirs []string) (v1.Layer, error) {
	type entry struct {
		dest, src string
		mode      int64
		dir       bool
	}
	var entries []entry
	for _, f := range files {
		dest, src, ok := strings.Cut(f, "=")
		if !ok || !strings.HasPrefix(dest, "/") {
			return nil, fmt.Errorf("-file %q: want /DEST=SRC[:MODE]", f)
		}
		mode := int64(0o644)
		if i := strings.LastIndexByte(src, ':'); i > 0 {
			m, err := strconv.ParseInt(src[i+1:], 8, 32)
			if err != nil {
				return nil, fmt.Errorf("-file %q: mode: %w", f, err)
			}
			src, mode = src[:i], m
		}
		entries = append(entries, entry{dest: dest, src: src, mode: mode})
	}
	for _, d := range dirs {
		dest, m, ok := strings.Cut(d, ":")
		mode, err := strconv.ParseInt(m, 8, 32)
		if !ok || err != nil || !strings.HasPrefix(dest, "/") {
			return nil, fmt.Errorf("-dir %q: want /DEST:MODE", d)
		}
		entries = append(entries, entry{dest: dest, mode: mode, dir: true})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].dest < entries[j].dest })
	tmp, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer tmp.Close()
	tw := tar.NewWriter(tmp)
	written := map[string]bool{}
	parents := func(p string) error {
		var chain []string
		for d := filepath.Dir(p); d != "/" && !written[d]; d = filepath.Dir(d) {
			chain = append([]string{d}, chain...)
		}
		for _, d := range chain {
			written[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
		return nil
	}
	for _, e := range entries {
		if err := parents(e.dest); err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(e.dest, "/")
		if e.dir {
			written[e.dest] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: e.mode, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
			continue
		}
		f, err := os.Open(e.src)
		if err != nil {
			return nil, err
		}
		fi, err := f.Stat()
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: e.mode, Size: fi.Size(), Format: tar.FormatPAX})
		}
		if err == nil {
			_, err = io.Copy(tw, f)
		}
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.src, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return tarball.LayerFromFile(path, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// tarDir writes the layout in dir as a tar archive at out.
func tarDir(dir, out string) error {
	f, err := atomicfile.Create(out, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		h.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			src, err := os.Open(path)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(tw, src)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		return err
	}
	return f.Commit()
}
