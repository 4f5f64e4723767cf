# The demo image: the project installed from this checkout, nothing else.
# Built by docker-compose.yml; also usable alone:
#   docker build -t redis-agent-sessions . && docker run --rm -e REDIS_URL=redis://host:6379/0 redis-agent-sessions
FROM python:3.12-slim

WORKDIR /app
# Only what the build needs: a stray local .venv or cache must not end up in the image.
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir ".[hiredis]"

# No redis-server in the image on purpose: the demo is meant to run against REDIS_URL.
ENTRYPOINT ["redis-agent-sessions"]
CMD ["demo"]
