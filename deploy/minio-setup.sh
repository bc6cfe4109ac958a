#!/bin/sh
# One-shot: create the payload bucket of mcp-tasks in MinIO (private) and its
# lifecycle rule. Safe to run again.
#
# Run by the `minio-setup` service of docker-compose.yml (image minio/mc).
#
# Retention: a stored payload must outlive every history that holds its claim.
# A history lives while its task runs and NAMESPACE_RETENTION after it closes,
# so PAYLOAD_EXPIRE_DAYS must be at least the longest a task may run plus that
# retention. Objects are content-addressed and written once; a rule by age is
# therefore safe only with that margin.
#
# Environment:
#   MINIO_URL            http://host:port of MinIO        (default: http://minio:9000)
#   MINIO_USER           access key                        (required)
#   MINIO_PASSWORD       secret key                        (required)
#   MCP_TASKS_BUCKET     the bucket                        (default: mcp-tasks)
#   PAYLOAD_EXPIRE_DAYS  lifecycle expiry, in days         (default: 30)
set -eu

url="${MINIO_URL:-http://minio:9000}"
bucket="${MCP_TASKS_BUCKET:-mcp-tasks}"
days="${PAYLOAD_EXPIRE_DAYS:-30}"

tries=0
until mc alias set store "$url" "$MINIO_USER" "$MINIO_PASSWORD" >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -ge 60 ]; then
        echo "minio-setup: MinIO at $url did not answer" >&2
        exit 1
    fi
    sleep 2
done

mc mb --ignore-existing "store/$bucket"
mc anonymous set none "store/$bucket"
if ! mc ilm rule ls "store/$bucket" 2>/dev/null | grep -q "$days"; then
    mc ilm rule add --expire-days "$days" "store/$bucket"
fi
echo "minio-setup: bucket $bucket ready, objects expire after $days days"
