package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"pam/internal/server"
	"pam/internal/store/storetest"
)

// The OpenAPI document (openapi.json, embedded and served by the server)
// is held to the code from both sides: every route registered under
// /api/v1 is documented and every documented operation is registered
// (TestOpenAPIDocumentsEveryRoute), and every /api/v1 response the server
// tests receive is validated against the schema of its operation and
// status (checkResponse, called by env.callAs).
//
// The schemas are JSON Schema draft 2020-12, the dialect of OpenAPI 3.1,
// validated by santhosh-tekuri/jsonschema: it compiles a schema at any
// JSON pointer of a document that is not itself a schema, so the document
// is used as it is, with its $refs, and nothing is converted or copied.

const (
	specFile = "openapi.json"
	// specURL names the document inside the schema compiler.
	specURL = "https://pam.invalid/api/v1/openapi.json"
	apiBase = "/api/v1"
)

// apiSpec is the loaded document and the schemas compiled from it.
type apiSpec struct {
	doc map[string]any

	mu       sync.Mutex // the compiler and the cache
	compiler *jsonschema.Compiler
	schemas  map[string]*jsonschema.Schema // by JSON pointer
}

var (
	specOnce   sync.Once
	loadedSpec *apiSpec
	specErr    error
)

// spec returns the document, loaded once for the whole test binary.
func spec(t testing.TB) *apiSpec {
	t.Helper()
	specOnce.Do(func() {
		b, err := os.ReadFile(specFile)
		if err != nil {
			specErr = err
			return
		}
		loadedSpec, specErr = parseSpec(b)
	})
	if specErr != nil {
		t.Fatalf("load %s: %v", specFile, specErr)
	}
	return loadedSpec
}

func parseSpec(b []byte) (*apiSpec, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the document is not a JSON object")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat() // uuid and date-time are checked, not just annotations
	if err := c.AddResource(specURL, doc); err != nil {
		return nil, err
	}
	return &apiSpec{doc: doc, compiler: c, schemas: map[string]*jsonschema.Schema{}}, nil
}

// schema compiles (once) the schema at a JSON pointer of the document.
func (a *apiSpec) schema(ptr string) (*jsonschema.Schema, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.schemas[ptr]; ok {
		return s, nil
	}
	s, err := a.compiler.Compile(specURL + "#" + ptr)
	if err != nil {
		return nil, err
	}
	a.schemas[ptr] = s
	return s, nil
}

// pointer escapes one JSON pointer token.
func pointer(token string) string {
	return strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
}

// lookup resolves an internal JSON pointer ("#/components/...").
func (a *apiSpec) lookup(ref string) (any, error) {
	ptr, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, fmt.Errorf("reference %q is not internal to the document", ref)
	}
	var v any = a.doc
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("reference %q: %q is not inside an object", ref, tok)
		}
		if v, ok = m[tok]; !ok {
			return nil, fmt.Errorf("reference %q: no %q", ref, tok)
		}
	}
	return v, nil
}

// deref follows an OpenAPI reference object; it returns the object and
// the JSON pointer where it lives.
func (a *apiSpec) deref(v any, ptr string) (map[string]any, string, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, "", fmt.Errorf("%s is not an object", ptr)
	}
	if ref, ok := m["$ref"].(string); ok {
		target, err := a.lookup(ref)
		if err != nil {
			return nil, "", err
		}
		return a.deref(target, strings.TrimPrefix(ref, "#"))
	}
	return m, ptr, nil
}

// operationMethods are the method keys of an OpenAPI path item.
var operationMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// operations lists the documented operations as "METHOD /path".
func (a *apiSpec) operations() []string {
	var out []string
	paths, _ := a.doc["paths"].(map[string]any)
	for p, item := range paths {
		m, _ := item.(map[string]any)
		for _, method := range operationMethods {
			if _, ok := m[method]; ok {
				out = append(out, strings.ToUpper(method)+" "+p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// operation finds the documented operation serving method and a request
// path relative to /api/v1: the template whose segments match, literal
// segments winning over parameters as they do in the server's mux.
func (a *apiSpec) operation(method, path string) (map[string]any, string, bool) {
	paths, _ := a.doc["paths"].(map[string]any)
	segs := strings.Split(path, "/")
	best, bestScore := "", -1
	for tmpl, item := range paths {
		m, _ := item.(map[string]any)
		if _, ok := m[strings.ToLower(method)]; !ok {
			continue
		}
		ts := strings.Split(tmpl, "/")
		if len(ts) != len(segs) {
			continue
		}
		score := 0
		for i, t := range ts {
			switch {
			case strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") && segs[i] != "":
			case t == segs[i]:
				score++
			default:
				score = -1
			}
			if score < 0 {
				break
			}
		}
		if score > bestScore {
			best, bestScore = tmpl, score
		}
	}
	if bestScore < 0 {
		return nil, "", false
	}
	ptr := "/paths/" + pointer(best) + "/" + strings.ToLower(method)
	op, _ := paths[best].(map[string]any)[strings.ToLower(method)].(map[string]any)
	return op, ptr, true
}

// checkResponse validates one response of the server against the
// document. Only /api/v1 is described there; other paths pass. A response
// of a documented operation must have a documented status, the documented
// media type, and a JSON body valid against that status's schema (so no
// undocumented field, no missing one, no wrong type). A request no
// operation serves (an unknown route, a method the path does not take)
// must answer with the error envelope.
func (a *apiSpec) checkResponse(method, urlPath string, status int, contentType string, body []byte) error {
	rel, ok := strings.CutPrefix(urlPath, apiBase)
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
		return nil
	}
	var resp map[string]any
	var respPtr string
	var err error
	op, opPtr, found := a.operation(method, rel)
	if !found {
		if status < 400 {
			return fmt.Errorf("%s %s answered %d, but no operation of the document serves it", method, urlPath, status)
		}
		// Any error response of the document: the envelope.
		resp, respPtr, err = a.deref(map[string]any{"$ref": "#/components/responses/Unauthorized"}, "")
	} else {
		responses, _ := op["responses"].(map[string]any)
		key := strconv.Itoa(status)
		if _, ok := responses[key]; !ok {
			key = strconv.Itoa(status/100) + "XX"
		}
		if _, ok := responses[key]; !ok {
			key = "default"
		}
		r, ok := responses[key]
		if !ok {
			return fmt.Errorf("%s %s: status %d is not documented (%s)", method, urlPath, status, opPtr)
		}
		resp, respPtr, err = a.deref(r, opPtr+"/responses/"+key)
	}
	if err != nil {
		return err
	}
	content, _ := resp["content"].(map[string]any)
	if len(content) == 0 {
		if len(bytes.TrimSpace(body)) > 0 {
			return fmt.Errorf("%s %s: status %d is documented without a body, got %q", method, urlPath, status, body)
		}
		return nil
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	if _, ok := content[mt]; !ok {
		return fmt.Errorf("%s %s: status %d answered %q, documented %v", method, urlPath, status, contentType, keys(content))
	}
	if mt != "application/json" {
		return nil // streams and text: the media type is all the document says
	}
	sch, err := a.schema(respPtr + "/content/" + pointer(mt) + "/schema")
	if err != nil {
		return fmt.Errorf("compile the schema of %s: %w", respPtr, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s %s: status %d: body is not JSON: %v: %q", method, urlPath, status, err, body)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("%s %s: status %d: body does not match %s: %v\nbody: %s", method, urlPath, status, respPtr, err, body)
	}
	return nil
}

// checkHeaders validates the headers of one response against the
// document: every header its operation's response at that status marks
// required is present, with a value its schema takes (Pam-Event-Seq on
// every REST read: an integer). What checkResponse refuses (an
// undocumented status, a path of no operation) is left to it.
func (a *apiSpec) checkHeaders(method, urlPath string, status int, h http.Header) error {
	rel, ok := strings.CutPrefix(urlPath, apiBase)
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
		return nil
	}
	op, opPtr, found := a.operation(method, rel)
	if !found {
		return nil
	}
	key := strconv.Itoa(status)
	r, ok := op["responses"].(map[string]any)[key]
	if !ok {
		return nil
	}
	resp, ptr, err := a.deref(r, opPtr+"/responses/"+key)
	if err != nil {
		return err
	}
	headers, _ := resp["headers"].(map[string]any)
	for name, hv := range headers {
		hdr, hptr, err := a.deref(hv, ptr+"/headers/"+pointer(name))
		if err != nil {
			return err
		}
		v := h.Get(name)
		if v == "" {
			if req, _ := hdr["required"].(bool); req {
				return fmt.Errorf("%s %s: status %d lacks the required header %s", method, urlPath, status, name)
			}
			continue
		}
		sch, err := a.schema(hptr + "/schema")
		if err != nil {
			return fmt.Errorf("compile the schema of header %s: %w", hptr, err)
		}
		var val any = v
		if parsed, err := jsonschema.UnmarshalJSON(strings.NewReader(v)); err == nil {
			val = parsed // a number is a number, anything else stays text
		}
		if err := sch.Validate(val); err != nil {
			return fmt.Errorf("%s %s: status %d: header %s: %q does not match %s: %v", method, urlPath, status, name, v, hptr, err)
		}
	}
	return nil
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// checkAgainstSpec is what env.callAs runs on every response.
func checkAgainstSpec(t testing.TB, method string, resp *http.Response, body []byte) {
	t.Helper()
	if err := spec(t).checkResponse(method, resp.Request.URL.Path, resp.StatusCode, resp.Header.Get("Content-Type"), body); err != nil {
		t.Errorf("response does not match the OpenAPI document: %v", err)
	}
	if err := spec(t).checkHeaders(method, resp.Request.URL.Path, resp.StatusCode, resp.Header); err != nil {
		t.Errorf("response headers do not match the OpenAPI document: %v", err)
	}
}

// TestOpenAPIDocumentsEveryRoute compares the routes the server registers
// under /api/v1 (read from the server itself) with the operations of the
// document, both ways, and checks the document's own consistency: unique
// operation ids, declared path parameters, every error response the
// envelope, and every schema compiling (so every $ref resolves).
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	a := spec(t)
	srv := server.New(server.Options{Token: testToken})
	var registered []string
	for _, p := range srv.Routes() {
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			continue // a method-less fallback (404/405 envelopes), not an operation
		}
		if rel, ok := strings.CutPrefix(path, apiBase+"/"); ok {
			registered = append(registered, method+" /"+rel)
		}
	}
	slices.Sort(registered)
	if len(registered) < 30 {
		t.Fatalf("only %d /api/v1 routes found on the server: %v", len(registered), registered)
	}
	documented := a.operations()
	for _, r := range registered {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is served but not in %s", r, specFile)
		}
	}
	for _, d := range documented {
		if !slices.Contains(registered, d) {
			t.Errorf("operation %s is in %s but not served", d, specFile)
		}
	}

	if v, _ := a.doc["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi %q, want 3.1.x", v)
	}
	if servers, _ := a.doc["servers"].([]any); len(servers) != 1 || servers[0].(map[string]any)["url"] != apiBase {
		t.Errorf("servers %v, want the one relative URL %s", a.doc["servers"], apiBase)
	}
	ids := map[string]string{}
	for _, d := range documented {
		method, path, _ := strings.Cut(d, " ")
		opPtr := "/paths/" + pointer(path) + "/" + strings.ToLower(method)
		op, _, err := a.deref(a.doc["paths"].(map[string]any)[path].(map[string]any)[strings.ToLower(method)], opPtr)
		if err != nil {
			t.Errorf("%s: %v", d, err)
			continue
		}
		id, _ := op["operationId"].(string)
		if id == "" || ids[id] != "" {
			t.Errorf("%s: operationId %q missing or also used by %s", d, id, ids[id])
		}
		ids[id] = d
		a.checkParameters(t, d, path, op, opPtr)
		a.checkResponses(t, d, op, opPtr)
		if rb, ok := op["requestBody"]; ok {
			body, ptr, err := a.deref(rb, opPtr+"/requestBody")
			if err != nil {
				t.Errorf("%s: request body: %v", d, err)
				continue
			}
			for mt := range body["content"].(map[string]any) {
				if _, err := a.schema(ptr + "/content/" + pointer(mt) + "/schema"); err != nil {
					t.Errorf("%s: request schema: %v", d, err)
				}
			}
		}
	}
	schemas, _ := a.doc["components"].(map[string]any)["schemas"].(map[string]any)
	for name := range schemas {
		if _, err := a.schema("/components/schemas/" + pointer(name)); err != nil {
			t.Errorf("schema %s: %v", name, err)
		}
	}
}

// checkParameters: every {name} of the path is a declared path parameter.
func (a *apiSpec) checkParameters(t *testing.T, d, path string, op map[string]any, opPtr string) {
	t.Helper()
	declared := map[string]bool{}
	params, _ := op["parameters"].([]any)
	for i, p := range params {
		pm, _, err := a.deref(p, fmt.Sprintf("%s/parameters/%d", opPtr, i))
		if err != nil {
			t.Errorf("%s: parameter %d: %v", d, i, err)
			continue
		}
		if pm["in"] == "path" {
			declared[pm["name"].(string)] = true
		}
	}
	for _, seg := range strings.Split(path, "/") {
		if name, ok := strings.CutPrefix(seg, "{"); ok {
			name = strings.TrimSuffix(name, "}")
			if !declared[name] {
				t.Errorf("%s: path parameter %s is not declared", d, name)
			}
			delete(declared, name)
		}
	}
	for name := range declared {
		t.Errorf("%s: path parameter %s is declared but not in the path", d, name)
	}
}

// checkResponses: every operation answers 401 (all of /api/v1 needs the
// operator token, except an operation whose security is empty: the answer
// links, whose token is in the path), every 4xx and 5xx is the error envelope, and every
// response schema compiles.
func (a *apiSpec) checkResponses(t *testing.T, d string, op map[string]any, opPtr string) {
	t.Helper()
	responses, _ := op["responses"].(map[string]any)
	sec, open := op["security"].([]any)
	if _, ok := responses["401"]; !ok && !(open && len(sec) == 0) {
		t.Errorf("%s: no 401 response", d)
	}
	for code, r := range responses {
		resp, ptr, err := a.deref(r, opPtr+"/responses/"+code)
		if err != nil {
			t.Errorf("%s %s: %v", d, code, err)
			continue
		}
		content, _ := resp["content"].(map[string]any)
		if n, _ := strconv.Atoi(code); n >= 400 {
			js, _ := content["application/json"].(map[string]any)
			schema, _ := js["schema"].(map[string]any)
			if schema["$ref"] != "#/components/schemas/ErrorEnvelope" {
				t.Errorf("%s %s: an error response must be the ErrorEnvelope", d, code)
			}
		}
		for mt := range content {
			if _, err := a.schema(ptr + "/content/" + pointer(mt) + "/schema"); err != nil {
				t.Errorf("%s %s %s: %v", d, code, mt, err)
			}
		}
	}
}

// TestOpenAPIDocumentIsValid checks the document against the OpenAPI 3.1
// specification with kin-openapi (every object's required and allowed
// fields, every reference resolving, every schema well-formed), and shows
// that a broken copy is refused.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(specFile)
	if err != nil {
		t.Fatal(err)
	}
	validate := func(b []byte) error {
		doc, err := openapi3.NewLoader().LoadFromData(b)
		if err != nil {
			return err
		}
		if !doc.IsOpenAPI31OrLater() {
			return fmt.Errorf("openapi %s is not 3.1", doc.OpenAPI)
		}
		return doc.Validate(t.Context())
	}
	if err := validate(b); err != nil {
		t.Fatalf("%s is not a valid OpenAPI 3.1 document: %v", specFile, err)
	}
	var broken map[string]any
	if err := json.Unmarshal(b, &broken); err != nil {
		t.Fatal(err)
	}
	op := broken["paths"].(map[string]any)["/projects"].(map[string]any)["get"].(map[string]any)
	delete(op["responses"].(map[string]any)["200"].(map[string]any), "description")
	bad, _ := json.Marshal(broken)
	if err := validate(bad); err == nil {
		t.Fatal("a response without its required description was accepted")
	}
}

// TestOpenAPIServed: GET /api/v1/openapi.json needs the operator token and
// serves the file byte for byte.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(server.New(server.Options{Token: testToken, Store: storetest.New(t)})) // a store: every read says its journal position
	defer ts.Close()
	e := &env{t: t, url: ts.URL}
	if code, _ := e.callAs("", "GET", "/api/v1/openapi.json", nil); code != http.StatusUnauthorized {
		t.Fatalf("without a token: %d, want 401", code)
	}
	code, body := e.call("GET", "/api/v1/openapi.json", nil)
	want, err := os.ReadFile(specFile)
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK || !bytes.Equal(body, want) {
		t.Fatalf("GET /api/v1/openapi.json: %d, %d bytes; want 200 and the %d bytes of %s", code, len(body), len(want), specFile)
	}
}

// TestOpenAPICheckFails shows that checkResponse can fail: a field the
// schema does not allow, a missing or mistyped one, an undocumented
// status, a body where none is documented, the wrong media type, and an
// error that is not the envelope are all refused.
func TestOpenAPICheckFails(t *testing.T) {
	t.Parallel()
	a := spec(t)
	const project = `{"id":"6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f","name":"Demo","slug":"demo","description":"",` +
		`"status":"active","auto_done":true,"auto_continue":true,"repo":null,"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:05.123456Z"`
	const envelope = `{"error":{"code":"not_found","message":"project not found","details":{}}}`
	const js = "application/json"
	pass := []struct {
		method, path string
		status       int
		ctype, body  string
	}{
		{"GET", "/api/v1/projects/demo", 200, js, project + `}`},
		{"GET", "/api/v1/projects/demo", 404, js, envelope},
		{"DELETE", "/api/v1/work-items/6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f", 204, "", ""},
		{"PUT", "/api/v1/projects", 405, js, envelope},     // no operation: the envelope
		{"GET", "/healthz", 200, "text/plain", "anything"}, // not /api/v1
	}
	for _, c := range pass {
		if err := a.checkResponse(c.method, c.path, c.status, c.ctype, []byte(c.body)); err != nil {
			t.Errorf("%s %s %d: refused a valid response: %v", c.method, c.path, c.status, err)
		}
	}
	fail := []struct {
		name, method, path string
		status             int
		ctype, body        string
	}{
		{"extra field", "GET", "/api/v1/projects/demo", 200, js, project + `,"colour":"red"}`},
		{"missing field", "GET", "/api/v1/projects/demo", 200, js, strings.Replace(project, `"slug":"demo",`, "", 1) + `}`},
		{"wrong type", "GET", "/api/v1/projects/demo", 200, js, strings.Replace(project, `"auto_done":true`, `"auto_done":"yes"`, 1) + `}`},
		{"null where not nullable", "GET", "/api/v1/projects/demo", 200, js, strings.Replace(project, `"name":"Demo"`, `"name":null`, 1) + `}`},
		{"bad enum", "GET", "/api/v1/projects/demo", 200, js, strings.Replace(project, `"active"`, `"deleted"`, 1) + `}`},
		{"bad uuid", "GET", "/api/v1/projects/demo", 200, js, strings.Replace(project, `6f1c1c9e-`, `zz`, 1) + `}`},
		{"bad time", "GET", "/api/v1/projects/demo", 200, js, strings.Replace(project, `2026-01-02T03:04:05Z`, `yesterday`, 1) + `}`},
		{"list is null", "GET", "/api/v1/projects", 200, js, `{"projects":null}`},
		{"undocumented status", "GET", "/api/v1/projects/demo", 418, js, envelope},
		{"body where none", "DELETE", "/api/v1/work-items/6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f", 204, js, `{}`},
		{"wrong media type", "GET", "/api/v1/projects/demo", 200, "text/plain", project + `}`},
		{"not JSON", "GET", "/api/v1/projects/demo", 200, js, `<html>`},
		{"error not the envelope", "GET", "/api/v1/projects/demo", 404, js, `{"code":"not_found"}`},
		{"envelope with an extra field", "GET", "/api/v1/projects/demo", 404, js, `{"error":{"code":"x","message":"y","details":{},"hint":"z"}}`},
		{"envelope without details", "PUT", "/api/v1/projects", 405, js, `{"error":{"code":"x","message":"y"}}`},
		{"success of no operation", "GET", "/api/v1/no-such-route", 200, js, `{}`},
	}
	for _, c := range fail {
		if err := a.checkResponse(c.method, c.path, c.status, c.ctype, []byte(c.body)); err == nil {
			t.Errorf("%s: accepted %s %s %d %s", c.name, c.method, c.path, c.status, c.body)
		}
	}
	// Headers: a read without Pam-Event-Seq, or with one that is not a
	// journal position, is refused; an error answer needs none.
	seq := func(v string) http.Header {
		h := http.Header{}
		if v != "" {
			h.Set("Pam-Event-Seq", v)
		}
		return h
	}
	if err := a.checkHeaders("GET", "/api/v1/projects/demo", 200, seq("42")); err != nil {
		t.Errorf("refused a read with its journal position: %v", err)
	}
	if err := a.checkHeaders("GET", "/api/v1/projects/demo", 404, seq("")); err != nil {
		t.Errorf("refused an error without a journal position: %v", err)
	}
	for _, v := range []string{"", "-1", "twelve", "1.5"} {
		if err := a.checkHeaders("GET", "/api/v1/projects/demo", 200, seq(v)); err == nil {
			t.Errorf("accepted a read with Pam-Event-Seq %q", v)
		}
	}
}

// TestOpenAPIResponsesOfQuietRoutes calls the operations the other server
// tests do not reach with a JSON answer, so that their documented
// responses are validated too: the journal with real payloads, a
// completion, a lease revoke, logs and keys of a run not placed yet, and
// the refusals of the event cursor.
func TestOpenAPIResponsesOfQuietRoutes(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	r := e.start(nil)
	var evs struct {
		Events []map[string]any `json:"events"`
	}
	e.must(200, "GET", "/api/v1/events?after=0&topic=run.*&limit=10", nil, &evs)
	if len(evs.Events) == 0 {
		t.Fatal("no run event journaled")
	}
	e.must(200, "POST", "/api/v1/runs/"+r.ID+"/complete", nil, nil)
	e.must(204, "DELETE", "/api/v1/runs/"+r.ID+"/lease", nil, nil)
	e.must(409, "GET", "/api/v1/runs/"+r.ID+"/logs", nil, nil)
	e.must(409, "POST", "/api/v1/runs/"+r.ID+"/keys", map[string]any{"keys": []map[string]any{{"key": "Enter"}}}, nil)
	e.must(400, "POST", "/api/v1/runs/"+r.ID+"/keys", map[string]any{"keys": []map[string]any{{"key": "F1"}}}, nil)
	e.must(400, "GET", "/api/v1/events?limit=0", nil, nil)
	e.must(400, "GET", "/api/v1/events?after=-1", nil, nil)
	e.must(400, "GET", "/api/v1/events?topic=RUN", nil, nil)
	e.must(404, "POST", "/api/v1/runs/00000000-0000-4000-8000-000000000000/complete", nil, nil)
	e.must(400, "POST", "/api/v1/ws-tickets", map[string]any{"run_id": r.ID, "purpose": "both"}, nil)
	e.must(404, "GET", "/api/v1/runs/"+r.ID+"x/pane", nil, nil)
}
