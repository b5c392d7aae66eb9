# The product image. Three targets from one file:
#   app   — connector, gpu_stage (native CPU backend), vllm_sim, replay (python:3.11-slim)
#   gpu   — app plus cuDF for gpu_stage --backend gpu (CUDA 12 runtime from the wheels)
#   flink — Flink 2.2 with PyFlink, the Kafka/Avro connector jars in lib/ and the jobs package
# Build: docker build --target app -t llmpipe:0.1.0 .   (compose builds all three)

# ---- jars: the same Maven POM the local stack uses, so compose and `make demo` run the same jars
FROM maven:3.9.9-eclipse-temurin-17 AS jars
WORKDIR /build
COPY stack/maven/flink/pom.xml pom.xml
RUN mvn -q -B dependency:copy-dependencies -DoutputDirectory=/jars -DincludeScope=runtime

# ---- native: the compiled transform core (gpu_stage --backend cpu) as an abi3 wheel
FROM python:3.11.11-slim-bookworm AS native
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates build-essential \
    && rm -rf /var/lib/apt/lists/* \
    && curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
ENV PATH=/root/.cargo/bin:$PATH
WORKDIR /build
COPY native native
RUN sh native/patched-crates.sh && pip wheel --no-deps -w /wheels ./native

# ---- app: the Python stages, non-root
FROM python:3.11.11-slim-bookworm AS app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /opt/llmpipe
COPY pyproject.toml README.md ./
COPY llmpipe llmpipe
COPY connector connector
COPY gpu_stage gpu_stage
COPY vllm_sim vllm_sim
COPY jobs jobs
COPY stack stack
COPY bench bench
COPY replay replay
COPY demo demo
COPY --from=native /wheels /wheels
RUN pip install /wheels/*.whl . && useradd --uid 10001 --no-create-home llmpipe
USER 10001
EXPOSE 8000 9101 9102
CMD ["python", "-m", "gpu_stage", "--help"]

# ---- gpu: app + cuDF (its wheels bring the CUDA runtime; the host needs only the driver)
FROM app AS gpu
USER root
# The kernel cache folder exists, owned by the worker's user, so a volume mounted there is writable.
RUN pip install ".[gpu]" && install -d -o 10001 /var/cache/llmpipe/kernels
USER 10001

# ---- flink: JobManager/TaskManager/submitter image with PyFlink and the connector jars
FROM flink:2.2.1-scala_2.12-java17 AS flink
USER root
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv \
    && ln -s /opt/venv/bin/python /usr/local/bin/python
ENV PATH=/opt/venv/bin:$PATH
COPY --from=jars /jars/ /opt/flink/lib/
# The Prometheus reporter (metrics.reporter.prom.*) needs nothing here: Flink 2.x ships it as a plugin,
# plugins/metrics-prometheus/flink-metrics-prometheus-<version>.jar, and opt/ no longer has it.
# /flink-data: checkpoints, savepoints and HA metadata (docker-compose.yml mounts a volume there); owned by
# the flink user so a new volume, which takes the folder's owner, is writable.
RUN install -d -o flink -g flink /flink-data
WORKDIR /opt/llmpipe
COPY pyproject.toml README.md ./
COPY llmpipe llmpipe
COPY jobs jobs
COPY connector connector
COPY gpu_stage gpu_stage
COPY vllm_sim vllm_sim
COPY stack stack
COPY bench bench
COPY replay replay
COPY demo demo
RUN pip install ".[flink]"
USER flink
