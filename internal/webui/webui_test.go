package webui

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

func serve(h http.Handler, path, accept string) *http.Response {
	req := httptest.NewRequest("GET", path, nil)
	if accept != "" {
		req.Header.Set("Accept-Encoding", accept)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

// A binary built without the bundle serves a page that says how to build
// it, under the same CSP.
func TestPlaceholderWithoutBundle(t *testing.T) {
	h := NewFS(fstest.MapFS{".keep": {}})
	if h.Built() {
		t.Fatal("Built() with no index.html")
	}
	res := serve(h, "/", "")
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || !strings.Contains(string(body), "npm ci") || !strings.Contains(string(body), "build.mjs") {
		t.Fatalf("placeholder: %d %s", res.StatusCode, body)
	}
	if got := res.Header.Get("Content-Security-Policy"); got != CSP {
		t.Errorf("CSP %q", got)
	}
}

// Hashed assets are cached for a year and sent gzipped to clients that
// take it; index.html is never cached; every response carries the CSP.
func TestAssetsCachingAndGzip(t *testing.T) {
	var gz strings.Builder
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte("console.log(1)"))
	_ = zw.Close()
	h := NewFS(fstest.MapFS{
		"index.html":            {Data: []byte("<!doctype html><script type=module src=/assets/app-AB12.js></script>")},
		"assets/app-AB12.js":    {Data: []byte("console.log(1)")},
		"assets/app-AB12.js.gz": {Data: []byte(gz.String())},
		"assets/app-AB12.css":   {Data: []byte("body{}")},
	})
	for _, path := range []string{"/", "/inbox", "/runs/0b5c9d0e-1f2a-4b3c-8d4e-5f6a7b8c9d0e"} {
		res := serve(h, path, "gzip")
		if res.StatusCode != 200 || res.Header.Get("Cache-Control") != "no-cache" || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
			t.Errorf("%s: %d %v", path, res.StatusCode, res.Header)
		}
		if res.Header.Get("Content-Security-Policy") != CSP {
			t.Errorf("%s: no CSP", path)
		}
	}
	res := serve(h, "/assets/app-AB12.js", "br, gzip;q=0.8")
	b, _ := io.ReadAll(res.Body)
	if res.Header.Get("Content-Encoding") != "gzip" || string(b) != gz.String() {
		t.Errorf("gzip asset: encoding %q, %d bytes", res.Header.Get("Content-Encoding"), len(b))
	}
	if cc := res.Header.Get("Cache-Control"); cc != "public, max-age=31536000, immutable" {
		t.Errorf("asset Cache-Control %q", cc)
	}
	if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/javascript") || res.Header.Get("Vary") != "Accept-Encoding" {
		t.Errorf("asset headers %v", res.Header)
	}
	res = serve(h, "/assets/app-AB12.js", "gzip;q=0")
	b, _ = io.ReadAll(res.Body)
	if res.Header.Get("Content-Encoding") != "" || string(b) != "console.log(1)" {
		t.Errorf("identity asset: encoding %q body %q", res.Header.Get("Content-Encoding"), b)
	}
	res = serve(h, "/assets/app-AB12.css", "gzip")
	if res.Header.Get("Content-Encoding") != "" || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/css") {
		t.Errorf("css without a twin: %v", res.Header)
	}
	for _, bad := range []string{"/assets/nope.js", "/assets/app-AB12.js.gz", "/assets/.keep"} {
		if res := serve(h, bad, "gzip"); res.StatusCode != 404 {
			t.Errorf("%s: %d, want 404", bad, res.StatusCode)
		}
	}
}
