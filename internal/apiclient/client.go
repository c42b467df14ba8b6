package apiclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"pam/internal/wire"
)

// Client is a typed client of the public API (docs/api.md#resources, docs/api.md#server-sent-events). It is what
// the CLI and black-box tests use, so it speaks exactly the routes and
// shapes the server does. The zero HTTP field means http.DefaultClient.
type Client struct {
	BaseURL string // e.g. http://127.0.0.1:7898, without /api/v1
	Token   string // operator bearer token
	HTTP    *http.Client
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 1 << 20

// New returns a client of the orchestrator at baseURL. caFile, when
// not empty, is a PEM bundle trusted in addition to the system roots
// (PAM_CA_FILE), for orchestrators with a private CA. The client has no
// overall timeout because event streams are long-lived; bound calls with
// their context.
func New(baseURL, token, caFile string) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("orchestrator URL %q: want http://host:port or https://host:port", baseURL)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s: no PEM certificates found", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &Client{
		BaseURL: strings.TrimRight(baseURL, "/"),
		Token:   token,
		HTTP:    &http.Client{Transport: tr},
	}, nil
}

// Health calls GET /healthz (no token needed). A 503 comes back as an
// *Error with Status 503.
func (c *Client) Health(ctx context.Context) (*wire.Health, error) {
	return decode[wire.Health](c, ctx, http.MethodGet, "/healthz", nil, nil)
}

// Do performs one API call: it sends in as JSON when not nil, decodes a
// 2xx body into out when not nil, and turns any other answer into an
// *Error. path starts with "/" and has its segments already escaped.
func (c *Client) Do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	_, err := c.do(ctx, method, path, q, in, out)
	return err
}

// do is Do that also returns the answer's header.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) (http.Header, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, path, q, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
	}()
	if resp.StatusCode/100 != 2 {
		return resp.Header, decodeError(resp)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return resp.Header, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return resp.Header, fmt.Errorf("decode %s %s response: %w", method, path, err)
	}
	return resp.Header, nil
}

func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Request, error) {
	u := c.BaseURL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	return req, nil
}

// open sends req, asking for accept, for an answer the caller reads as it
// comes (an event stream, a log, a diff, a signal's result): a 2xx
// response whose body the caller closes, or an *Error for any other
// answer; ctx.Err() when the request's context ended.
func (c *Client) open(req *http.Request, accept string) (*http.Response, error) {
	req.Header.Set("Accept", accept)
	resp, err := c.httpClient().Do(req)
	if err != nil {
		if cerr := req.Context().Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// decodeError turns a non-2xx response into an *Error: the envelope when
// the body is one, otherwise code "internal" with the status text (and
// the start of the body, for a proxy's error page, in details.body).
func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var env wire.Envelope
	if json.Unmarshal(b, &env) == nil && env.Error != nil && env.Error.Code != "" {
		env.Error.Status = resp.StatusCode
		return env.Error
	}
	msg := http.StatusText(resp.StatusCode)
	if msg == "" {
		msg = resp.Status
	}
	e := &wire.Error{Status: resp.StatusCode, Code: wire.CodeInternal, Message: msg}
	if s := strings.TrimSpace(string(b)); s != "" {
		if len(s) > 200 {
			s = s[:200]
		}
		e = e.With("body", s)
	}
	return e
}

// decode sends a request and decodes the JSON answer into a new T.
func decode[T any](c *Client, ctx context.Context, method, path string, q url.Values, body any) (*T, error) {
	var v T
	if err := c.Do(ctx, method, path, q, body, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// AuthHeader is the header that authenticates a WebSocket handshake of a
// non-browser client.
func (c *Client) AuthHeader() http.Header {
	return http.Header{"Authorization": {"Bearer " + c.Token}}
}

// HTTPClient is the client's HTTP client (with its CA bundle), for
// WebSocket dialers.
func (c *Client) HTTPClient() *http.Client { return c.httpClient() }
