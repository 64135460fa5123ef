# The runner with every toolchain of deps/apt.txt and the sandbox's environment: what a
# MicroVM runs (the microvm backend), and, with another command, the service beside it
# under Docker Compose (compose.yaml). Build it with `make image`, which bootstraps the
# Debian base from Debian's packages where no registry can be reached
# (BASE=codeexec/debian:bookworm).
ARG BASE=debian:bookworm-slim
FROM ${BASE}
ARG ESBUILD_VERSION=0.28.0
ENV DEBIAN_FRONTEND=noninteractive
# Certificate authorities the build host trusts beyond Debian's (a proxy's, say): `make
# image` puts them here, before Debian's ca-certificates installs (and bundles them), so npm
# and pip reach their registries from behind it too.
COPY docker/ca-certificates/ /usr/local/share/ca-certificates/
ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    UV_SYSTEM_CERTS=1
# Debian's packages as `make install` installs them: deps/apt.txt, LibreOffice from
# bookworm-backports (the script adds that source), and Node.js of deps/node/node-version.
COPY deps/install-apt.sh deps/apt.txt deps/apt-backports.txt /tmp/deps/
COPY deps/node/node-version /tmp/deps/node/
RUN /tmp/deps/install-apt.sh \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /tmp/deps
RUN update-ca-certificates >/dev/null \
 && npm install -g --prefix /usr/local --no-audit --no-fund --loglevel=error esbuild@${ESBUILD_VERSION} \
 && rm -rf /root/.npm
# The sandbox's environment from the locks (/opt/sandbox), by the script `make install` runs,
# with the uv that requirements-dev.txt pins.
COPY requirements-dev.txt /tmp/
COPY deps/ /tmp/deps/
RUN python3 -m venv /tmp/uv \
 && /tmp/uv/bin/pip install -q --no-cache-dir "$(grep -o '^uv==[^ ]*' /tmp/requirements-dev.txt)" \
 && UV=/tmp/uv/bin/uv UV_NO_CACHE=1 /tmp/deps/environment.sh python /opt/sandbox \
 && /tmp/deps/environment.sh nltk /opt/sandbox \
 && /tmp/deps/environment.sh node /opt/sandbox \
 && /tmp/deps/environment.sh tools /opt/sandbox \
 && rm -rf /tmp/uv /tmp/deps /tmp/requirements-dev.txt /root/.npm /root/.cache
COPY lib /src/lib
RUN python3 -m venv /opt/codeexec \
 && /opt/codeexec/bin/pip install -q --no-cache-dir "/src/lib[server,agentcore,runner]" \
 && rm -rf /src \
 && /opt/codeexec/bin/python -c "from codeexec.sandbox.local import fonts; fonts.build()"
# The runner listens on the MicroVM endpoint's default port; its sessions live in a volume.
# One run made ahead of each kind: a MicroVM serves one session, one run at a time.
ENV PATH=/opt/codeexec/bin:$PATH RUNNER_HOST=0.0.0.0 RUNNER_PORT=8080 SANDBOX_ROOT=/var/lib/codeexec \
    WARM_PYTHON=1 WARM_SANDBOXES=1 WARM_SCIENTIFIC=1
VOLUME /var/lib/codeexec
EXPOSE 8080
COPY docker/entrypoint.sh /usr/local/bin/codeexec-entrypoint
ENTRYPOINT ["codeexec-entrypoint"]
CMD ["python", "-m", "codeexec.runner"]
