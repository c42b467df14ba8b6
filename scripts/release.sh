#!/usr/bin/env bash
# release.sh builds the release binaries of pam into DIST (default dist/):
# pam-<os>-<arch> for each of PLATFORMS (default linux/amd64, linux/arm64,
# darwin/arm64), static (CGO_ENABLED=0), with -trimpath, and VERSION and
# COMMIT stamped into `pam version` (-ldflags -X), then SHA256SUMS of them.
# The dashboard bundle must be built first (make release does it): each
# binary embeds it. docs/operations.md#release-binaries.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO=${GO:-go}
DIST=${DIST:-dist}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64 darwin/arm64}

ldflags="-s -w -X pam/internal/cli.Version=$VERSION -X pam/internal/cli.Commit=$COMMIT"
rm -rf "$DIST"
mkdir -p "$DIST"
for p in $PLATFORMS; do
	os=${p%/*} arch=${p#*/}
	echo "release: $DIST/pam-$os-$arch ($VERSION)" >&2
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath -ldflags "$ldflags" -o "$DIST/pam-$os-$arch" ./cmd/pam
done
(cd "$DIST" && sha256sum pam-* >SHA256SUMS)
echo "release: $DIST/SHA256SUMS" >&2
