# Images of the production stack (docker-compose.yml), all from one Debian base:
#   console   web (gunicorn), Celery worker and beat, the migrate step, and the node agent
#   postgres  PostgreSQL from Debian, initialised on first start (deploy/postgres/entrypoint)
#   redis     Redis from Debian (the Celery broker; triggers only, nothing persisted)
#   caddy     Caddy from Debian: TLS in front of web (deploy/Caddyfile)
# BASE_IMAGE is any Debian trixie image: debian:trixie-slim from a registry, or one made
# locally from Debian packages (deploy/base-image, what `make test-deploy` uses).
ARG BASE_IMAGE=docker.io/library/debian:trixie-slim

# The workers' fence wrapper (agents/node/fence): a small static C program, built here so the
# runtime image needs no compiler.
FROM ${BASE_IMAGE} AS fence
COPY deploy/apt-install /usr/local/sbin/apt-install
RUN apt-install gcc libc6-dev
COPY agents/node/fence/fencewrap.c /out/
RUN gcc -static -Os -s -o /out/fencewrap /out/fencewrap.c \
 && sha256sum /out/fencewrap.c | cut -d' ' -f1 > /out/fencewrap.sha256 && rm /out/fencewrap.c

FROM ${BASE_IMAGE} AS console
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH
COPY deploy/apt-install /usr/local/sbin/apt-install
RUN apt-install python3 python3-venv ca-certificates \
 && python3 -m venv /opt/venv \
 && useradd --system --create-home --uid 10001 console
WORKDIR /app
# Dependencies first: this layer is rebuilt only when pyproject.toml changes.
COPY pyproject.toml ./
RUN python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" >/tmp/requirements.txt \
 && pip install --quiet -r /tmp/requirements.txt && rm /tmp/requirements.txt
COPY . .
COPY --from=fence /out/ /app/agents/node/fence/
RUN CONSOLE_ENV=production SECRET_KEY=build-only-not-secret ALLOWED_HOSTS=build \
    CONSOLE_VAR_DIR=/app/var python manage.py collectstatic --noinput --verbosity 0
ENV CONSOLE_ENV=production CONSOLE_VAR_DIR=/app/var
USER console
EXPOSE 8000
CMD ["gunicorn", "--config", "deploy/gunicorn.conf.py", "console.wsgi:application"]

FROM ${BASE_IMAGE} AS postgres
COPY deploy/apt-install /usr/local/sbin/apt-install
# No cluster from the package's postinst: the entrypoint makes one in the volume.
RUN mkdir -p /etc/postgresql-common \
 && echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf \
 && apt-install postgresql \
 && ln -s "$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)" /usr/local/lib/pgbin \
 && mkdir -p /var/lib/postgresql/data /run/postgresql \
 && chown postgres:postgres /var/lib/postgresql/data /run/postgresql \
 && chmod 700 /var/lib/postgresql/data
COPY deploy/postgres/entrypoint /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/local/lib/pgbin:$PATH PGDATA=/var/lib/postgresql/data
USER postgres
# SIGINT is PostgreSQL's "fast" shutdown: clean, without waiting for clients to leave.
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["postgres-entrypoint"]

FROM ${BASE_IMAGE} AS redis
COPY deploy/apt-install /usr/local/sbin/apt-install
RUN apt-install redis-server
USER redis
EXPOSE 6379
# On the internal backend network only (docker-compose.yml); Celery messages are triggers,
# so nothing is persisted.
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no", "--dir", "/tmp"]

FROM ${BASE_IMAGE} AS caddy
COPY deploy/apt-install /usr/local/sbin/apt-install
RUN apt-install caddy ca-certificates \
 && mkdir -p /data /config && chown caddy:caddy /data /config
COPY deploy/Caddyfile /etc/caddy/Caddyfile
ENV XDG_DATA_HOME=/data XDG_CONFIG_HOME=/config
USER caddy
EXPOSE 80 443
CMD ["caddy", "run", "--config", "/etc/caddy/Caddyfile", "--adapter", "caddyfile"]
