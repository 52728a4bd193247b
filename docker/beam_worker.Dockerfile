# Worker image for data generation on Dataflow, Flink or Spark (BUILD.md, "Data generation on
# Apache Beam"). The Beam SDK version must equal the launcher's (pyproject.toml, [beam]).
#   docker build -f docker/beam_worker.Dockerfile -t IMAGE . && docker push IMAGE
FROM apache/beam_python3.11_sdk:2.77.0
COPY pyproject.toml requirements.txt README.md /src/albert_tf/
COPY albert_tf /src/albert_tf/albert_tf
RUN pip install --no-cache-dir "/src/albert_tf[beam]"
