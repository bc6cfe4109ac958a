#!/bin/sh
# One-shot: create Temporal's two PostgreSQL databases and bring their schemas
# up to the version shipped in the temporalio/admin-tools image, then exit 0.
#
# Run by the `temporal-schema-setup` service of docker-compose.yml. Safe to run
# again on an existing database: `create` ignores an existing database,
# `setup-schema -v 0.0` leaves a newer schema alone, and `update-schema` only
# applies the versions that are missing.
#
# Environment (set in docker-compose.yml):
#   POSTGRES_SEEDS   host of the PostgreSQL server        (default: postgres)
#   DB_PORT          its port                              (default: 5432)
#   POSTGRES_USER    user                                  (default: temporal)
#   SQL_PASSWORD     password, read by temporal-sql-tool itself
#   DBNAME           main database                         (default: temporal)
#   VISIBILITY_DBNAME visibility database                  (default: temporal_visibility)
set -eu

host="${POSTGRES_SEEDS:-postgres}"
port="${DB_PORT:-5432}"
user="${POSTGRES_USER:-temporal}"
main_db="${DBNAME:-temporal}"
visibility_db="${VISIBILITY_DBNAME:-temporal_visibility}"
schema_root="${SCHEMA_ROOT:-/etc/temporal/schema/postgresql/v12}"

sql_tool() {
    temporal-sql-tool --plugin postgres12 --ep "$host" -p "$port" -u "$user" "$@"
}

# The compose healthcheck already waited for pg_isready; still, give a server
# that is restarting a little time before failing the whole stack.
if command -v nc >/dev/null 2>&1; then
    tries=0
    until nc -z "$host" "$port" 2>/dev/null; do
        tries=$((tries + 1))
        if [ "$tries" -ge 30 ]; then
            echo "PostgreSQL at $host:$port is not reachable" >&2
            exit 1
        fi
        sleep 2
    done
fi

for pair in "$main_db:temporal" "$visibility_db:visibility"; do
    db="${pair%%:*}"
    dir="${pair#*:}"
    echo "Setting up database '$db' from $schema_root/$dir/versioned"
    sql_tool --db "$db" create
    sql_tool --db "$db" setup-schema -v 0.0
    sql_tool --db "$db" update-schema -d "$schema_root/$dir/versioned"
done

echo "Temporal schema setup complete"
