package release

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	testVersion = "v0.0.0-releasetest"
	testCommit  = "0123456789abcdef0123456789abcdef01234567"
)

// repoRoot is the module's root: the scripts run from there.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "scripts", "release.sh")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// need returns the path of tool, skipping the test where it is missing,
// except under CI, where scripts/deps.sh --test installs it.
func need(t *testing.T, tool, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing: scripts/deps.sh --test installs the Debian package %s", tool, pkg)
		}
		t.Skipf("%s is missing (Debian package %s)", tool, pkg)
	}
	return p
}

// script runs one of the scripts with extra environment, failing the
// test on a non-zero exit.
func script(t *testing.T, name string, env ...string) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join("scripts", name))
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("scripts/%s: %v\n%s", name, err, out.String())
	}
	t.Logf("scripts/%s took %s", name, time.Since(start).Round(time.Millisecond))
}

// checkVersion runs bin's pam version --json and checks the stamped
// version and commit.
func checkVersion(t *testing.T, bin string) {
	t.Helper()
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("%s version: %v", bin, err)
	}
	var v struct {
		Version  string `json:"version"`
		Revision string `json:"revision"`
		Platform string `json:"platform"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s version --json: %v: %s", bin, err, out)
	}
	if v.Version != testVersion || v.Revision != testCommit || v.Platform != "linux/"+runtime.GOARCH {
		t.Errorf("%s version: %+v, want %s at %s", bin, v, testVersion, testCommit)
	}
}

// checkStatic fails unless bin is an ELF executable without an
// interpreter: it must run where there is no libc (FROM scratch).
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked", bin)
		}
	}
}

// TestReleaseBinaries: scripts/release.sh (make release) builds a static,
// version-stamped binary per platform and a SHA256SUMS that matches them.
// Only this machine's platform here, to keep the test short; make release
// builds linux/amd64, linux/arm64 and darwin/arm64.
func TestReleaseBinaries(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the release is built on Linux")
	}
	dist := t.TempDir()
	script(t, "release.sh", "DIST="+dist, "PLATFORMS=linux/"+runtime.GOARCH, "VERSION="+testVersion, "COMMIT="+testCommit)
	bin := filepath.Join(dist, "pam-linux-"+runtime.GOARCH)
	checkStatic(t, bin)
	checkVersion(t, bin)
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(bin)
	sum := sha256.Sum256(b)
	if want := hex.EncodeToString(sum[:]) + "  pam-linux-" + runtime.GOARCH + "\n"; string(sums) != want {
		t.Errorf("SHA256SUMS = %q, want %q", sums, want)
	}
}

// TestServeImage: scripts/image.sh builds the image of pam serve FROM
// scratch with buildah (vfs storage, chroot isolation: no base image, no
// daemon), and the image's own files work: its pam runs from the
// extracted filesystem and says its version, the CA bundle is the host's,
// and it runs as the unprivileged pam user, serve by default.
func TestServeImage(t *testing.T) {
	buildah := need(t, "buildah", "buildah")
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("buildah with vfs storage needs root here (CI runs as root)")
		}
		t.Skip("buildah with vfs storage needs root")
	}
	store := t.TempDir()
	flags := []string{"--root", filepath.Join(store, "storage"), "--runroot", filepath.Join(store, "run"), "--storage-driver", "vfs"}
	bh := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(buildah, append(append([]string{}, flags...), args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("buildah %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	t.Cleanup(func() { exec.Command(buildah, append(append([]string{}, flags...), "rm", "--all")...).Run() })
	const image = "localhost/pam-serve:releasetest"
	script(t, "image.sh", "IMAGE="+image, "VERSION="+testVersion, "COMMIT="+testCommit,
		"BUILDAH_FLAGS="+strings.Join(flags[:4], " "))

	var cfg struct {
		OCIv1 struct {
			Config struct {
				User       string
				Env        []string
				Entrypoint []string
				Cmd        []string
			} `json:"config"`
		}
	}
	if err := json.Unmarshal([]byte(bh("inspect", "--type", "image", image)), &cfg); err != nil {
		t.Fatal(err)
	}
	c := cfg.OCIv1.Config
	if c.User != "65532:65532" || strings.Join(c.Entrypoint, " ") != "/pam" || strings.Join(c.Cmd, " ") != "serve" {
		t.Errorf("image config: user %q, entrypoint %q, cmd %q; want 65532:65532, /pam, serve", c.User, c.Entrypoint, c.Cmd)
	}
	if !strings.Contains(strings.Join(c.Env, " "), "PAM_DATA_DIR=/data") {
		t.Errorf("image env %q lacks PAM_DATA_DIR=/data", c.Env)
	}

	ctr := bh("from", image)
	root := bh("mount", ctr)
	t.Cleanup(func() { exec.Command(buildah, append(append([]string{}, flags...), "umount", ctr)...).Run() })
	bin := filepath.Join(root, "pam")
	checkStatic(t, bin)
	checkVersion(t, bin)
	got, err := os.ReadFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"))
	if err != nil {
		t.Fatalf("the image has no CA bundle: %v", err)
	}
	want, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if !bytes.Equal(got, want) {
		t.Errorf("the image's CA bundle (%d bytes) is not the host's (%d bytes)", len(got), len(want))
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil || !strings.Contains(string(passwd), "\npam:x:65532:65532:") {
		t.Errorf("/etc/passwd lacks the pam user (%v): %s", err, passwd)
	}
	st, err := os.Stat(filepath.Join(root, "data"))
	if err != nil || !st.IsDir() {
		t.Fatalf("no /data: %v", err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || sys.Uid != 65532 {
		t.Errorf("/data is not the pam user's: %+v", st.Sys())
	}
	ents, _ := os.ReadDir(root)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "data etc pam" {
		t.Errorf("the image holds %v, want only data, etc and pam", names)
	}
}
