# The Baton project image: what the TFJob replicas (`baton task`), the data Job and the release
# Job (`baton run --only ...`) run. Serving uses the official tensorflow/serving image instead.
#
#   docker build -t registry.example.com/ml/baton:0.1.0 .
#   baton k8s --out manifests --image registry.example.com/ml/baton:0.1.0
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md* ./
COPY baton ./baton
COPY pipeline ./pipeline
COPY graphs ./graphs
COPY strategies ./strategies
COPY serving ./serving
COPY k8s ./k8s
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 TF_CPP_MIN_LOG_LEVEL=1
COPY --from=build /install /usr/local
# uid/gid 10001 matches the pods' securityContext (runAsUser/fsGroup), so /artifacts is writable;
# a uid above 10000 is no host user's (a container escaping its user namespace is nobody there).
RUN groupadd --gid 10001 baton && useradd --uid 10001 --gid 10001 --create-home baton \
    && mkdir -p /artifacts && chown baton:baton /artifacts
USER 10001:10001
WORKDIR /home/baton
# `sh` stays available (python:slim has it): the pods' wait-for-inputs init container uses it.
EXPOSE 2222
CMD ["baton", "--help"]
