# attnmt serve in a container, on CPUs (docs/serving.md, "Running as a service"). In the checkout,
# after `attnmt demo` has written attnmt-demo/model.safetensors there:
#   docker build -t attnmt .
#   docker run --rm -p 8000:8000 -v "$PWD/attnmt-demo/model.safetensors:/models/model.safetensors:ro" attnmt
# The mounted path must be an existing file: for a missing one docker makes an empty folder there.
# Flags after the image name go to `attnmt serve` (e.g. --api-keys /keys/keys.txt --precision auto).
FROM python:3.11-slim

# The CPU build of torch first, from PyTorch's CPU index, so that installing attnmt never pulls a
# CUDA build (about 2 GB more); then attnmt itself, without its tests or development tools.
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

WORKDIR /src
COPY pyproject.toml README.md ./
COPY attnmt ./attnmt
RUN pip install --no-cache-dir . \
    && useradd --system --create-home --uid 10001 --user-group attnmt \
    && mkdir /models

# Not root: the model is only read, and nothing in the image is the server's to change.
USER 10001
WORKDIR /home/attnmt
ENV PYTHONUNBUFFERED=1

EXPOSE 8000
# /health runs no model and needs no key: 200 while the server answers. The slim image has no
# curl, so Python asks; urlopen fails (exit 1) on an error status or no answer.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]

# The model is mounted read-only at /models/model.safetensors. On SIGTERM (docker stop) the server
# answers the requests in flight and exits 0; docker stop waits 10 s by default.
ENTRYPOINT ["attnmt", "serve", "/models/model.safetensors", "--host", "0.0.0.0", "--port", "8000"]
