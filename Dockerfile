# taskgate gateway image: slim, non-root, health-checked on /readyz.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    TASKGATE_HOST=0.0.0.0 TASKGATE_PORT=8080

RUN useradd --create-home --uid 10001 taskgate
WORKDIR /srv/taskgate
COPY pyproject.toml README.md ./
COPY app ./app
COPY migrations ./migrations
COPY docs ./docs
RUN pip install . && rm -rf /root/.cache

USER taskgate
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/readyz', timeout=3).status != 200)"]
CMD ["taskgate", "serve"]
