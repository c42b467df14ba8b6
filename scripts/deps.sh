#!/usr/bin/env bash
# deps.sh makes sure the Debian packages pam needs are present: tmux, git (workspaces),
# PostgreSQL's server binaries (initdb and postgres) for the embedded
# database, and Node.js with npm to build the web dashboard (web/); when
# root, also the postgres system user the database runs as. With --test it
# also wants Chromium, which the dashboard's browser tests drive, jq,
# systemd-analyze (the install tests verify the units), buildah and the
# CA bundle (the image test builds the image of pam serve), and
# installs the pinned agent CLIs (claude, codex, gemini) that the tests run
# for real from internal/agentrig/testdata/clis (docs/agents.md).
# Quiet when everything is there. As root it installs what is missing with
# apt-get; otherwise it prints the command to run and exits 1.
#
# Installing Debian's postgresql package may start a system cluster on port
# 5432. pam never uses it: its own cluster listens only on a Unix socket
# inside <data>/postgres.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }

for_tests=false
[ "${1:-}" = "--test" ] && for_tests=true

# pg_bin_dir succeeds when a folder holds both initdb and postgres: the one
# of initdb on PATH, then Debian's /usr/lib/postgresql/*/bin.
pg_bin_dir() {
	local d
	if have initdb; then
		d=$(dirname "$(command -v initdb)")
		[ -x "$d/postgres" ] && return 0
	fi
	for d in /usr/lib/postgresql/*/bin; do
		[ -x "$d/initdb" ] && [ -x "$d/postgres" ] && return 0
	done
	return 1
}

is_root() { [ "$(id -u)" -eq 0 ]; }

postgres_user() { getent passwd postgres >/dev/null 2>&1; }

missing() {
	local pkgs=()
	if ! pg_bin_dir || { is_root && ! postgres_user; }; then
		pkgs+=(postgresql)
	fi
	have tmux || pkgs+=(tmux)
	have git || pkgs+=(git)
	have node || pkgs+=(nodejs)
	have npm || pkgs+=(npm)
	if $for_tests && ! have chromium && ! have chromium-browser && ! have google-chrome; then
		pkgs+=(chromium fonts-liberation)
	fi
	# jq: the set-up commands pam doctor prints use it, and a test runs them.
	$for_tests && ! have jq && pkgs+=(jq)
	# systemd-analyze checks the units pam worker/serve install write;
	# buildah builds the image of pam serve, with the host's CA bundle.
	$for_tests && ! have systemd-analyze && pkgs+=(systemd)
	$for_tests && ! have buildah && pkgs+=(buildah crun)
	$for_tests && [ ! -s /etc/ssl/certs/ca-certificates.crt ] && pkgs+=(ca-certificates)
	echo "${pkgs[@]+"${pkgs[@]}"}"
}

# agent_clis installs the pinned agent CLIs with npm ci when the
# installed tree is not the one the lockfile names: a stamp holding the
# lockfile's checksum, written after a complete install, says it is (so a
# second run costs a checksum), and each CLI must answer --version.
agent_clis() {
	local dir stamp sum c
	dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/internal/agentrig/testdata/clis"
	stamp="$dir/node_modules/.pam-lock-sha256"
	sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
	if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ] &&
		[ -x "$dir/node_modules/.bin/claude" ] && [ -x "$dir/node_modules/.bin/codex" ] && [ -x "$dir/node_modules/.bin/gemini" ]; then
		return 0
	fi
	echo "deps: installing the agent CLIs of $dir/package.json with npm ci (about 1 GB)" >&2
	rm -f "$stamp"
	(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) >&2
	for c in claude codex gemini; do
		echo "deps: $c $("$dir/node_modules/.bin/$c" --version </dev/null 2>&1 | head -n1)" >&2
		"$dir/node_modules/.bin/$c" --version </dev/null >/dev/null 2>&1 || {
			echo "deps: $dir/node_modules/.bin/$c --version fails after npm ci" >&2
			exit 1
		}
	done
	echo "$sum" >"$stamp"
}

pkgs=$(missing)
if [ -z "$pkgs" ]; then
	$for_tests && agent_clis
	exit 0
fi

if ! is_root; then
	echo "pam needs packages that are missing: $pkgs" >&2
	if have apt-get; then
		echo "install them with:" >&2
		echo "  sudo apt-get install -y $pkgs" >&2
	elif have brew; then
		echo "install them with:" >&2
		echo "  brew install $pkgs" >&2
	fi
	case " $pkgs " in
	*" postgresql "*) echo "(pam serve can instead use an existing PostgreSQL server named by PAM_DATABASE_URL)" >&2 ;;
	esac
	exit 1
fi

if ! have apt-get; then
	echo "pam needs packages that are missing: $pkgs; this is not a Debian system (no apt-get): install them with its package manager" >&2
	exit 1
fi

echo "deps: installing $pkgs" >&2
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-q -o DPkg::Lock::Timeout=300)
apt-get "${apt_opts[@]}" update >&2
# shellcheck disable=SC2086 # $pkgs is a list of package names
apt-get "${apt_opts[@]}" install -y --no-install-recommends $pkgs >&2

# The postgresql package creates the postgres user; if the package was
# already installed while the user was missing, make the user here.
if ! postgres_user; then
	echo "deps: creating the postgres system user" >&2
	group=(--user-group)
	getent group postgres >/dev/null 2>&1 && group=(--gid postgres)
	useradd --system "${group[@]}" --home-dir /var/lib/postgresql --shell /bin/bash postgres
fi

left=$(missing)
if [ -n "$left" ]; then
	echo "deps: still missing after install: $left" >&2
	exit 1
fi

$for_tests && agent_clis
exit 0
