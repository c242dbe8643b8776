#!/bin/sh
# Renders server.properties from the environment, then runs `kafkasim broker` as PID 1 (it
# handles SIGTERM itself: a controlled shutdown, as `docker stop` expects).
#
# Every variable KAFKASIM_CFG_<NAME> becomes one key: NAME lower-cased, "_" turned into ".":
#   KAFKASIM_CFG_ADVERTISED_LISTENERS=INTERNAL://broker-1:9092  ->  advertised.listeners=...
# In values, {hostname} stands for this container's host name (a scaled broker advertises
# itself by it). log.dirs defaults to /var/lib/kafkasim/logs, the volume.
# Extra arguments go to `kafkasim broker` (for example --override key=value); a command
# instead (a first argument not starting with "-") runs in its place, after the secrets step.
#
# The secured mode (compose/README.md, cluster/compose_secure.py) mounts the broker's secrets
# read-only in /run/kafkasim-secrets: 0600 files owned by the host's user, which the image's
# user kafkasim cannot read. The container then starts as root only to copy them into the
# tmpfs /run/kafkasim/secrets, owned by kafkasim and still 0600, and drops to kafkasim for
# good before anything else runs.
set -eu

mounted=/run/kafkasim-secrets
if [ "$(id -u)" = 0 ]; then
    if [ -d "$mounted" ]; then
        install -d -m 0700 -o kafkasim -g kafkasim /run/kafkasim /run/kafkasim/secrets
        for file in "$mounted"/*; do
            if [ -f "$file" ]; then
                install -m 0600 -o kafkasim -g kafkasim "$file" /run/kafkasim/secrets/
            fi
        done
    fi
    exec setpriv --reuid=kafkasim --regid=kafkasim --init-groups \
        env HOME=/var/lib/kafkasim "$0" "$@"
fi

case ${1:-} in
    '' | -*) ;;
    *) exec "$@" ;;
esac

config=${KAFKASIM_CONFIG:-/etc/kafkasim/server.properties}
host=${HOSTNAME:-$(cat /etc/hostname)}

env | LC_ALL=C sort | while IFS='=' read -r name value; do
    case $name in
        KAFKASIM_CFG_*) ;;
        *) continue ;;
    esac
    key=$(printf '%s' "${name#KAFKASIM_CFG_}" | tr 'A-Z_' 'a-z.')
    case $value in
        *'{hostname}'*) value=$(printf '%s' "$value" | sed "s/{hostname}/$host/g") ;;
    esac
    printf '%s=%s\n' "$key" "$value"
done >"$config.new"
grep -q '^log\.dirs=' "$config.new" || echo 'log.dirs=/var/lib/kafkasim/logs' >>"$config.new"
mv "$config.new" "$config"

echo "kafkasim-entrypoint: $config:" >&2
sed 's/^/    /' "$config" >&2
exec kafkasim ${KAFKASIM_LOG_FLAGS--v} broker --config "$config" "$@"
