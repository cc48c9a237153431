# One image for the console (web, celery worker, celery beat) and the node agent.

# The workers' fence wrapper (agents/node/fence): a small static C program, built here so the
# image needs no compiler.
FROM python:3.12-slim AS fence
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
COPY agents/node/fence/fencewrap.c /out/
RUN gcc -static -Os -s -o /out/fencewrap /out/fencewrap.c \
 && sha256sum /out/fencewrap.c | cut -d' ' -f1 > /out/fencewrap.sha256 && rm /out/fencewrap.c

FROM python:3.12-slim AS base
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
RUN useradd --create-home --uid 10001 console
COPY pyproject.toml README.md ./
COPY console ./console
COPY quotas ./quotas
COPY jobs ./jobs
COPY agents ./agents
COPY templates ./templates
COPY static ./static
COPY manage.py ./
COPY --from=fence /out/ /tmp/fence/
RUN pip install . \
 && cp /tmp/fence/* "$(python -c 'import agents.node.fence as f; print(f.PACKAGED.parent)')/" \
 && CONSOLE_ENV=production SECRET_KEY=build-only ALLOWED_HOSTS=build \
    python manage.py collectstatic --noinput
ENV CONSOLE_ENV=production CONSOLE_VAR_DIR=/app/var
USER console
EXPOSE 8000
CMD ["gunicorn", "console.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "4", "--threads", "4", "--access-logfile", "-"]
