// Package release holds the tests of pam's release tooling: the binaries
// scripts/release.sh builds (make release) and the container image of
// pam serve that scripts/image.sh builds with buildah FROM scratch
// (docs/operations.md). It has no code of its own.
package release
