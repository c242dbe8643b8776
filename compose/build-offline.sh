#!/usr/bin/env bash
# Build kafkasim's container images without a container registry:
#
#   compose/build-offline.sh      build what is missing or out of date (idempotent)
#
# 1. Two base images, each a Debian bookworm root filesystem made with debootstrap
#    (--variant=minbase) and imported with `docker import`:
#      kafkasim-base-python     python3.11 and its venv module (the brokers)
#      kafkasim-base-zookeeper  Debian's ZooKeeper jars and a headless JRE (no Python)
#    Two bases rather than one: the broker image then carries no JRE and the ZooKeeper image
#    no Python, and under the vfs storage driver every container copies its whole image.
# 2. A wheelhouse made on the host with pip: kafkasim's pinned dependencies (from
#    pyproject.toml) and kafkasim's own wheel.
# 3. The images, built from compose/*.Dockerfile with `docker build --network none`:
#    kafkasim-broker-deps (the python base + the dependencies, `pip --no-index` from the
#    wheelhouse), kafkasim-broker on top of it (+ kafkasim's wheel, the entrypoint), and
#    kafkasim-zookeeper on the zookeeper base.
#
# Caching (under $KAFKASIM_COMPOSE_CACHE, default /var/cache/kafkasim/compose, outside the
# clone so that a fresh clone reuses it): a root filesystem tarball and its imported image are
# keyed by a hash of their recipe (suite, variant, packages, the clean-up steps); the
# dependency wheels by a hash of pyproject.toml; kafkasim's wheel by a hash of its sources;
# every image tag by a hash of all its inputs (a source change rebuilds only the top layer). Each image is also tagged :latest, which
# compose/docker-compose.yml runs. With nothing changed a run only inspects tags.
#
# Needs: root (debootstrap), a Docker engine, debootstrap, and Python 3.11 with pip on the
# host (the repository's .venv when there is one). Debian: apt-get install debootstrap docker.io
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
CACHE=${KAFKASIM_COMPOSE_CACHE:-/var/cache/kafkasim/compose}
DOCKER=${DOCKER:-docker}
SUITE=bookworm
# Packages of each base; debootstrap adds their dependencies (not their recommendations).
PYTHON_PACKAGES=python3,python3-venv
ZOOKEEPER_PACKAGES=libzookeeper-java,default-jre-headless
# kafkasim's importable packages (as [tool.setuptools.packages.find] lists them: kafkasim/ and
# the folders its links point to, read from the links so that a new package cannot be left out)
# and other files of its wheel: what the source hash covers.
SOURCE_FILES=(pyproject.toml setup.py README.md)
mapfile -t LINKED < <(cd "$REPO/kafkasim" && find . -maxdepth 1 -type l -printf '%f\n' | sort)
SOURCE_DIRS=(kafkasim "${LINKED[@]}")

say() { printf 'build-offline: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

sha() { sha256sum | cut -c1-16; }

image_exists() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }

host_python() {
    if [ -x "$REPO/.venv/bin/python" ]; then
        echo "$REPO/.venv/bin/python"
    else
        command -v python3.11 || die "Python 3.11 not found on the host (apt-get install python3.11 python3-pip)"
    fi
}

# -- 1. base images ----------------------------------------------------------------------------

# Everything that shapes a root filesystem, as text: its hash names the tarball and the image.
base_recipe() {
    local packages=$1
    printf 'suite=%s\nvariant=minbase\ninclude=%s\n' "$SUITE" "$packages"
    declare -f clean_rootfs
}

clean_rootfs() {
    local root=$1
    # Package caches, lists and documentation: nothing in the images reads them.
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
        "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
        "$root"/var/log/*.log "$root"/var/cache/debconf/*-old
}

ensure_base() {
    local name=$1 packages=$2 key tag tarball work
    key=$(base_recipe "$packages" | sha)
    tag="kafkasim-base-$name:$key"
    tarball="$CACHE/rootfs/$name-$key.tar"
    if image_exists "$tag"; then
        echo "$tag"
        return
    fi
    if [ ! -f "$tarball" ]; then
        [ "$(id -u)" = 0 ] || die "debootstrap needs root: run as root to build the $name base"
        command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install debootstrap)"
        mkdir -p "$CACHE/rootfs" "$CACHE/debs"
        work=$(mktemp -d "$CACHE/rootfs/$name.XXXXXX")
        say "debootstrap $SUITE ($packages) into $work: a few minutes the first time"
        local began=$SECONDS
        # --cache-dir keeps the downloaded packages for the next recipe change.
        if ! debootstrap --variant=minbase --include="$packages" --cache-dir="$CACHE/debs" \
            "$SUITE" "$work/root" >"$work/debootstrap.log" 2>&1; then
            tail -20 "$work/debootstrap.log" >&2
            rm -rf "$work"
            die "debootstrap failed for the $name base (log above)"
        fi
        clean_rootfs "$work/root"
        tar --numeric-owner -C "$work/root" -cf "$work/rootfs.tar" .
        mv "$work/rootfs.tar" "$tarball"
        rm -rf "$work"
        say "$name root filesystem: $(du -h "$tarball" | cut -f1) in $((SECONDS - began)) s"
    fi
    say "importing $tarball as $tag"
    "$DOCKER" import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' \
        "$tarball" "$tag" >/dev/null
    echo "$tag"
}

# -- 2. wheels ---------------------------------------------------------------------------------

source_hash() {
    (
        cd "$REPO"
        find "${SOURCE_DIRS[@]}" -type f -not -path '*/__pycache__/*' -not -name '*.pyc' -print0 \
            | sort -z | xargs -0 sha256sum
        sha256sum "${SOURCE_FILES[@]}"
    ) | sha
}

# Prints the wheelhouse directory: the dependency wheels plus kafkasim's own wheel.
ensure_wheels() {
    local python deps_key src_key deps_dir own_dir tmp
    python=$(host_python)
    deps_key=$(sha <"$REPO/pyproject.toml")
    src_key=$(source_hash)
    deps_dir="$CACHE/wheels/deps-$deps_key"
    own_dir="$CACHE/wheels/kafkasim-$src_key"
    if [ ! -d "$deps_dir" ]; then
        mkdir -p "$CACHE/wheels"
        tmp=$(mktemp -d "$CACHE/wheels/deps.XXXXXX")
        say "pip wheel: kafkasim's dependencies into $deps_dir"
        # shellcheck disable=SC2046 # one argument per requirement
        if ! "$python" -m pip wheel --wheel-dir "$tmp/out" $("$python" - "$REPO/pyproject.toml" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print(" ".join(tomllib.load(f)["project"]["dependencies"]))
EOF
        ) >"$tmp/pip.log" 2>&1; then
            tail -20 "$tmp/pip.log" >&2
            rm -rf "$tmp"
            die "pip wheel of the dependencies failed (log above)"
        fi
        mv "$tmp/out" "$deps_dir"
        rm -rf "$tmp"
    fi
    if [ ! -d "$own_dir" ]; then
        mkdir -p "$CACHE/wheels"
        tmp=$(mktemp -d "$CACHE/wheels/kafkasim.XXXXXX")
        say "pip wheel: kafkasim itself into $own_dir"
        # A copy of the sources: building in the clone would leave build/ behind in it.
        mkdir "$tmp/src"
        (cd "$REPO" && cp -r --parents "${SOURCE_FILES[@]}" "${SOURCE_DIRS[@]}" "$tmp/src/")
        find "$tmp/src" -name __pycache__ -prune -exec rm -rf {} +
        if ! "$python" -m pip wheel --no-deps --wheel-dir "$tmp/out" "$tmp/src" \
            >"$tmp/pip.log" 2>&1; then
            tail -20 "$tmp/pip.log" >&2
            rm -rf "$tmp"
            die "pip wheel of kafkasim failed (log above)"
        fi
        mkdir "$own_dir.new"
        mv "$tmp"/out/*.whl "$own_dir.new/"
        rm -rf "$tmp"
        mv "$own_dir.new" "$own_dir"
    fi
    printf '%s\n%s\n' "$deps_dir" "$own_dir"
}

# -- 3. images ---------------------------------------------------------------------------------

# build_image NAME BASE_TAG INPUT_KEY [WHEEL_DIR ...]
build_image() {
    local name=$1 base=$2 key=$3 tag stage
    shift 3
    tag="kafkasim-$name:$key"
    if ! image_exists "$tag"; then
        stage=$(mktemp -d)
        # A staged context with exactly what the Dockerfile copies (the clone's .venv and
        # caches never reach the engine).
        mkdir -p "$stage/compose"
        cp "$HERE/$name.Dockerfile" "$stage/compose/"
        if [ -f "$HERE/$name-entrypoint.sh" ]; then cp "$HERE/$name-entrypoint.sh" "$stage/compose/"; fi
        if [ $# -gt 0 ]; then
            mkdir "$stage/wheelhouse"
            for dir in "$@"; do cp "$dir"/*.whl "$stage/wheelhouse/"; done
        fi
        say "docker build $tag (base $base)"
        local began=$SECONDS
        if ! DOCKER_BUILDKIT=0 "$DOCKER" build --quiet --network none \
            --build-arg "BASE_IMAGE=$base" -f "$stage/compose/$name.Dockerfile" \
            -t "$tag" "$stage" >/dev/null 2>"$stage/build.err"; then
            cat "$stage/build.err" >&2
            rm -rf "$stage"
            die "docker build of $tag failed"
        fi
        rm -rf "$stage"
        say "built $tag in $((SECONDS - began)) s"
    fi
    "$DOCKER" tag "$tag" "kafkasim-$name:latest"
    # Older builds of this image only take disk (a full copy per layer under vfs).
    local old
    for old in $("$DOCKER" images "kafkasim-$name" --format '{{.Tag}}'); do
        case $old in latest | "$key") ;; *) "$DOCKER" rmi "kafkasim-$name:$old" >/dev/null 2>&1 || true ;; esac
    done
    echo "$tag"
}

main() {
    local python_base zookeeper_base wheels deps_key deps_image broker_key zookeeper_key
    "$DOCKER" version --format '{{.Server.Version}}' >/dev/null 2>&1 \
        || die "no Docker engine answers (start one: compose/engine.sh start)"
    mkdir -p "$CACHE"
    local began=$SECONDS
    python_base=$(ensure_base python "$PYTHON_PACKAGES")
    zookeeper_base=$(ensure_base zookeeper "$ZOOKEEPER_PACKAGES")
    mapfile -t wheels < <(ensure_wheels)
    broker_key=$( (
        echo "$python_base"
        cat "$HERE/broker-deps.Dockerfile"
        ls "${wheels[@]}"
        cat "$HERE/broker.Dockerfile" "$HERE/broker-entrypoint.sh"
    ) | sha)
    zookeeper_key=$( (
        echo "$zookeeper_base"
        cat "$HERE/zookeeper.Dockerfile" "$HERE/zookeeper-entrypoint.sh"
    ) | sha)
    # The dependencies in an image of their own (keyed by their wheels): a change to
    # kafkasim's sources then rebuilds only the broker image's small top layer.
    deps_key=$( (
        echo "$python_base"
        ls "${wheels[0]}"
        cat "$HERE/broker-deps.Dockerfile"
    ) | sha)
    deps_image=$(build_image broker-deps "$python_base" "$deps_key" "${wheels[0]}")
    build_image broker "$deps_image" "$broker_key" "${wheels[1]}" >/dev/null
    build_image zookeeper "$zookeeper_base" "$zookeeper_key" >/dev/null
    say "images ready in $((SECONDS - began)) s: kafkasim-broker:$broker_key" \
        "kafkasim-zookeeper:$zookeeper_key (both also :latest)"
}

main "$@"
