package serve_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/store/storetest"
)

// selfSigned writes a certificate for 127.0.0.1 and its key into dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "pam test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	keyDER, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
	return certFile, keyFile, pool
}

func TestServeNativeTLS(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	certFile, keyFile, pool := selfSigned(t, dir)
	p := pamtest.StartServe(t, pamtest.ServeOptions{DataDir: dir, DatabaseURL: storetest.URL(t),
		Env: []string{"PAM_TLS_CERT=" + certFile, "PAM_TLS_KEY=" + keyFile}})
	if !strings.HasPrefix(p.URL, "https://") {
		t.Fatalf("serve with TLS prints %s", p.URL)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get(p.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("healthz over TLS: %d", resp.StatusCode)
	}
	// Plain HTTP to the TLS port gets no API answer.
	if code, _ := get(t, strings.Replace(p.URL, "https://", "http://", 1)+"/healthz", ""); code == 200 {
		t.Fatal("plain HTTP answered on the TLS port")
	}
	p.Stop(syscall.SIGTERM, stopWait)
}

// Plain HTTP on an address other machines reach would carry every token
// in clear: serve refuses to start, saying how to allow it; with
// PAM_ALLOW_INSECURE it starts and warns.
func TestServeRefusesPlainNonLoopback(t *testing.T) {
	t.Parallel()
	refused := pamtest.StartServe(t, pamtest.ServeOptions{DataDir: dataDir(t), DatabaseURL: storetest.URL(t), Env: []string{"PAM_BIND=0.0.0.0"}, NoWait: true})
	if code := refused.Wait(stopWait); code != 1 || !strings.Contains(refused.Stderr.String(), "PAM_ALLOW_INSECURE") || strings.Contains(refused.Stdout.String(), "listening") {
		t.Fatalf("plain HTTP on 0.0.0.0: exit %d: %s", code, refused.Stderr)
	}
	p := pamtest.StartServe(t, pamtest.ServeOptions{DataDir: dataDir(t), DatabaseURL: storetest.URL(t), Env: []string{"PAM_BIND=0.0.0.0", "PAM_ALLOW_INSECURE=1"}})
	eventually.Wait(t, eventually.Medium, "a warning for plain HTTP on 0.0.0.0", func() bool {
		return strings.Contains(p.Stderr.String(), "non-loopback")
	})
	p.Stop(syscall.SIGTERM, stopWait)

	bad := pamtest.StartServe(t, pamtest.ServeOptions{DataDir: dataDir(t), DatabaseURL: storetest.URL(t),
		Env: []string{"PAM_TLS_CERT=/nonexistent", "PAM_TLS_KEY=/nonexistent"}, NoWait: true})
	if code := bad.Wait(stopWait); code != 1 || !strings.Contains(bad.Stderr.String(), "PAM_TLS_CERT") {
		t.Fatalf("bad TLS files: exit %d: %s", code, bad.Stderr)
	}
}
