#!/bin/sh
# Renders server.properties from the environment, then runs `kafkasim broker` as PID 1 (it
# handles SIGTERM itself: a controlled shutdown, as `docker stop` expects).
#
# Every variable KAFKASIM_CFG_<NAME> becomes one key: NAME lower-cased, "_" turned into ".":
#   KAFKASIM_CFG_ADVERTISED_LISTENERS=INTERNAL://broker-1:9092  ->  advertised.listeners=...
# In values, {hostname} stands for this container's host name (a scaled broker advertises
# itself by it). log.dirs defaults to /var/lib/kafkasim/logs, the volume.
# Extra arguments go to `kafkasim broker` (for example --override key=value).
set -eu

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
