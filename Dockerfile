# rtr-serve as a container: `docker build -t rtr-serve .` (the compose file builds it too).
# Serves the JSON export(s) given with --source; mount them read-only, e.g. -v ./examples:/data:ro.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /build
COPY pyproject.toml README.md ./
COPY rtr_server ./rtr_server
COPY upstream ./upstream
COPY snapshot ./snapshot
COPY persistence ./persistence
RUN pip install . \
    && cd / && rm -rf /build \
    && useradd --system --no-create-home --shell /usr/sbin/nologin rtr

WORKDIR /
USER rtr
# RTR has IANA port 323; an unprivileged port inside the container avoids needing root.
EXPOSE 8323
ENTRYPOINT ["rtr-serve"]
CMD ["--source", "/data/rpki-client-example.json", "--listen", "0.0.0.0:8323"]
