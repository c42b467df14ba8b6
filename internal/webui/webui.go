// Package webui serves the web dashboard (docs/architecture.md#web-dashboard):
// the bundle web/build.mjs writes into dist/, embedded in the binary so
// that `pam serve` needs no files beside it. Asset names carry a content
// hash and are cached forever; index.html is never cached, so a new binary
// takes effect on the next load. A binary built without the bundle (a
// plain `go build` on a machine without Node) still serves a page saying
// how to build it.
package webui

import (
	"embed"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

// dist holds what web/build.mjs wrote; only dist/.keep is committed, so
// the pattern matches even before a build.
//
//go:embed all:dist
var dist embed.FS

// CSP is the Content-Security-Policy of every dashboard response
// (docs/architecture.md#security-model): scripts, sockets and everything
// else from this origin only, nothing inline but styles. The dashboard
// keeps the operator token in localStorage, so no script but its own
// may ever run. 'unsafe-inline' for styles is what xterm.js needs: it
// sizes its rows and colours its theme through <style> elements it
// creates at run time; styles cannot run code.
const CSP = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Patterns are the GET routes the dashboard answers, for the server's
// mux: the start page, the client-side router's paths (a reload or a
// deep link, e.g. a notification's, lands on index.html) and the assets.
// Anything else stays the server's 404.
var Patterns = []string{
	"/{$}",
	"/inbox",
	"/projects",
	"/projects/{rest...}",
	"/runs",
	"/runs/{rest...}",
	"/fleet",
	"/settings",
	"/assets/{file}",
}

// Handler serves the embedded dashboard.
type Handler struct {
	files fs.FS
	index []byte // nil when the bundle was not built
}

// New returns the handler of the bundle embedded at build time.
func New() *Handler {
	sub, _ := fs.Sub(dist, "dist") // dist is a literal folder of the embed: cannot fail
	return NewFS(sub)
}

// NewFS serves the bundle in files (index.html and assets/): New's
// embedded one, or a test's.
func NewFS(files fs.FS) *Handler {
	h := &Handler{files: files}
	if b, err := fs.ReadFile(files, "index.html"); err == nil {
		h.index = b
	}
	return h
}

// Built reports whether the binary carries the dashboard bundle.
func (h *Handler) Built() bool { return h.index != nil }

// ServeHTTP answers an asset under /assets/ or, for any other path it is
// routed, index.html (the client-side router reads the path).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", CSP)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	if name, ok := strings.CutPrefix(r.URL.Path, "/assets/"); ok {
		h.asset(w, r, name)
		return
	}
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	if h.index == nil {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, placeholder)
		return
	}
	_, _ = w.Write(h.index)
}

// asset serves assets/name, precompressed (name.gz, written by the build)
// to a client that takes gzip. Every asset's name carries its content
// hash, so it is cached for a year and never revalidated.
func (h *Handler) asset(w http.ResponseWriter, r *http.Request, name string) {
	if name == "" || strings.Contains(name, "/") || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".gz") {
		http.NotFound(w, r)
		return
	}
	p := path.Join("assets", name)
	hdr := w.Header()
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	hdr.Set("Vary", "Accept-Encoding")
	if acceptsGzip(r) {
		if b, err := fs.ReadFile(h.files, p+".gz"); err == nil {
			hdr.Set("Content-Type", ctype)
			hdr.Set("Content-Encoding", "gzip")
			hdr.Set("Cache-Control", "public, max-age=31536000, immutable")
			_, _ = w.Write(b)
			return
		}
	}
	b, err := fs.ReadFile(h.files, p)
	if err != nil {
		hdr.Set("Cache-Control", "no-cache")
		http.NotFound(w, r)
		return
	}
	hdr.Set("Content-Type", ctype)
	hdr.Set("Cache-Control", "public, max-age=31536000, immutable")
	_, _ = w.Write(b)
}

// acceptsGzip reports whether Accept-Encoding admits gzip (and does not
// refuse it with q=0).
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		q := strings.ReplaceAll(params, " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}

// placeholder is the page of a binary built without the bundle.
const placeholder = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>pam</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 4rem auto; padding: 0 1rem; line-height: 1.5">
<h1>pam is running</h1>
<p>The API is under <code>/api/v1</code>. This binary was built without the web dashboard.</p>
<p>To build it, run <code>make</code> in the repository (it needs Node.js and npm; as root,
<code>make deps</code> installs them from Debian), or by hand:</p>
<pre>cd web &amp;&amp; npm ci &amp;&amp; node build.mjs
cd .. &amp;&amp; go build -o bin/pam ./cmd/pam</pre>
</body></html>
`
