// Package webui serves the browser UI: the assets web/build.mjs bundles
// into dist/ (committed, so that the binary embeds them and `talkide dev`
// needs nothing but Go), with the headers that keep the model's output from
// running anything in the page.
package webui

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed dist
var embedded embed.FS

// CSP is the Content-Security-Policy of every answer: scripts, styles and
// connections only from the page's own origin, images from it or data:
// URLs (a Markdown image pointing elsewhere cannot carry data out), no
// framing, no <base>, forms only to the origin. No inline script or style
// runs, so HTML that slipped past the sanitizer still could not execute.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// assetsDir is where the hashed assets live inside dist; their names carry
// a content hash, so they may be cached for ever.
const assetsDir = "assets/"

// Handler serves the UI from the embedded dist directory.
func Handler() http.Handler {
	sub, err := fs.Sub(embedded, "dist")
	if err != nil {
		panic(err) // dist is embedded at build time; it cannot be missing
	}
	return New(sub)
}

// New serves the UI from files: index.html at "/" and for every path that
// names no file (the app routes in the browser), the files under assets/
// with a year-long immutable cache. index.html is never cached, so a new
// build reaches the browser at its next load.
func New(files fs.FS) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, "/")
		if strings.HasPrefix(name, assetsDir) {
			// fs.ValidPath refuses "..", empty and "." segments and
			// backslashes are plain bytes in an fs.FS: nothing outside
			// dist can be named.
			if !fs.ValidPath(name) || path.Base(name) == "." {
				http.NotFound(w, r)
				return
			}
			b, err := fs.ReadFile(files, name)
			if err != nil {
				// A missing asset is a 404, not the app: a stale
				// index.html asking for an old bundle must fail visibly
				// rather than run HTML as a script.
				http.NotFound(w, r)
				return
			}
			h.Set("Cache-Control", "public, max-age=31536000, immutable")
			h.Set("Content-Type", contentType(name))
			serve(w, r, b)
			return
		}
		b, err := fs.ReadFile(files, "index.html")
		if err != nil {
			http.Error(w, "the web UI is not built: run ./scripts/web.sh", http.StatusServiceUnavailable)
			return
		}
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Type", "text/html; charset=utf-8")
		serve(w, r, b)
	})
}

func serve(w http.ResponseWriter, r *http.Request, b []byte) {
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(b)
	}
}

// contentType names the types the build emits; anything else is served as
// bytes, which nosniff keeps the browser from running.
func contentType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	case ".woff2":
		return "font/woff2"
	case ".map", ".json":
		return "application/json"
	}
	return "application/octet-stream"
}
