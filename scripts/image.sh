#!/usr/bin/env bash
# image.sh builds the container image of pam serve with buildah, FROM
# scratch (deploy/Containerfile): a static pam for this machine's
# architecture built as make release builds it (or BINARY, when set), the
# CA bundle of this Debian host (/etc/ssl/certs/ca-certificates.crt, the
# ca-certificates package), and a pam user (uid 65532) to run as. No base
# image is pulled. docs/operations.md#the-container-image.
#
#   IMAGE          the tag (default pam-serve:$VERSION)
#   VERSION/COMMIT stamped into pam version (as scripts/release.sh)
#   BUILDAH_FLAGS  global buildah flags, e.g. "--root DIR --runroot DIR"
#                  for a private image store (the tests use one)
#
# Storage is vfs and isolation chroot: both work without a kernel overlay
# or user namespaces, in a container or a VM as root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO=${GO:-go}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
IMAGE=${IMAGE:-pam-serve:$VERSION}
CA=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

command -v buildah >/dev/null || { echo "image: buildah is missing (Debian package buildah)" >&2; exit 1; }
[ -s "$CA" ] || { echo "image: no CA bundle at $CA (Debian package ca-certificates)" >&2; exit 1; }

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
if [ -n "${BINARY:-}" ]; then
	cp "$BINARY" "$ctx/pam"
else
	CGO_ENABLED=0 "$GO" build -trimpath \
		-ldflags "-s -w -X pam/internal/cli.Version=$VERSION -X pam/internal/cli.Commit=$COMMIT" \
		-o "$ctx/pam" ./cmd/pam
fi
cp "$CA" "$ctx/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\npam:x:65532:65532:pam:/data:/sbin/nologin\n' >"$ctx/passwd"
printf 'root:x:0:\npam:x:65532:\n' >"$ctx/group"
mkdir -m 700 "$ctx/data"
cp deploy/Containerfile "$ctx/Containerfile"

# shellcheck disable=SC2086 # BUILDAH_FLAGS is a list of flags
buildah ${BUILDAH_FLAGS:-} --storage-driver vfs build --isolation chroot --quiet \
	--label org.opencontainers.image.version="$VERSION" \
	--label org.opencontainers.image.revision="$COMMIT" \
	-f "$ctx/Containerfile" -t "$IMAGE" "$ctx" >/dev/null
echo "image: built $IMAGE" >&2
