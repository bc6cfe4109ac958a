#!/bin/sh
# One-shot: wait for the Temporal frontend, create the namespace if it is
# missing, and register the custom search attributes this project upserts.
# Exits 0 when everything exists with the right type; safe to run again.
#
# Run by the `temporal-namespace-setup` service of docker-compose.yml (image
# temporalio/admin-tools, which ships the `temporal` CLI). The worker also
# registers missing search attributes when it starts; doing it here as well
# means the UI's saved views and `temporal workflow list --query ...` work
# before the first worker has come up.
#
# Environment:
#   TEMPORAL_ADDRESS         host:port of the frontend          (default: temporal:7233)
#   TEMPORAL_NAMESPACE       namespace to create                 (default: default)
#   NAMESPACE_RETENTION      retention of closed workflows       (default: 72h)
#   MCP_SEARCH_ATTRIBUTES    space-separated NAME=TYPE pairs     (required)
#   SETUP_TIMEOUT_SECONDS    how long to wait for the server     (default: 180)
set -eu

address="${TEMPORAL_ADDRESS:-temporal:7233}"
namespace="${TEMPORAL_NAMESPACE:-default}"
retention="${NAMESPACE_RETENTION:-72h}"
timeout="${SETUP_TIMEOUT_SECONDS:-180}"
attributes="${MCP_SEARCH_ATTRIBUTES:?set MCP_SEARCH_ATTRIBUTES to NAME=TYPE pairs}"

# Dial an IPv4 address: inside compose a service name may also resolve to an
# IPv6 address the frontend does not listen on (it binds 0.0.0.0).
host="${address%:*}"
port="${address##*:}"
if command -v getent >/dev/null 2>&1; then
    ipv4="$(getent ahostsv4 "$host" 2>/dev/null | awk 'NR == 1 { print $1 }')" || ipv4=""
    if [ -n "$ipv4" ]; then
        address="$ipv4:$port"
    fi
fi

cli() {
    temporal "$@" --address "$address"
}

# Retry a command every 2 s until it succeeds or the deadline passes.
deadline=$(( $(date +%s) + timeout ))
retry() {
    until "$@"; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            echo "gave up after ${timeout}s: $*" >&2
            return 1
        fi
        sleep 2
    done
}

echo "Waiting for the Temporal frontend at $address"
retry cli operator cluster health >/dev/null

if cli operator namespace describe --namespace "$namespace" >/dev/null 2>&1; then
    echo "Namespace '$namespace' already exists"
else
    echo "Creating namespace '$namespace' (retention $retention)"
    retry cli operator namespace create --namespace "$namespace" --retention "$retention"
fi

# A fresh namespace takes a few seconds to reach every frontend's cache.
retry cli operator search-attribute list --namespace "$namespace" >/dev/null 2>&1

existing_type() {
    # Prints the type of search attribute $1, or nothing if it is not registered.
    cli operator search-attribute list --namespace "$namespace" \
        | awk -v name="$1" '$1 == name { print $2 }'
}

for pair in $attributes; do
    name="${pair%%=*}"
    type="${pair#*=}"
    if [ -z "$name" ] || [ "$name" = "$pair" ] || [ -z "$type" ]; then
        echo "bad entry '$pair' in MCP_SEARCH_ATTRIBUTES (want NAME=TYPE)" >&2
        exit 1
    fi
    current="$(existing_type "$name")"
    if [ -z "$current" ]; then
        echo "Registering search attribute $name ($type)"
        retry cli operator search-attribute create --namespace "$namespace" \
            --name "$name" --type "$type"
    elif [ "$current" = "$type" ]; then
        echo "Search attribute $name ($type) already registered"
    else
        echo "Search attribute $name is registered as $current, expected $type" >&2
        exit 1
    fi
done

echo "Namespace '$namespace' is ready"
