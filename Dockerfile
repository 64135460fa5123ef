# The runner with every toolchain of deps/apt.txt: what a MicroVM runs (the microvm
# backend), and, with another command, the service beside it under Docker Compose
# (compose.yaml). Build it with `make image`, which bootstraps the Debian base from
# Debian's packages where no registry can be reached (BASE=codeexec/debian:bookworm).
ARG BASE=debian:bookworm-slim
FROM ${BASE}
ARG ESBUILD_VERSION=0.28.0
ENV DEBIAN_FRONTEND=noninteractive
COPY deps/apt.txt /tmp/apt.txt
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends $(grep -hv '^#' /tmp/apt.txt) nodejs npm \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /tmp/apt.txt
# Certificate authorities the build host trusts beyond Debian's (a proxy's, say): `make
# image` puts them here, so npm and pip reach their registries from behind it too.
COPY docker/ca-certificates/ /usr/local/share/ca-certificates/
RUN update-ca-certificates >/dev/null \
 && NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt \
    npm install -g --prefix /usr/local --no-audit --no-fund --loglevel=error esbuild@${ESBUILD_VERSION} \
 && rm -rf /root/.npm
COPY lib /src/lib
RUN python3 -m venv /opt/codeexec \
 && PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    /opt/codeexec/bin/pip install -q --no-cache-dir "/src/lib[server,agentcore,runner]" \
 && rm -rf /src \
 && /opt/codeexec/bin/python -c "from codeexec.sandbox.local import fonts; fonts.build()"
# The runner listens on the MicroVM endpoint's default port; its sessions live in a volume.
# One run made ahead of each kind: a MicroVM serves one session, one run at a time.
ENV PATH=/opt/codeexec/bin:$PATH RUNNER_HOST=0.0.0.0 RUNNER_PORT=8080 SANDBOX_ROOT=/var/lib/codeexec \
    WARM_PYTHON=1 WARM_SANDBOXES=1
VOLUME /var/lib/codeexec
EXPOSE 8080
CMD ["python", "-m", "codeexec.runner"]
