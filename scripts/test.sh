#!/usr/bin/env bash
# The whole test suite, as CI runs it: `./scripts/test.sh`.
#
# The Redis tests start their own redis-server on a free loopback port, so the
# only thing this script provides is the binary: it installs Debian's
# `redis-server` package when the command is missing, and fails loudly when it
# cannot (the Redis tests are never skipped).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*" >&2; }

# How the steps below act as root: directly, through sudo, or not at all.
if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; else sudo="none"; fi

# /dev/null must be the null device. Where it has become a regular file (a
# process that removed it and a later `>/dev/null` that created it), every
# redirect to it appends there and every read of it returns that text: cargo
# runs rustc with stdin from /dev/null and fails at once with a syntax
# error about a shell message. Put the device back, or stop and say why.
if [ ! -c /dev/null ]; then
  step "/dev/null is not the null device; recreating it"
  if [ "$sudo" = "none" ] || ! $sudo sh -c 'rm -f /dev/null && mknod -m 666 /dev/null c 1 3'; then
    echo "error: /dev/null is a regular file, and recreating it needs root or sudo:" >&2
    echo "       rm -f /dev/null && mknod -m 666 /dev/null c 1 3" >&2
    exit 1
  fi
fi

# What the tests need from Debian's packages: `need WHAT CHECK PACKAGE...`
# installs the packages when the shell test CHECK fails, and stops, saying
# WHAT is missing, when it cannot install them or CHECK still fails after.
# The package lists are fetched once, by the first install.
updated=""
need() {
  local what="$1" check="$2"
  shift 2
  if eval "$check" >/dev/null 2>&1; then return 0; fi
  step "$what not found; installing Debian's packages: $*"
  if [ "$sudo" = "none" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "error: $what is required by the test suite and could not be installed" >&2
    echo "       (need apt-get and root or sudo). Install Debian's $* and re-run." >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "$updated" ]; then $sudo apt-get update -qq; updated=1; fi
  $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  if ! eval "$check" >/dev/null 2>&1; then
    echo "error: $what is still missing after the install step" >&2
    exit 1
  fi
}

need "redis-server (Redis >= 6.2)" 'command -v redis-server' redis-server
step "using $(redis-server --version)"

# The Postgres tests start throwaway clusters with Debian's postgresql
# package (initdb and postgres under /usr/lib/postgresql/*/bin).
need "Postgres" 'ls /usr/lib/postgresql/*/bin/postgres' postgresql

# The Sentinel tests run real Sentinels: Debian's redis-sentinel package.
need "redis-sentinel" 'command -v redis-sentinel' redis-sentinel

# The REST tests run the official @upstash/redis client and the
# @humanwhocodes/upstash-redis-server emulator under Node (installed by the
# tests from npm into a cache folder); they fail when CI is set and node is
# missing.
need "node and npm (for the REST tests)" 'command -v node && command -v npm' nodejs npm
step "using node $(node --version), npm $(npm --version)"

# The `a2 serve` tests run examples/worker.py under python3 and install
# schemathesis from PyPI into a virtual environment (python3 -m venv); they
# fail when CI is set and either is missing.
need "python3 with venv (for the a2 serve tests)" \
  "python3 -c 'import venv, ensurepip'" python3 python3-venv
step "using $(python3 --version)"

# The inspector's browser test drives Debian's headless Chromium through
# chromedriver; it fails when CI is set and they are missing.
need "chromium and chromedriver (for the inspector's browser test)" \
  'command -v chromium && command -v chromedriver' chromium chromium-driver
step "using $(chromium --version 2>/dev/null | head -1)"

step "using $(rustc --version), $(cargo --version)"

# Disk: a cold build of every test binary takes about 1.5 GiB (see
# Cargo.toml). Incremental caches only help a rebuild, and a CI
# checkout is built once, so CI goes without them.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"; fi
target_dir="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target_dir"
free_kib=$(df -Pk "$target_dir" | awk 'NR == 2 { print $4 }')
step "$((free_kib / 1048576)) GiB free where the build goes ($target_dir)"
if [ "$free_kib" -lt $((4 * 1048576)) ]; then
  echo "warning: less than 4 GiB free for the build; a cold test build takes about 1.5 GiB" >&2
fi
# Style and docs first: they fail in seconds where the tests take minutes.
step "cargo fmt --all -- --check"
cargo fmt --all -- --check
step "cargo clippy --workspace --all-targets --all-features -- -D warnings"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
step "cargo doc --workspace --no-deps --all-features (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --locked

# This includes crates/a2-bench/tests/quick.rs, which runs the benchmark's
# smoke mode (`a2-bench --quick`) so the benchmark never rots.
step "cargo test --workspace"
cargo test --workspace --locked
step "$(du -sh "$target_dir" | cut -f1) in $target_dir after the tests"
