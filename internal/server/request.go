package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"pam/internal/store"
	"pam/internal/wire"
)

// What a request may carry besides its body (docs/api.md#input): every
// query parameter an /api/v1 route takes is the one its OpenAPI operation
// documents, anything else is 400 validation_failed naming it, instead of
// being ignored (a misspelt filter would otherwise list everything). An
// {id} in the path is a UUID in canonical form or the route is a 404:
// Go's parser also takes urn:uuid:… and {…}, which must not reach the
// database. Text that PostgreSQL cannot store (NUL, invalid UTF-8) is
// refused here too, in the path, the query and every string of a body.

// routeParams is the query parameters of each documented operation,
// keyed "GET /runs/{id}/diff", read once from the OpenAPI document.
var routeParams = mustRouteParams(openAPIDoc)

// mustRouteParams reads the query parameters of every operation of doc,
// following $refs to components/parameters.
func mustRouteParams(doc []byte) map[string]map[string]bool {
	type param struct {
		Ref  string `json:"$ref"`
		Name string `json:"name"`
		In   string `json:"in"`
	}
	var d struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Parameters map[string]param `json:"parameters"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		panic(fmt.Sprintf("openapi.json: %v", err))
	}
	resolve := func(ps []param) []param {
		out := make([]param, 0, len(ps))
		for _, p := range ps {
			if p.Ref != "" {
				name := strings.TrimPrefix(p.Ref, "#/components/parameters/")
				c, ok := d.Components.Parameters[name]
				if !ok {
					panic(fmt.Sprintf("openapi.json: no parameter %s", p.Ref))
				}
				p = c
			}
			out = append(out, p)
		}
		return out
	}
	out := map[string]map[string]bool{}
	for path, item := range d.Paths {
		var shared []param
		if raw, ok := item["parameters"]; ok {
			if err := json.Unmarshal(raw, &shared); err != nil {
				panic(fmt.Sprintf("openapi.json: %s parameters: %v", path, err))
			}
		}
		for method, raw := range item {
			switch method {
			case "get", "post", "put", "patch", "delete":
			default:
				continue // parameters, summary, …: not an operation
			}
			var op struct {
				Parameters []param `json:"parameters"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				panic(fmt.Sprintf("openapi.json: %s %s: %v", method, path, err))
			}
			names := map[string]bool{}
			for _, p := range resolve(append(append([]param{}, shared...), op.Parameters...)) {
				if p.In == "query" {
					names[p.Name] = true
				}
			}
			out[strings.ToUpper(method)+" "+path] = names
		}
	}
	return out
}

// checkRequest refuses what the route of pattern (a mux pattern under
// /api/v1) cannot take: a non-canonical {id}, a path value or query value
// that is not storable text, a query parameter the route does not
// document. Patterns outside /api/v1 are not checked.
func checkRequest(pattern string, r *http.Request) error {
	method, path, ok := strings.Cut(pattern, " ")
	path, api := strings.CutPrefix(path, "/api/v1")
	if !ok || !api {
		return nil
	}
	for _, name := range pathNames(path) {
		v := r.PathValue(name)
		if name == "id" && !wire.ValidUUID(v) || !storable(v) {
			return wire.NotFound(resourceOf(path))
		}
	}
	allowed := routeParams[method+" "+path]
	q := r.URL.Query()
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !allowed[name] && name == "token" {
			// Not merely unknown: a credential where it would land in
			// logs, so the refusal says where it belongs.
			return wire.Errorf(wire.CodeUnauthorized, "a token in the URL is not accepted (it would land in logs): send the Authorization header, or ?ticket= from POST /api/v1/ws-tickets")
		}
		if !allowed[name] {
			return wire.Invalid(name, "unknown query parameter %s", strconv.Quote(name))
		}
		for _, v := range q[name] {
			if !storable(v) {
				return wire.Invalid(name, "query parameter %s must be valid UTF-8 without NUL", name)
			}
		}
	}
	return nil
}

// checked refuses what checkRequest refuses before h runs: for the
// sockets, which authenticate by ticket in their handler rather than by
// operatorAuth, and must refuse before the upgrade.
func checked(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := checkRequest(r.Pattern, r); err != nil {
			writeError(w, err)
			return
		}
		h(w, r)
	}
}

// pathNames lists the wildcards of a pattern's path ("id" of /runs/{id}).
func pathNames(path string) []string {
	var out []string
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			out = append(out, strings.TrimSuffix(seg[1:len(seg)-1], "..."))
		}
	}
	return out
}

// resourceOf names what a path's first segment holds, for not_found
// messages: /runs/{id}/pane → "run".
func resourceOf(path string) string {
	first, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	switch first {
	case "work-items":
		return "work item"
	case "":
		return "resource"
	}
	return strings.TrimSuffix(first, "s")
}

// storable reports whether PostgreSQL can hold s as text.
func storable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// queryBool reads a boolean query parameter: true, false, 1 or 0; absent
// is false; anything else is 400 validation_failed naming it.
func queryBool(r *http.Request, name string) (bool, error) {
	q := r.URL.Query()
	if !q.Has(name) {
		return false, nil
	}
	switch q.Get(name) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, wire.Invalid(name, "%s must be true, false, 1 or 0", name)
}

// refuseNUL finds a string holding U+0000 anywhere in a decoded body
// (PostgreSQL's text and jsonb cannot store it) and names its field, as
// the JSON spells it: "description", "keys[2].text".
func refuseNUL(v any) error {
	if field, bad := nulField(reflect.ValueOf(v), ""); bad {
		if field == "" {
			field = "body"
		}
		return wire.Invalid(field, "%s must not contain the NUL character", field)
	}
	return nil
}

func nulField(v reflect.Value, at string) (string, bool) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "", false
		}
		return nulField(v.Elem(), at)
	case reflect.String:
		return at, strings.ContainsRune(v.String(), 0)
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return "", false // raw JSON or bytes: not text of the API
		}
		for i := 0; i < v.Len(); i++ {
			if f, bad := nulField(v.Index(i), fmt.Sprintf("%s[%d]", at, i)); bad {
				return f, true
			}
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			k := fmt.Sprint(iter.Key().Interface())
			if strings.ContainsRune(k, 0) {
				return join(at, k), true
			}
			if f, bad := nulField(iter.Value(), join(at, k)); bad {
				return f, true
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			if !sf.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			// An untagged field (the Value of an Optional) stands for
			// the field that holds it.
			next := at
			if name != "" {
				next = join(at, name)
			}
			if f, bad := nulField(v.Field(i), next); bad {
				return f, true
			}
		}
	}
	return "", false
}

func join(at, name string) string {
	if at == "" {
		return name
	}
	return at + "." + name
}

// checkRunFilter checks the filter of GET /runs: a run status, UUIDs, an
// attention (or any), a limit of 1 to 1000 (0: the default).
func checkRunFilter(f store.RunFilter) error {
	switch f.Status {
	case "", wire.RunPending, wire.RunSpawning, wire.RunRunning, wire.RunExited, wire.RunFailed, wire.RunStopped:
	default:
		return wire.Invalid("status", "status must be one of pending, spawning, running, exited, failed, stopped")
	}
	for _, p := range []struct{ field, v string }{{"project_id", f.ProjectID}, {"task_id", f.TaskID}, {"host_id", f.HostID}, {"before", f.Before}} {
		if p.v != "" && !wire.ValidUUID(p.v) {
			return wire.Invalid(p.field, "%s must be a UUID", p.field)
		}
	}
	if f.Attention != "" && f.Attention != store.AttentionAny && !wire.ValidAttention(f.Attention) {
		return wire.Invalid("attention", "attention must be any, none, needs_input, rate_limited or idle")
	}
	if f.Limit != 0 && (f.Limit < 1 || f.Limit > 1000) {
		return wire.Invalid("limit", "limit must be between 1 and 1000")
	}
	return nil
}
