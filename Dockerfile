# Image for both the mcp-tasks worker (default) and the demo MCP server:
#   docker build -t mcp-temporal-tasks .
#   docker run mcp-temporal-tasks worker --config /etc/mcp-tasks/worker.toml
#   docker run -p 8000:8000 mcp-temporal-tasks demo-server --host 0.0.0.0 --port 8000
# Pinned to a patch release: a floating tag changes the image under the same Dockerfile.
FROM python:3.11.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Unprivileged user with a fixed uid, so bind mounts and Kubernetes
# runAsNonRoot/runAsUser work without guessing.
RUN groupadd --system --gid 10001 mcp \
 && useradd --system --uid 10001 --gid mcp --home-dir /home/mcp --create-home \
        --shell /usr/sbin/nologin mcp \
 && mkdir -p /etc/mcp-tasks /var/lib/mcp-tasks \
 && chown mcp:mcp /var/lib/mcp-tasks

# Install the package only (no dev/test extras); the source tree is not kept.
# .dockerignore keeps .git, tests and deploy/ out of the build context.
# EXTRAS: empty for a worker image; "demo" for the image that runs the bundled demo MCP server.
ARG EXTRAS=""
WORKDIR /tmp/src
COPY . .
RUN pip install ".${EXTRAS:+[$EXTRAS]}" \
 && rm -rf /tmp/src

# Large results are written here; docker-compose.yml mounts a named volume on
# it. A fresh named volume copies this directory's owner, so mcp can write.
ENV MCP_TASKS_STATE_DIR=/var/lib/mcp-tasks

USER 10001:10001
WORKDIR /home/mcp

# 8000: demo-server (streamable HTTP at /mcp); 9464: worker Prometheus metrics.
EXPOSE 8000 9464

ENTRYPOINT ["mcp-tasks"]
CMD ["worker"]
